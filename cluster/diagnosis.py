"""The failure catalog (FIELD_GUIDE section 5) as data, and what to do about each failure.

Pure functions only: :func:`diagnose` reads a job's :class:`~cluster.evidence.Evidence`
(every file it left and Slurm's record of it) and names the most specific known
failure; :func:`retry_decision` turns that into a bounded retry plan with the
sentence the thread shows.

:data:`CATALOG` is in priority order: the first entry that matches wins. Causes
come before their symptoms (a node failure or a GPU OOM makes the other ranks
report NCCL errors, so NCCL comes late), and an entry matches on a log line or on
the job's Slurm state, so a matching log line beats a bare ``FAILED``.
``srun: error: <host>: task <n>: Exited with exit code <rc>`` is never a cause.

What the text can tell about nodes (:attr:`Diagnosis.failed_node`): a node is named
as *faulty* only from hardware evidence: srun's ``Node failure on <host>``, an
``uncorrectable ECC error`` line that names a host (``<host>: ...``, ``on host
<host>``) or a rank whose task srun reports (``[rank5]`` + ``srun: error: a4-1:
task 5: ...``), or a ``NODE_FAIL``/``BOOT_FAIL`` record whose NodeList is one node. A node name
read from text counts only if it is a valid Slurm host name inside the job's own
node list: text that names any other node changes nothing, and srun's ``Node failure
on <host>`` naming no node of the job is no evidence of a node failure at all.
For a multi-node NODE_FAIL, sacct does not say which node died (``sinfo -R`` does,
not this module). The host of the first ``srun: error`` task line is only where
the first task ended (:attr:`Diagnosis.first_exit_node`), never a node to exclude.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from cluster.evidence import Evidence
from cluster.slurm import HOSTNAME_RE, TERMINAL_STATES, expand_hostlist, normalize_state

MAX_EVIDENCE = 5
MAX_LINE_CHARS = 300
_SCAN_CHARS = 4000  # of each line, for matching: bounds the work on huge lines
_TAIL_LINES = 5


class Reaction(StrEnum):
    RETRY = "retry"  # transient: retry as is
    RETRY_WITH_FIX = "retry_with_fix"  # retry once; then fix (seed the cache) first
    RETRY_RESUME = "retry_resume"  # retry from the newest checkpoint
    RETRY_IF_PROGRESS = "retry_if_progress"  # retry only if a newer checkpoint exists
    TELL_USER = "tell_user"  # a retry would fail the same way
    PAGE = "page"  # page on-call, no automatic retry


@dataclass(frozen=True)
class FailureKind:
    """One catalog entry. ``states`` match Slurm states by prefix (``CANCELLED by 0``)."""

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


_NODE_FAILURE_ON = r"\bNode failure on \S"  # srun's line: evidence only for the job's own node


def _p(*regexes: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(r, re.IGNORECASE) for r in regexes)


R = Reaction
CATALOG: tuple[FailureKind, ...] = (
    FailureKind(
        "node_failure", "a node failed (hardware)", R.RETRY_RESUME,
        "On-call: check the node (sinfo -R) before it takes jobs again.",
        _p(r"DUE TO NODE FAILURE", r"uncorrectable ECC error", _NODE_FAILURE_ON,
           r"fallen off the bus"),
        ("NODE_FAIL", "BOOT_FAIL"), page_oncall=True, exclude_node=True,
    ),
    FailureKind(
        "container_storage", "the container could not start or the disk is full",
        R.PAGE, "On-call: check enroot/pyxis on the node and free space and quotas on the "
        "shared file system.",
        _p(r"pyxis:.*(?:fail|error|couldn't)", r"No space left on device", r"\[Errno 28\]",
           r"Disk quota exceeded", r"\[Errno 122\]"),
        no_retry="it needs a person to fix the node or the storage",
    ),
    FailureKind(
        "tokenizer_race", "the GPT-2 tokenizer download raced between ranks",
        R.RETRY_WITH_FIX, "Seed <cache>/torch/megatron/ with the GPT-2 vocab and merges files.",
        _p(r"Invalid cross-device link: '[^']*gpt2-"),
    ),
    FailureKind(
        "gated_repo", "the Hugging Face hub refused the download (gated repo, or no HF_TOKEN)",
        R.TELL_USER, "Set HF_TOKEN for this cluster (job_secrets) and accept the model "
        "licence on Hugging Face.",
        _p(r"GatedRepoError", r"Cannot access gated repo", r"access to model \S+ is restricted",
           r"\b40[13] Client Error.*huggingface",
           r"huggingface\.co.*\b40[13] (?:Client|Forb|Unau)"),
        no_retry="the token is missing or not allowed",
    ),
    FailureKind(
        "wandb_key", "the job has no Weights & Biases API key (WANDB_API_KEY)",
        R.TELL_USER, "Set WANDB_API_KEY, or relaunch with logger.wandb_enabled=False.",
        _p(r"api_key not configured", r"wandb\.errors\S*: .*(?:api.?key|AuthenticationError)"),
        no_retry="the job has no W&B key",
    ),
    FailureKind(
        "gpu_oom", "the GPU ran out of memory", R.TELL_USER,
        "Try a smaller micro-batch or more nodes.",
        _p(r"CUDA out of memory", r"OutOfMemoryError", r"CUDA error: out of memory"),
        no_retry="the same settings will fail again",
    ),
    FailureKind(
        "host_oom", "a node ran out of host memory (RAM) and the kernel killed the job",
        R.TELL_USER, "Use fewer data-loader workers, a smaller batch, or more nodes.",
        _p(r"task \d+: Out Of Memory", r"oom[-_]kill event", r"have been OOM Killed"),
        ("OUT_OF_MEMORY",), no_retry="the same settings will fail again",
    ),
    FailureKind(
        "preempted", "a higher-priority job preempted it", R.RETRY_RESUME, "",
        _p(r"DUE TO PREEMPTION"), ("PREEMPTED",),
    ),
    FailureKind(
        "time_limit", "it reached its time limit", R.RETRY_IF_PROGRESS,
        "Ask for more time (time=...) or save checkpoints more often.",
        _p(r"DUE TO TIME LIMIT"), ("TIMEOUT",),
    ),
    FailureKind(
        "nccl_timeout", "the GPUs stopped hearing from each other (NCCL collective stalled)",
        R.RETRY_RESUME, "On-call: if it repeats, check the nodes' network (NCCL tests).",
        _p(r"Watchdog caught collective operation timeout", r"NCCL error", r"DistStoreError",
           r"\bnccl(?:System|Internal|Remote|UnhandledCuda)Error"),
        page_oncall_on_repeat=True, exclude_node=True,
    ),
    FailureKind(
        "slurm_transient", "the Slurm controller did not answer in time", R.RETRY, "",
        _p(r"Socket timed out on send/recv", r"Unable to contact slurm controller",
           r"Zero Bytes were transmitted or received"),
    ),
    FailureKind(
        "bad_request", "Slurm cannot meet the request (nodes, account or QOS)", R.TELL_USER,
        "Ask for fewer nodes, or check the account and QOS with your cluster admin.",
        _p(r"Requested node configuration is not available", r"Invalid account",
           r"Invalid qos", r"accounting/QOS policy"),
        no_retry="Slurm would refuse it again",
    ),
    FailureKind(
        "invalid_partition", "the partition does not exist on this cluster", R.TELL_USER,
        "Pick one of the partitions sinfo lists.",
        _p(r"invalid partition specified", r"Invalid partition name specified"),
        no_retry="Slurm would refuse it again",
    ),
    FailureKind(
        "cancelled", "the job was cancelled (scancel)", R.TELL_USER, "",
        (), ("CANCELLED",), no_retry="someone cancelled it",
    ),
    # Found by the progress watcher (no new progress line for too long), not by diagnose().
    FailureKind(
        "silent_hang", "it stopped making progress but is still running", R.PAGE,
        "Cancel it, or retry from the newest checkpoint.", no_retry="a person should look first",
    ),
)  # fmt: skip
UNKNOWN = FailureKind(
    "unknown", "it failed for a reason trainbot does not recognise", R.TELL_USER,
    "See the log lines below (/logs for more).", no_retry="the cause is unknown",
)  # fmt: skip
BY_KEY: dict[str, FailureKind] = {kind.key: kind for kind in (*CATALOG, UNKNOWN)}

_SRUN_TASK_RE = re.compile(r"srun: error: (?P<host>[\w.-]+): tasks? (?P<tasks>[\d,-]+): ")
_NODE_FAILURE_RE = re.compile(r"Node failure on (?P<host>[\w.-]+)\b(?![\[,])")
_ECC_HOST_RE = re.compile(r"^(?P<host>[a-z][\w.-]*\d[\w.-]*): |\bon (?:host|node) (?P<on>[\w.-]+)")
_RANK_RE = re.compile(r"\[rank ?(\d+)\]", re.IGNORECASE)
_ERRORISH_RE = re.compile(r"error|exception|traceback|fatal|killed|abort", re.IGNORECASE)
_FORCE_TERMINATED_RE = re.compile(r"^srun: Force Terminated (?:StepId|job step)")
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
        return f"{self.kind.cause} ({', '.join(where)})" if where else self.kind.cause


def _cut(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def _shows(kind: FailureKind, line: str, own_nodes: Sequence[str]) -> bool:
    """Whether ``line`` is evidence of ``kind``. A line that shows a node failure only by
    naming the node (``Node failure on <host>``) is, when that host is one of the job's."""
    matched = [p for p in kind.patterns if p.search(line)]
    if not matched or any(p.pattern != _NODE_FAILURE_ON for p in matched):
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
    if kind.key != "node_failure":
        return None
    for line in hits:
        if m := _NODE_FAILURE_RE.search(line):
            return m["host"]
    for line in (ln for ln in hits if "ecc" in ln.lower()):
        if m := _ECC_HOST_RE.search(line):
            return m["on"] or m["host"]
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


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """The most specific known failure in everything the job left.

    The text of every file in ``evidence`` is scanned, with Slurm's record: its
    State, ExitCode, DerivedExitCode and Reason, the NodeList of the incarnation
    that failed, and the states of earlier incarnations (a requeue). A COMPLETED
    job needs no reaction: None. A job that has not ended (or whose state is not
    known) with nothing recognisable: None. Any other ended job with nothing
    recognisable: the ``unknown`` entry with the last error lines and the files read.
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
    earlier_states = evidence.earlier_states
    scan = [ln[:_SCAN_CHARS] for ln in lines]
    earlier = [normalize_state(s) for s in earlier_states]
    ended = state in TERMINAL_STATES
    first_exit = next((m["host"] for ln in scan if (m := _SRUN_TASK_RE.search(ln))), None)
    own_nodes = expand_hostlist(node_list)
    found: list[tuple[FailureKind, list[str], bool, bool]] = []
    for kind in CATALOG:
        hits = [ln for ln in scan if _shows(kind, ln, own_nodes)]
        now = state is not None and state in kind.states
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
    if kind.reaction is R.RETRY_WITH_FIX and repeats >= 2:
        return stop("Not retrying: it failed again after the cache was seeded.", True)
    if attempt >= max_attempts:
        fixed = kind.reaction is R.RETRY_WITH_FIX
        return stop(f"Not retrying: that was attempt {attempt} of {max_attempts}.", page or fixed)
    if kind.reaction is R.RETRY:
        return RetryDecision(True, reason=f"This is transient. Retrying as is {nxt}")
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
