"""The failure catalog (FIELD_GUIDE section 5) as data, and what to do about each failure.

Pure functions only: :func:`diagnose` reads a job's :class:`~cluster.watching.evidence.Evidence`
(every file it left and Slurm's record of it) and names the most specific known
failure; :func:`retry_decision` turns that into a bounded retry plan with the
sentence the thread shows.

:data:`CATALOG` (the shipped ``cluster/watching/failures.yaml``; a site's config adds to it,
see :mod:`cluster.watching.failures`) is in priority order: the first entry that matches
wins. Causes come before their symptoms (a node failure or a GPU OOM makes the
other ranks report NCCL errors, so NCCL comes late), and an entry matches on a log
line or on the job's Slurm state or exit code, so a matching log line beats a bare
``FAILED``.
``srun: error: <host>: task <n>: Exited with exit code <rc>`` is never a cause.

What the text can tell about nodes (:attr:`Diagnosis.failed_node`): a node is named as
*faulty* only from hardware evidence (entries with ``names_node``): srun's ``Node
failure on <host>``, an ``uncorrectable ECC error`` or Xid line that names a host
(``<host>: ...``, ``on host <host>``, syslog's ``<host> kernel:``) or a rank whose task
srun reports (``[rank5]`` + ``srun: error: a4-1: task 5: ...``), or a
``NODE_FAIL``/``BOOT_FAIL`` record whose NodeList is one node. A node name read from
text counts only if it is a valid Slurm host name inside the job's own node list: text
that names any other node changes nothing, and srun's ``Node failure on <host>`` naming
no node of the job is no evidence of a node failure at all. For a multi-node NODE_FAIL,
sacct does not say which node died (``sinfo -R`` does, not this module). The host of the
first ``srun: error`` task line is only where the first task ended
(:attr:`Diagnosis.first_exit_node`), never a node to exclude.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cluster.slurm.base import HOSTNAME_RE, TERMINAL_STATES, expand_hostlist, normalize_state
from cluster.watching.evidence import Evidence
from cluster.watching.failures import NODE_FAILURE_ON, FailureKind, Reaction, builtin_catalog

MAX_EVIDENCE = 5
MAX_LINE_CHARS = 300
_SCAN_CHARS = 4000  # of each line, for matching: bounds the work on huge lines
_TAIL_LINES = MAX_EVIDENCE - 1  # an unknown failure's last lines, then its Slurm state line


R = Reaction
# The built-in catalog (cluster/watching/failures.yaml); a site's config makes its own with
# cluster.watching.failures.build_catalog and passes it to diagnose().
CATALOG: tuple[FailureKind, ...] = builtin_catalog()
UNKNOWN = FailureKind(
    "unknown", "it failed for a reason trainbot does not recognise", R.TELL_USER,
    "See the log lines below (/logs for more).", no_retry="the cause is unknown",
)  # fmt: skip
BY_KEY: dict[str, FailureKind] = {kind.key: kind for kind in (*CATALOG, UNKNOWN)}

_SRUN_TASK_RE = re.compile(r"srun: error: (?P<host>[\w.-]+): tasks? (?P<tasks>[\d,-]+): ")
_NODE_FAILURE_RE = re.compile(r"Node failure on (?P<host>[\w.-]+)\b(?![\[,])")
_ECC_HOST_RE = re.compile(
    r"^(?P<host>[a-z][\w.-]*\d[\w.-]*): |\bon (?:host|node) (?P<on>[\w.-]+)"
    # the kernel log as syslog writes it: "Mar  3 10:00:01 a4-1 kernel: NVRM: Xid ..."
    r"|^\w{3} +\d+ [\d:]+ (?P<sys>[\w.-]+) kernel: "
)
_HARDWARE_LINE_RE = re.compile(r"ecc|\bxid\b", re.IGNORECASE)
_RANK_RE = re.compile(r"\[rank ?(\d+)\]", re.IGNORECASE)
# Megatron's re-run state machine names the node of the rank whose result it checked:
# "Rank 0, node <host>, device 0, iteration #13: First rerun: ..." (megatron-core 0.19.2,
# megatron/core/rerun_state_machine.py; as captured on a GPU, tests/cluster/data/megatron/captured).
_RERUN_NODE_RE = re.compile(r"\bRank \d+, node (?P<host>[\w.-]+), device \d+, iteration #\d+:")
_ERRORISH_RE = re.compile(r"error|exception|traceback|fatal|killed|abort", re.IGNORECASE)
_FORCE_TERMINATED_RE = re.compile(r"^srun: Force Terminated (?:StepId|job step)")
_PERSON_CANCEL_RE = re.compile(r"CANCELLED by [1-9][0-9]*")
_NOISE_RE = re.compile(r"^\+ |^srun: (?:error: [\w.-]+: tasks? [\d,-]+: |launch/|Force Term)")


@dataclass(frozen=True)
class Diagnosis:
    """What went wrong: the catalog entry, the log lines that show it, and where."""

    kind: FailureKind
    evidence: tuple[str, ...]
    failed_node: str | None = None  # a node known to be faulty (see the module text)
    first_exit_node: str | None = None  # where the first task ended: a symptom only
    rank: int | None = None
    slurm_state: str | None = None
    requeued_by_slurm: bool = False  # an earlier incarnation failed; Slurm runs it again
    read: str = ""  # which files were read (said when the cause is unknown)
    output_cut: bool = False  # srun force-terminated the step: its last output may be lost
    underlying: str = ""  # a wrapper's (Ray's, vLLM's) own cause, printed above it

    @property
    def key(self) -> str:
        return self.kind.key

    @property
    def reaction(self) -> Reaction:
        return self.kind.reaction

    @property
    def cause(self) -> str:
        """The cause in plain words, with the rank or node when known."""
        where = [f"rank {self.rank}"] if self.rank is not None else []
        where += [f"node {self.failed_node}"] if self.failed_node else []
        cause = f"{self.kind.cause} ({', '.join(where)})" if where else self.kind.cause
        return f"{cause}; underneath: {self.underlying}" if self.underlying else cause


# Failures that wrap another: Ray's actor death and vLLM's dead engine report a cause that
# their own traceback, printed above them, names ("See stack trace (above) for the root
# cause", vllm/v1/engine/exceptions.py).
WRAPPERS = frozenset({"ray_actor_died", "vllm_engine_dead"})
_EXCEPTION_RE = re.compile(
    r"(?:^|[\s:\]])(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?:\([^)]*\))?: \S.*)$"
)


def _underlying(kind: FailureKind, scan: Sequence[str]) -> str:
    """The last exception line above the first line that shows ``kind`` (a wrapper)."""
    first = next((i for i, ln in enumerate(scan) if any(p.search(ln) for p in kind.patterns)), -1)
    for line in reversed(scan[:first] if first > 0 else []):
        found = _EXCEPTION_RE.search(line)
        if found and not any(p.search(line) for p in kind.patterns):
            return _cut(found["exc"])[:200]
    return ""


def _cut(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def _shows(kind: FailureKind, line: str, own_nodes: Sequence[str]) -> bool:
    """Whether ``line`` is evidence of ``kind``. A line that shows a node failure only by
    naming the node (``Node failure on <host>``) is, when that host is one of the job's."""
    matched = [p for p in kind.patterns if p.search(line)]
    if not matched or any(p.pattern != NODE_FAILURE_ON for p in matched):
        return bool(matched)
    named = _NODE_FAILURE_RE.search(line)
    return named is not None and named["host"] in own_nodes


