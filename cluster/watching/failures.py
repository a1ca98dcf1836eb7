"""The failure catalog as data: the shipped ``failures.yaml`` and a site's own entries.

:class:`FailureRule` is one entry as written, in the shipped file or under
``failures:`` in trainbot.yaml; :func:`build_catalog` checks a site's entries
against the built-in ones and returns the catalog :func:`cluster.watching.diagnosis.diagnose`
reads, in priority order. A site entry whose key is built in changes the fields it
gives (a new reaction, a cap, more patterns replace the old ones); a new key adds
an entry, checked before the built-in ones (a site's own rule is more specific).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cluster.slurm.base import STATES

CATALOG_FILE = "failures.yaml"
NODE_FAILURE_ON = r"\bNode failure on \S"  # srun's line: evidence only for the job's own node
RULE_KEY_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
# Built-in entries a site cannot change, and why.
FIXED = {
    "cancelled": "a cancelled job is never retried: the person who cancelled it decides",
    "silent_hang": "the progress watcher finds it; set watch.hang_min_s and "
    "watch.hang_step_factor instead",
}


class Reaction(StrEnum):
    RETRY = "retry"  # transient: retry as is
    RETRY_WITH_FIX = "retry_with_fix"  # retry once; then fix (seed the cache) first
    RETRY_RESUME = "retry_resume"  # retry from the newest checkpoint
    RETRY_IF_PROGRESS = "retry_if_progress"  # retry only if a newer checkpoint exists
    RETRY_WITHOUT_NODE = "retry_without_node"  # from the newest checkpoint, without the node
    TELL_USER = "tell_user"  # a retry would fail the same way
    PAGE = "page"  # page on-call, no automatic retry


@dataclass(frozen=True)
class FailureKind:
    """One catalog entry. ``states`` match Slurm states by prefix (``CANCELLED by 0``);
    ``exit_codes`` the job's exit code as sacct records it (``137:0`` is 137)."""

    key: str
    cause: str
    reaction: Reaction
    hint: str = ""
    patterns: tuple[re.Pattern[str], ...] = ()
    states: tuple[str, ...] = ()
    page_oncall: bool = False  # page on the first occurrence
    page_oncall_on_repeat: bool = False
    exclude_node: bool = False  # retry without the failed node when it is known
    no_retry: str = "a retry would fail the same way"
    exit_codes: tuple[int, ...] = ()
    names_node: bool = False  # a matching line (or a rank in it) can name the faulty node
    max_retries: int | None = None  # how often this cause is retried in one launch


XidNumber = Annotated[int, Field(ge=1, le=999)]
ExitCode = Annotated[int, Field(ge=1, le=255)]


class FailureRule(BaseModel):
    """One catalog entry as written (see ``failures.yaml`` for the fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    key: str = Field(pattern=RULE_KEY_PATTERN)
    """The entry's name; a built-in entry's key changes that entry."""
    cause: str | None = Field(default=None, min_length=1, max_length=200)
    """The cause in plain words, as the thread says it (no final full stop)."""
    reaction: Reaction | None = None
    """What trainbot does: `retry`, `retry_with_fix`, `retry_resume`, `retry_if_progress`,
    `retry_without_node`, `tell_user` or `page`."""
    hint: str | None = Field(default=None, max_length=400)
    """What to do, said with the cause."""
    no_retry: str | None = Field(default=None, min_length=1, max_length=200)
    """Why it is not retried, said when it is not."""
    patterns: tuple[str, ...] | None = None
    """Python regular expressions (case-insensitive) matched against the job's log lines."""
    xids: tuple[XidNumber, ...] | None = None
    """NVIDIA Xid numbers that match, from the kernel log lines a job's output carries."""
    exit_codes: tuple[ExitCode, ...] | None = None
    """The job's exit codes (as sacct records them) that match."""
    states: tuple[str, ...] | None = None
    """Slurm states that match (by prefix)."""
    page: Literal["never", "first", "repeat"] | None = None
    """When on-call is paged: `never`, `first` (its first occurrence in a launch) or `repeat` (when
    it happens again)."""
    exclude_node: bool | None = None
    """Retry without the node the failure names."""
    names_node: bool | None = None
    """The matching line can name the faulty node."""
    max_retries: int | None = Field(default=None, ge=0, le=20)
    """How often this cause is retried in one launch."""

    @model_validator(mode="after")
    def _check(self) -> FailureRule:
        problems = [*self._pattern_problems(), *self._state_problems()]
        if self.cause is not None and self.cause.rstrip().endswith("."):
            problems.append(f"cause: end it without a full stop (got {self.cause!r})")
        if problems:
            raise ValueError(f"entry {self.key!r}: " + "; ".join(problems))
        return self

    def _pattern_problems(self) -> list[str]:
        problems = []
        for number, pattern in enumerate(self.patterns or ()):
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.append(
                    f"patterns[{number}]: {pattern!r} is not a valid regular expression "
                    f"({exc.msg} at position {exc.pos}); write a Python regular expression, "
                    r"e.g. 'CUDA error: out of memory' or 'Xid \(PCI:[^)]*\): 79' "
                    r"(escape ( ) [ ] . * + ? with \)"
                )
            else:
                if not pattern.strip():
                    problems.append(f"patterns[{number}]: must not be empty")
        return problems

    def _state_problems(self) -> list[str]:
        return [
            f"states[{number}]: {state!r} is not a Slurm state (known: {', '.join(STATES)})"
            for number, state in enumerate(self.states or ())
            if state not in STATES
        ]

    def matchers(self) -> int:
        return sum(len(x or ()) for x in (self.patterns, self.xids, self.exit_codes, self.states))


