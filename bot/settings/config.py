"""The config file (``trainbot.yaml``): clusters, recipes, policy, retention, and the
sections of ``bot.settings.sections`` (alerts, report, watch, delivery).

:func:`load_config` reads and checks it. Any problem is a ConfigError naming the
file, the field path and what is wrong, e.g.
``trainbot.yaml: clusters.a4.max_nodes: must be >= 1 (got 0)``.
``trainbot.example.yaml`` documents every field. Secrets never live in the
file: it names environment variables or login-node files that hold them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bot.settings.config_errors import config_error
from bot.settings.sections import Alerts, Delivery, Report, Watch
from cluster.errors import ConfigError
from cluster.launching.recipes import DEFAULT_CATALOG, RecipeCatalog, RecipeEntry
from cluster.site.profile_fields import CLUSTER_NAME_PATTERN
from cluster.site.profiles import ClusterProfile
from cluster.watching.failures import FailureKind, FailureRule, build_catalog
from commands.context import CommandContext
from commands.policy import BudgetRule, Policy, PolicyRule, TeamBudgetRule
from commands.rules import ANY, ApproverRule, ImageRule, ViewerRule

ClusterName = Annotated[str, Field(pattern=CLUSTER_NAME_PATTERN)]
DAY_S = 86400


@dataclass(frozen=True)
class Retention:
    """How long a finished launch's record (``launch_s``) and its history entry
    (``history_s``) stay in Redis."""

    launch_s: int = 90 * DAY_S
    history_s: int = 400 * DAY_S


class RetentionDays(BaseModel):
    """How long finished launches stay in Redis, in days."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    launches_days: float = Field(default=90, gt=0, le=3650)
    """Days a finished launch's whole record (its thread's state, `/logs`, the buttons) is kept;
    `/jobs history` outlives it. Active launches never expire."""
    history_days: float = Field(default=400, gt=0, le=3650)
    """Days the short entry `/jobs history` shows, and the charges `/usage` counts, are kept (at
    least `launches_days`)."""

    @model_validator(mode="after")
    def _history_outlives_launches(self) -> RetentionDays:
        if self.history_days < self.launches_days:
            raise ValueError(
                f"history_days must be >= launches_days ({self.launches_days:g}) "
                f"(got {self.history_days:g})"
            )
        return self

    def store(self) -> Retention:
        return Retention(
            launch_s=int(self.launches_days * DAY_S), history_s=int(self.history_days * DAY_S)
        )