def _single_node(node_list: str) -> str | None:
    text = node_list.strip()
    if not text or any(c in text for c in "[], ") or text.lower().startswith("none"):
        return None
    return text


def _task_hosts(lines: Sequence[str]) -> dict[int, str]:
    hosts: dict[int, str] = {}
    for line in lines:
        if m := _SRUN_TASK_RE.search(line):
            for part in m["tasks"].split(","):
                lo, _, hi = part.partition("-")
                if lo.isdigit() and (hi.isdigit() or not hi):
                    for task in range(int(lo), int(hi or lo) + 1):
                        hosts.setdefault(task, m["host"])
    return hosts


def _faulty_node(
    kind: FailureKind, hits: Sequence[str], lines: Sequence[str], node_list: str, by_state: bool
) -> str | None:
    """The faulty node, only if it is a valid host name in the job's own node list."""
    node = _named_node(kind, hits, lines, node_list, by_state)
    if node is None or not HOSTNAME_RE.fullmatch(node):
        return None
    return node if node in expand_hostlist(node_list) else None


def _named_node(
    kind: FailureKind, hits: Sequence[str], lines: Sequence[str], node_list: str, by_state: bool
) -> str | None:
    if not kind.names_node:
        return None
    for line in hits:
        if m := _NODE_FAILURE_RE.search(line):
            return m["host"]
        if m := _RERUN_NODE_RE.search(line):
            return m["host"]
    for line in (ln for ln in hits if _HARDWARE_LINE_RE.search(ln)):
        if m := _ECC_HOST_RE.search(line):
            return m["on"] or m["host"] or m["sys"]
        if (r := _RANK_RE.search(line)) and (host := _task_hosts(lines).get(int(r.group(1)))):
            return host
    return _single_node(node_list) if by_state else None