def xid_pattern(xids: Sequence[int]) -> str:
    """The NVIDIA driver's ``NVRM: Xid (PCI:0000:3b:00): 79, pid=...`` for these Xids."""
    return r"\bXid \((?:PCI:)?[0-9A-Fa-f:.]+\): (?:" + "|".join(map(str, xids)) + r")\b"


def to_kind(rule: FailureRule) -> FailureKind:
    """A complete rule (cause and reaction given) as the catalog entry diagnose() reads."""
    assert rule.cause is not None and rule.reaction is not None, rule.key
    texts = list(rule.patterns or ())
    if rule.xids:
        texts.append(xid_pattern(rule.xids))
    kind = FailureKind(
        key=rule.key,
        cause=rule.cause,
        reaction=rule.reaction,
        hint=rule.hint or "",
        patterns=tuple(re.compile(t, re.IGNORECASE) for t in texts),
        states=rule.states or (),
        page_oncall=rule.page == "first",
        page_oncall_on_repeat=rule.page == "repeat",
        exclude_node=bool(rule.exclude_node) or rule.reaction is Reaction.RETRY_WITHOUT_NODE,
        exit_codes=rule.exit_codes or (),
        names_node=bool(rule.names_node),
        max_retries=rule.max_retries,
    )
    return kind if rule.no_retry is None else replace(kind, no_retry=rule.no_retry)


@cache
def builtin_rules() -> tuple[FailureRule, ...]:
    """The shipped catalog, as written (in priority order)."""
    text = resources.files("cluster.watching").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    try:
        rules = tuple(FailureRule.model_validate(item) for item in data)
    except ValidationError as exc:  # a packaging error, not a site's: fail loudly
        raise RuntimeError(f"cluster/{CATALOG_FILE} is broken: {exc}") from None
    return rules


@cache
def builtin_catalog() -> tuple[FailureKind, ...]:
    """The shipped catalog as diagnose() reads it."""
    return build_catalog()


def merged_rule(base: FailureRule, site: FailureRule) -> FailureRule:
    """``base`` with every field ``site`` gives replaced."""
    given = site.model_dump(exclude_unset=True, exclude={"key"})
    return base.model_copy(update=given)


def build_catalog(site: Sequence[FailureRule] = ()) -> tuple[FailureKind, ...]:
    """The built-in catalog with a site's entries (``failures:``) applied. Raises
    ValueError (``failures[2]: ...``) for an entry that cannot be used."""
    rules = list(builtin_rules())
    index = {rule.key: number for number, rule in enumerate(rules)}
    added: list[FailureRule] = []
    seen: set[str] = set()
    problems: list[str] = []
    for number, rule in enumerate(site):
        where = f"failures[{number}]"
        if rule.key in seen:
            problems.append(f"{where}: {rule.key!r} is given twice; merge the two entries")
            continue
        seen.add(rule.key)
        if rule.key in FIXED:
            problems.append(f"{where}: {rule.key!r} cannot be changed here: {FIXED[rule.key]}")
        elif rule.key in index:
            rules[index[rule.key]] = merged_rule(rules[index[rule.key]], rule)
        elif rule.cause is None or rule.reaction is None or not rule.matchers():
            known = ", ".join(r.key for r in builtin_rules())
            problems.append(
                f"{where}: {rule.key!r} is not a built-in entry (built in: {known}), so it "
                "is a new one and needs cause:, reaction: and at least one of patterns:, "
                "xids:, exit_codes: or states:"
            )
        else:
            added.append(rule)
    if problems:
        raise ValueError("; ".join(problems))
    return tuple(to_kind(rule) for rule in (*added, *rules))
