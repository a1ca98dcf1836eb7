"""The recipe catalog: which (workload, model, framework) can be launched, and how.

An entry names its script in the field its framework reads (``recipe_field``),
relative to the framework's directory under ``<recipes_dir>``: a NeMo entry a
``script`` under ``nemo`` (run by ``run.py -s``), a NeMo-RL entry a ``job_script``
under ``nemo_rl`` (run by ``launch.sh --job_script``) with fixed ``args``.
``overrides`` lists the keys a user may set on the ``/train`` line and the pattern
each value must fully match. The built-in catalog is every framework's
``default_recipes()``; the config file's ``recipes:`` replace or add entries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from cluster.launching.parts import OVERRIDE_KEY_PATTERN, OVERRIDE_VALUE_PATTERN
from cluster.site.framework_registry import FrameworkName, Workload, frameworks, registered

MODEL_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
_ARG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:+,@=-]{0,299}")
_SCRIPT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*")


def _check_script(value: str | None) -> str | None:
    if value is not None and (not _SCRIPT_RE.fullmatch(value) or ".." in value.split("/")):
        raise ValueError(f"must be a relative path of letters, digits and . _ - / (got {value!r})")
    return value


def _check_arg(value: str) -> str:
    if not _ARG_RE.fullmatch(value):
        raise ValueError(
            f"must be one word of letters, digits and . _ / : + , @ = - (got {value!r})"
        )
    return value


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"is not a valid regular expression ({exc}): {value!r}") from None
    return value


ScriptPath = Annotated[str | None, AfterValidator(_check_script)]
OverrideKey = Annotated[str, Field(pattern=OVERRIDE_KEY_PATTERN)]


class RecipeEntry(BaseModel):
    """One launchable recipe."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    workload: Workload
    """What it trains: NeMo `pretrain`, `cpt`, `sft`; NeMo-RL `sft`, `dpo`, `grpo`, `rm`."""
    model: str = Field(pattern=MODEL_PATTERN)
    """The model's name in `/train` (lower-case letters, digits, `.`, `_`, `-`)."""
    framework: FrameworkName
    """The framework that runs it: `nemo`, `nemo-rl` or `megatron-bridge`."""
    script: ScriptPath = None
    """NeMo: the recipe script (`run.py -s`), relative to `<recipes_dir>/nemo`."""
    job_script: ScriptPath = None
    """NeMo-RL: the job script, relative to `<recipes_dir>/nemo_rl`."""
    args: tuple[Annotated[str, AfterValidator(_check_arg)], ...] = ()
    """Fixed arguments every launch passes (NeMo-RL overrides such as `policy.model_name=...`)."""
    overrides: dict[OverrideKey, Annotated[str, AfterValidator(_check_regex)]] = Field(
        default_factory=dict
    )
    """Keys people may set with `key=value`, each with the regular expression its value must fully
    match."""
    default_nodes: int = Field(default=1, ge=1, le=4096)
    """Nodes when `/train` has no `nodes=`."""
    description: str = Field(default="", max_length=200)
    """Shown in `/train recipes`."""

    @model_validator(mode="after")
    def _check_framework_fields(self) -> RecipeEntry:
        fw = registered(self.framework)
        if self.workload not in fw.workloads:
            raise ValueError(
                f"{self.framework} does not run {self.workload}; it runs {', '.join(fw.workloads)}"
            )
        field = fw.recipe_field
        other = next(f for f in ("script", "job_script") if f != field)
        if getattr(self, field) is None or getattr(self, other) is not None:
            raise ValueError(f"a {self.framework} recipe needs '{field}' (and no '{other}')")
        return self

    @property
    def script_file(self) -> str:
        """The script, relative to the framework's directory (``sft/llama3p1_8b_sft.py``)."""
        return str(getattr(self, registered(self.framework).recipe_field))

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.workload, self.model, self.framework)

    @property
    def script_path(self) -> str:
        """The script relative to ``<recipes_dir>``, e.g. ``nemo/sft/llama3p1_8b_sft.py``."""
        return f"{registered(self.framework).subdir}/{self.script_file}"

    def check_override(self, key: str, value: str) -> bool:
        """Whether ``key=value`` is allowed for this recipe."""
        pattern = self.overrides.get(key)
        return (
            pattern is not None
            and re.fullmatch(OVERRIDE_VALUE_PATTERN, value) is not None
            and re.fullmatch(pattern, value) is not None
        )


class RecipeCatalog(BaseModel):
    """All launchable recipes, in display order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entries: tuple[RecipeEntry, ...] = ()

    @model_validator(mode="after")
    def _check_unique(self) -> RecipeCatalog:
        seen: set[tuple[str, str, str]] = set()
        for entry in self.entries:
            if entry.key in seen:
                raise ValueError("duplicate recipe {} {} ({})".format(*entry.key))
            seen.add(entry.key)
        return self

    def find(self, workload: str, model: str, framework: str) -> RecipeEntry | None:
        for entry in self.entries:
            if entry.key == (workload, model, framework):
                return entry
        return None

    def models(self, workload: str | None = None, framework: str | None = None) -> list[str]:
        return _unique(
            e.model
            for e in self.entries
            if workload in (None, e.workload) and framework in (None, e.framework)
        )

    def frameworks(self, workload: str, model: str) -> list[str]:
        return _unique(
            e.framework for e in self.entries if (e.workload, e.model) == (workload, model)
        )

    def merged(self, extra: Sequence[RecipeEntry]) -> RecipeCatalog:
        """This catalog with ``extra`` entries replacing same-key ones and adding the rest."""
        replacing = {e.key: e for e in extra}
        kept = [replacing.pop(e.key, e) for e in self.entries]
        return RecipeCatalog(entries=(*kept, *(e for e in extra if e.key in replacing)))


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def default_catalog() -> RecipeCatalog:
    """The built-in catalog: each framework's own recipes, in registration order."""
    return RecipeCatalog(
        entries=tuple(
            RecipeEntry.model_validate({**fields, "framework": fw.name})
            for fw in frameworks().values()
            for fields in fw.default_recipes()
        )
    )


DEFAULT_CATALOG = default_catalog()