def _error_tail(lines: Sequence[str]) -> tuple[str, ...]:
    """The last few lines worth showing for an unknown failure (errors first)."""
    useful = [ln for ln in lines if ln.strip() and not _NOISE_RE.search(ln)]
    errors = [ln for ln in useful if _ERRORISH_RE.search(ln)]
    chosen = errors[-_TAIL_LINES:] or useful[-_TAIL_LINES:]
    if not chosen:
        chosen = [ln for ln in lines if ln.strip()][-_TAIL_LINES:]
    return tuple(_cut(ln) for ln in chosen)


def _state_line(raw: str, exit_code: str, node_list: str, extra: Sequence[str] = ()) -> str:
    parts = [f"Slurm state {raw.strip()}"]
    parts += [f"exit code {exit_code}"] if exit_code else []
    parts += [e for e in extra if e]
    parts += [f"nodes {node_list}"] if node_list else []
    return ", ".join(parts)


def _exit_status(exit_code: str) -> int | None:
    """sacct's ``137:0`` as 137 (None when not a number or 0)."""
    head = exit_code.partition(":")[0].strip()
    return int(head) if head.isdigit() and int(head) else None


def _cancelled_by_person(
    slurm_state: str | None, catalog: Sequence[FailureKind]
) -> FailureKind | None:
    """The catalog's ``cancelled`` entry when a person cancelled the job: sacct's ``CANCELLED
    by <uid>`` with a uid other than root's (a ``scancel`` typed on the login node, by the
    job's own user or an operator as themselves). Slurm's own ends read otherwise
    (TIMEOUT, PREEMPTED, NODE_FAIL) or ``CANCELLED by 0``, which stay diagnosed as before."""
    found = _PERSON_CANCEL_RE.fullmatch(slurm_state or "")
    if found is None:
        return None
    return next((kind for kind in catalog if kind.key == "cancelled"), None)