class Config(BaseModel):
    """The whole config file. Cluster names come from the keys under ``clusters``."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    clusters: dict[ClusterName, ClusterProfile] = Field(min_length=1)
    """The clusters, by name: the name is what `cluster=` takes (lower-case letters, digits, `-` and
    `_`). The first is the default unless `default_cluster` names another."""
    default_cluster: str | None = None
    """The cluster used when `/train` has no `cluster=`; null: the first one."""
    recipes: tuple[RecipeEntry, ...] = ()
    """Recipe catalog entries. One with the workload, model and framework of a built-in entry
    replaces it; others are added. `/train recipes` lists the result."""
    default_recipes: bool = True
    """true: the built-in catalog under `recipes`; false: only `recipes`."""
    policy: Policy = Field(default_factory=Policy)
    """Who may launch where, and with what limits, approvals and budgets. Without rules only admins
    can launch."""
    alerts: Alerts = Field(default_factory=Alerts)
    """Where on-call hears about trouble: a Slack channel, a user group, a paging webhook."""
    watch: Watch = Field(default_factory=Watch)
    """How runs are babysat: retries, hangs, start-up, training health."""
    retention: RetentionDays = Field(default_factory=RetentionDays)
    """How long finished launches and their history are kept in Redis."""
    failures: tuple[FailureRule, ...] = ()
    """The failure catalog's site entries: new causes, or changes to built-in ones
    (docs/failures.md)."""
    delivery: Delivery = Field(default_factory=Delivery)
    """How long what could not be delivered (Slack or the webhook down, a channel that refuses the
    bot, a queue entry that kept failing inside trainbot) is tried again, as a dead letter,
    before it is given up."""
    report: Report | None = None
    """The usage report, posted on a schedule; left out: none."""

    @model_validator(mode="before")
    @classmethod
    def _name_clusters(cls, data: Any) -> Any:
        """Give each cluster its key as ``name``; drop explicit nulls of optional sections."""
        if not isinstance(data, dict):
            return data
        data = {k: v for k, v in data.items() if v is not None or k == "default_cluster"}
        clusters = data.get("clusters")
        if isinstance(clusters, dict):
            data["clusters"] = {
                key: {"name": key, **value} if isinstance(value, dict) else value
                for key, value in clusters.items()
            }
        return data

    @model_validator(mode="after")
    def _check_links(self) -> Config:
        problems = list(self._link_problems())
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _link_problems(self) -> list[str]:
        known = ", ".join(self.clusters)
        problems: list[str] = []
        for key, profile in self.clusters.items():
            if profile.name != key:
                problems.append(f"clusters.{key}.name: must be {key!r} (got {profile.name!r})")
        if self.default_cluster is not None and self.default_cluster not in self.clusters:
            problems.append(
                f"default_cluster: {self.default_cluster!r} is not a cluster (known: {known})"
            )
        sections: dict[
            str,
            tuple[
                PolicyRule | ApproverRule | ViewerRule | ImageRule | BudgetRule | TeamBudgetRule,
                ...,
            ],
        ] = {
            "rules": self.policy.rules,
            "approvers": self.policy.approvers,
            "log_viewers": self.policy.log_viewers,
            "custom_images": self.policy.custom_images,
            "budgets": self.policy.budgets,
            "team_budgets": self.policy.team_budgets,
        }
        for section, rules in sections.items():
            for number, rule in enumerate(rules):
                for name in rule.clusters:
                    if name != ANY and name not in self.clusters:
                        problems.append(
                            f"policy.{section}[{number}].clusters: {name!r} is not a cluster "
                            f'(known: {known}, or "*")'
                        )
        problems += self._placement_problems()
        problems += self._image_dir_problems()
        try:
            self.failure_catalog  # noqa: B018 - builds and checks the site's entries
        except ValueError as exc:
            problems.append(str(exc))
        try:
            self.catalog  # noqa: B018 - builds and checks the merged catalog
        except ValidationError as exc:
            problems.append(f"recipes: {exc.errors()[0]['msg'].removeprefix('Value error, ')}")
        return problems

    def _placement_problems(self) -> list[str]:
        """``auto`` is ``cluster=auto``, never a cluster; ``policy.placement.defaults``
        name clusters that exist."""
        problems = []
        if "auto" in self.clusters:
            problems.append('clusters.auto: "auto" means cluster=auto; name the cluster otherwise')
        for number, entry in enumerate(self.policy.placement.defaults):
            if entry.cluster != "auto" and entry.cluster not in self.clusters:
                problems.append(
                    f"policy.placement.defaults[{number}].cluster: {entry.cluster!r} is not a "
                    f'cluster (known: {", ".join(self.clusters)}, or "auto")'
                )
        return problems

    def _image_dir_problems(self) -> list[str]:
        """``~/`` directories of ``policy.custom_images`` on clusters with ``identity``: there
        ``~`` is the home of whoever launches, which they can write, so such a directory
        reviews nothing."""
        problems: list[str] = []
        for number, rule in enumerate(self.policy.custom_images):
            covered = self.clusters if ANY in rule.clusters else rule.clusters
            personal = [c for c in covered if c in self.clusters and self.clusters[c].identity]
            for place, folder in enumerate(rule.dirs):
                if personal and folder.startswith("~"):
                    problems.append(
                        f"policy.custom_images[{number}].dirs[{place}]: {folder!r} is in the home "
                        f"of whoever launches, and on {', '.join(personal)} (identity) each person "
                        "launches as themselves and can write their own home; use an absolute "
                        "directory only trainbot's admins can write (such as /shared/images/"
                        "reviewed)"
                    )
        return problems

    @cached_property
    def catalog(self) -> RecipeCatalog:
        """The built-in catalog with ``recipes`` replacing or adding entries."""
        if self.default_recipes:
            return DEFAULT_CATALOG.merged(self.recipes)
        return RecipeCatalog(entries=self.recipes)

    @cached_property
    def failure_catalog(self) -> tuple[FailureKind, ...]:
        """The built-in failure catalog with ``failures`` applied (cluster.watching.failures)."""
        return build_catalog(self.failures)

    def command_context(self) -> CommandContext:
        """What the command parser needs from this config."""
        return CommandContext(
            clusters=dict(self.clusters),
            catalog=self.catalog,
            policy=self.policy,
            default_cluster=self.default_cluster,
        )


def load_config(path: str | Path) -> Config:
    """Read and check the config file at ``path``, or raise ConfigError."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            "file not found (set TRAINBOT_CONFIG or --config; trainbot.example.yaml "
            "shows the format)",
            source=source,
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read it ({exc})", source=source) from None
    return parse_config(text, source=source, base_dir=Path(path).parent)


def parse_config(text: str, *, source: str = "config", base_dir: Path | None = None) -> Config:
    """Check config text; relative local paths (SSH key, known_hosts) start at ``base_dir``."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}not valid YAML ({problem})", source=source) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            "must be a mapping with clusters:, recipes:, policy: and alerts:", source=source
        )
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, source, Config) from None
    return _resolve_local_paths(config, base_dir) if base_dir is not None else config


def _resolve_local_paths(config: Config, base_dir: Path) -> Config:
    """Key, CA key and known_hosts paths (the jump hosts' too): ``~`` expanded, relative
    ones taken from ``base_dir``."""

    def local(value: Path | None) -> Path | None:
        if value is None:
            return None
        value = value.expanduser()
        return value if value.is_absolute() else (base_dir / value).resolve()

    clusters = {
        name: profile.model_copy(
            update={
                "login": profile.login.model_copy(
                    update={
                        "key_file": local(profile.login.key_file),
                        "known_hosts_file": local(profile.login.known_hosts_file),
                        "user_ca_key_file": local(profile.login.user_ca_key_file),
                        "jump": tuple(
                            hop.model_copy(
                                update={
                                    "key_file": local(hop.key_file),
                                    "known_hosts_file": local(hop.known_hosts_file),
                                }
                            )
                            for hop in profile.login.jump
                        ),
                    }
                )
            }
        )
        for name, profile in config.clusters.items()
    }
    return config.model_copy(update={"clusters": clusters})