def diagnose(evidence: Evidence, catalog: Sequence[FailureKind] = CATALOG) -> Diagnosis | None:
    """The most specific known failure in everything the job left.

    The text of every file in ``evidence`` is scanned, with Slurm's record: its
    State, ExitCode, DerivedExitCode and Reason, the NodeList of the incarnation
    that failed, and the states of earlier incarnations (a requeue). A COMPLETED
    job needs no reaction: None. A job that has not ended (or whose state is not
    known) with nothing recognisable: None. Any other ended job with nothing
    recognisable: the ``unknown`` entry with the last error lines and the files read.
    ``catalog`` is the built-in one unless the site's config adds to it.
    """
    slurm_state = evidence.raw_state or None
    exit_code, node_list = evidence.exit_code, evidence.node_list
    extra = [
        f"derived exit code {evidence.derived_exit_code}" if evidence.derived_exit_code else "",
        f"reason {evidence.reason}" if evidence.reason else "",
    ]
    state = normalize_state(slurm_state) if slurm_state else None
    if state == "COMPLETED":
        return None
    lines = evidence.text.splitlines()
    person = _cancelled_by_person(slurm_state, catalog)
    if person is not None:  # what the log shows then is the cancel's doing (NCCL errors)
        line = _state_line(slurm_state or "", exit_code, node_list)
        return Diagnosis(person, (line,), slurm_state=state)
    earlier_states = evidence.earlier_states
    scan = [ln[:_SCAN_CHARS] for ln in lines]
    earlier = [normalize_state(s) for s in earlier_states]
    ended = state in TERMINAL_STATES
    first_exit = next((m["host"] for ln in scan if (m := _SRUN_TASK_RE.search(ln))), None)
    own_nodes = expand_hostlist(node_list)
    found: list[tuple[FailureKind, list[str], bool, bool]] = []
    status = _exit_status(exit_code) if ended else None
    for kind in catalog:
        hits = [ln for ln in scan if _shows(kind, ln, own_nodes)]
        now = state is not None and state in kind.states
        now = now or (status is not None and status in kind.exit_codes)
        before = not ended and any(s in kind.states for s in earlier)
        if hits or now or before:
            found.append((kind, hits, now, before))
    # What this run shows beats what an earlier incarnation (requeued by Slurm) did.
    best = next((f for f in found if f[1] or f[2]), None) or next(iter(found), None)
    if best is not None:
        kind, hits, now, before = best
        evidence_lines = list(dict.fromkeys(_cut(ln) for ln in hits))[:MAX_EVIDENCE]
        if not evidence_lines:
            hit = next((s for s in reversed(earlier) if s in kind.states), "")
            shown = slurm_state or "" if now else f"{hit} (earlier run; Slurm requeued it)"
            evidence_lines = [_state_line(shown, exit_code if now else "", node_list)]
        rank = next((int(m.group(1)) for ln in hits if (m := _RANK_RE.search(ln))), None)
        return Diagnosis(
            kind=kind,
            evidence=tuple(evidence_lines),
            failed_node=_faulty_node(kind, hits, scan, node_list, now or before),
            first_exit_node=first_exit,
            rank=rank,
            slurm_state=state,
            requeued_by_slurm=before,
            underlying=_underlying(kind, scan) if kind.key in WRAPPERS else "",
        )
    if not ended:
        return None
    tail = _error_tail(lines) + (_state_line(slurm_state or "", exit_code, node_list, extra),)
    return Diagnosis(
        UNKNOWN,
        tail,
        first_exit_node=first_exit,
        slurm_state=state,
        read=evidence.describe_read(),
        output_cut=any(_FORCE_TERMINATED_RE.search(ln) for ln in scan),
    )


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    seed_tokenizer: bool = False
    exclude_node: str | None = None
    resume: bool = False
    page: bool = False
    reason: str = ""  # the sentence for the thread


def retry_decision(
    diagnosis: Diagnosis,
    *,
    attempt: int,
    max_attempts: int,
    previous_keys: Sequence[str],
    newer_checkpoint: bool,
) -> RetryDecision:
    """What to do after attempt ``attempt`` (1-based) of ``max_attempts`` failed.

    ``previous_keys`` are the diagnosis keys of the earlier failed attempts;
    ``newer_checkpoint`` whether a checkpoint newer than at this attempt's start exists.
    """
    kind = diagnosis.kind
    repeats = sum(1 for key in previous_keys if key == kind.key)
    nxt = f"(attempt {attempt + 1} of {max_attempts})..."
    page = kind.page_oncall or kind.reaction is R.PAGE
    page = page or (kind.page_oncall_on_repeat and repeats > 0)

    def stop(reason: str, paged: bool = page) -> RetryDecision:
        return RetryDecision(False, page=paged, reason=reason)

    if diagnosis.requeued_by_slurm:
        return stop("Slurm requeued it itself; following the new run.")
    if kind is UNKNOWN and diagnosis.output_cut:
        return _cause_cut_from_the_logs(repeats, attempt, max_attempts)
    if kind.reaction in (R.TELL_USER, R.PAGE):
        hint = f" {kind.hint}" if kind.reaction is R.TELL_USER and kind.hint else ""
        return stop(f"Not retrying: {kind.no_retry}.{hint}")
    if (capped := _capped(kind, repeats)) is not None:
        return stop(f"Not retrying: {capped[0]}.", page or capped[1])
    if attempt >= max_attempts:
        fixed = kind.reaction is R.RETRY_WITH_FIX
        return stop(f"Not retrying: that was attempt {attempt} of {max_attempts}.", page or fixed)
    if kind.reaction is R.RETRY:
        return RetryDecision(True, page=page, reason=f"This is transient. Retrying as is {nxt}")
    if kind.reaction is R.RETRY_WITH_FIX:
        if repeats == 1:
            why = "It happened again. Seeding the tokenizer cache, then retrying"
            return RetryDecision(True, seed_tokenizer=True, reason=f"{why} {nxt}")
        why = "This is transient. Retrying with the same cache dir"
        return RetryDecision(True, reason=f"{why} {nxt}")
    if kind.reaction is R.RETRY_IF_PROGRESS and not newer_checkpoint:
        why = "no checkpoint was saved since this attempt started, so a retry would make no"
        return stop(f"Not retrying: {why} progress. {kind.hint}", False)
    if kind.page_oncall_on_repeat and repeats > 0:
        return stop("Not retrying: it happened again.", True)
    exclude = diagnosis.failed_node if kind.exclude_node else None
    without = f" without {exclude}" if exclude else ""
    reason = f"Retrying from the newest checkpoint{without} {nxt}"
    return RetryDecision(True, exclude_node=exclude, resume=True, page=page, reason=reason)


def _capped(kind: FailureKind, repeats: int) -> tuple[str, bool] | None:
    """Why the cause's own cap stops a retry after ``repeats`` earlier failures of it,
    and whether that pages; None when it does not. The tokenizer race gets two tries
    (the second with the cache seeded); ``max_retries`` caps any cause."""
    if kind.reaction is R.RETRY_WITH_FIX and repeats >= 2:
        return "it failed again after the cache was seeded", True
    if kind.max_retries is None or repeats < kind.max_retries:
        return None
    if not kind.max_retries:
        return "this cause is not retried automatically", kind.page_oncall_on_repeat
    times = "once" if kind.max_retries == 1 else f"{kind.max_retries} times"
    return f"this cause is retried at most {times} per launch", kind.page_oncall_on_repeat


def _cause_cut_from_the_logs(repeats: int, attempt: int, max_attempts: int) -> RetryDecision:
    """No known cause, and srun cut the tasks' last output: the cause may be a transient
    one (the tokenizer race is the usual first-run one) whose traceback was lost, so one
    retry as is. A second such failure needs a person: on-call is paged."""
    if repeats > 0:
        why = "it failed again with its cause cut from the logs; a person should look"
        return RetryDecision(False, page=True, reason=f"Not retrying: {why}.")
    if attempt >= max_attempts:
        return RetryDecision(
            False, reason=f"Not retrying: that was attempt {attempt} of {max_attempts}."
        )
    return RetryDecision(
        True,
        reason=(
            "The cause may be a transient one whose traceback was lost: retrying once as is "
            f"(attempt {attempt + 1} of {max_attempts})..."
        ),
    )
