"""Pure builders and parsers for Slurm's command-line tools (no I/O here).

Formats are pipe-separated (``-P`` / ``-O 'Field:|'``), which do not change
between Slurm versions the way ``--json`` does. States are mapped once, by
prefix (``CANCELLED by 1000`` is CANCELLED).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

STATES = (
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "COMPLETED", "FAILED", "CANCELLED",
    "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
    "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "RESIZING", "REVOKED",
    "SPECIAL_EXIT", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD",
)  # fmt: skip
TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
     "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
)  # fmt: skip
UNKNOWN_STATE = "UNKNOWN"
_BY_LENGTH = sorted(STATES, key=len, reverse=True)
JOB_ID_RE = re.compile(r"[0-9]+(?:_[0-9]+)?")
HOSTNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,62}")
_HOSTLIST_SPLIT_RE = re.compile(r"[\s,]+(?![^\[]*\])")  # commas and blanks outside brackets
_BRACKET_RE = re.compile(r"\[([^\[\]]*)\]")
MAX_HOSTS = 65536
NO_NODES = "None assigned"  # sacct's NodeList of an incarnation that never ran

SQUEUE_FIELDS = ("JobID", "State", "Reason", "TimeUsed", "NumNodes", "ReasonList", "RestartCnt")
SQUEUE_FORMAT = ",".join(f"{f}:|" for f in (*SQUEUE_FIELDS, "Name"))
SACCT_FIELDS = (
    "JobID,JobName%60,State,ExitCode,DerivedExitCode,Reason,Elapsed,NodeList,ElapsedRaw,AllocTRES"
)
_SACCT_TAIL = 8  # fields after the job name (the only free text)
SINFO_FORMAT = "NodeList:|,Partition:|,Available:|,StateCompact:|,Gres:|,GresUsed:|"
_GPU_RE = re.compile(r"gpu(?::[A-Za-z0-9_.-]+)?:([0-9]+)")


def normalize_state(raw: str) -> str:
    """Slurm's state word, matched by prefix; UNKNOWN when nothing matches."""
    text = raw.strip().upper()
    for state in _BY_LENGTH:
        if text.startswith(state):
            return state
    return UNKNOWN_STATE


def is_terminal(state: str) -> bool:
    return state in TERMINAL_STATES


def expand_hostlist(node_list: str) -> tuple[str, ...]:
    """A Slurm host list as ``scontrol show hostnames`` expands it (Slurm 22.05, checked
    against it): ``rack[1-2]-node[01-02]`` -> ``rack1-node01 rack1-node02 rack2-node01
    rack2-node02``; entries split on commas and blanks; every bracket multiplies, the
    first outermost; a range's width is its low bound's (``[008-11]`` -> ``008 ... 011``);
    text after the last bracket is an invalid host list. Invalid (as scontrol says
    ``Invalid hostlist``): nothing. Names that are not valid host names are left out.
    Semantics from SchedMD/slurm src/common/hostlist.c (``_parse_single_range`` and the
    bracket handling of ``_hostlist_create_bracketed``)."""
    hosts: list[str] = []
    for entry in _HOSTLIST_SPLIT_RE.split(node_list.strip()):
        if not entry:
            continue
        names = _expand_entry(entry)
        if names is None:
            return ()
        hosts += [n for n in names if HOSTNAME_RE.fullmatch(n)]
        if len(hosts) >= MAX_HOSTS:
            return tuple(hosts[:MAX_HOSTS])
    return tuple(hosts)


def _expand_entry(entry: str) -> list[str] | None:
    """One entry of a host list (no top-level comma), or None when Slurm calls it invalid."""
    parts = _BRACKET_RE.split(entry)  # text, ranges, text, ranges, ..., text
    if len(parts) == 1:
        return None if "[" in entry else [entry]
    texts, groups = parts[0::2], parts[1::2]
    if texts[-1] or any("[" in t or "]" in t for t in texts):
        return None  # text after the last bracket, or a bracket left open or nested
    names = [""]
    for text, group in zip(texts, groups, strict=False):
        numbers = _parse_ranges(group)
        if numbers is None:
            return None
        names = [f"{name}{text}{n}" for name in names for n in numbers]
        if len(names) > MAX_HOSTS:
            return names[:MAX_HOSTS]
    return names


def _parse_ranges(group: str) -> list[str] | None:
    """``01-03,7`` -> ``01 02 03 7``; None for an empty, reversed or non-numeric range."""
    numbers: list[str] = []
    for part in group.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or (hi and int(hi) < int(lo)):
            return None
        last = min(int(hi or lo), int(lo) + MAX_HOSTS)
        numbers += [f"{n:0{len(lo)}d}" for n in range(int(lo), last + 1)]
    return numbers


def check_job_id(job_id: str) -> str:
    if not JOB_ID_RE.fullmatch(job_id):
        raise ValueError(f"not a Slurm job id: {job_id!r}")
    return job_id


def _ids(job_ids: Iterable[str]) -> str:
    ids = [check_job_id(j) for j in job_ids]
    if not ids:
        raise ValueError("no job ids given")
    return ",".join(ids)


@dataclass(frozen=True)
class Submitted:
    job_id: str
    cluster: str | None = None


def parse_sbatch_parsable(stdout: str) -> Submitted:
    """``sbatch --parsable`` prints ``jobid`` or ``jobid;cluster`` (last line wins)."""
    for line in reversed(stdout.strip().splitlines()):
        match = re.fullmatch(r"\s*([0-9]+)(?:;(\S+))?\s*", line, re.ASCII)
        if match:
            return Submitted(job_id=match.group(1), cluster=match.group(2))
    raise ValueError(f"no job id in sbatch output: {stdout.strip()[:200]!r}")


# --- squeue -------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueRow:
    job_id: str
    state: str
    raw_state: str
    reason: str
    time_used: str
    nodes: int
    nodelist: str  # the node list when running, "(Reason)" while pending
    restarts: int
    name: str


def build_squeue(
    job_ids: Sequence[str] = (), *, user: str | None = None, all_states: bool = False
) -> str:
    """``squeue`` for the given jobs (or all of ``user``'s); one row per job, fields piped.

    ``all_states`` adds ``-t all``: jobs that ended within MinJobAge are listed too.
    """
    words = ["squeue", "-h", "-O", SQUEUE_FORMAT]
    if all_states:
        words += ["-t", "all"]
    if job_ids:
        words += ["-j", _ids(job_ids)]
    if user:
        words += ["-u", user]
    return shlex.join(words)


def records(stdout: str, pipes: int) -> Iterator[str]:
    """Lines of piped output joined back into records of at least ``pipes`` separators.

    A job name may hold newlines (sbatch -J accepts them); such a name splits its
    record over several lines, which are rejoined here.
    """
    buffer: str | None = None
    for line in stdout.splitlines():
        buffer = line if buffer is None else f"{buffer}\n{line}"
        if buffer.count("|") >= pipes:
            yield buffer
            buffer = None
    if buffer is not None:
        yield buffer


def parse_squeue(stdout: str) -> list[QueueRow]:
    rows: list[QueueRow] = []
    for line in records(stdout, len(SQUEUE_FIELDS) + 1):
        parts = line.split("|")
        if len(parts) < len(SQUEUE_FIELDS) + 1 or not JOB_ID_RE.fullmatch(parts[0].strip()):
            continue
        job_id, raw, reason, used, nodes, nodelist, restarts = (p.strip() for p in parts[:7])
        name = "|".join(parts[7:]).rstrip("|").strip()
        rows.append(
            QueueRow(
                job_id=job_id,
                state=normalize_state(raw),
                raw_state=raw,
                reason=reason,
                time_used=used,
                nodes=_int(nodes),
                nodelist=nodelist,
                restarts=_int(restarts),
                name=name,
            )
        )
    return rows


# --- sacct --------------------------------------------------------------------------------


@dataclass(frozen=True)
class AcctRow:
    job_id: str
    name: str
    state: str
    raw_state: str
    exit_code: str
    elapsed: str
    nodelist: str
    derived_exit_code: str = ""  # the highest exit code of the job's steps
    reason: str = ""
    elapsed_s: int = 0  # ElapsedRaw
    alloc_tres: str = ""  # AllocTRES, e.g. billing=2,cpu=2,gres/gpu=16,node=2

    @property
    def gpu_hours(self) -> float:
        """What this allocation used: its run time times its allocated GPUs."""
        return self.elapsed_s * tres_gpus(self.alloc_tres) / 3600


@dataclass(frozen=True)
class AcctRecord:
    """A job's accounting: its newest incarnation, and what happened to the earlier ones."""

    latest: AcctRow
    earlier: tuple[AcctRow, ...] = ()

    @property
    def restarts(self) -> int:
        return len(self.earlier)

    @property
    def gpu_hours(self) -> float:
        """GPU-hours of every incarnation (a requeued job ran more than once)."""
        return sum(row.gpu_hours for row in (*self.earlier, self.latest))


def build_sacct(
    job_ids: Sequence[str] = (), *, duplicates: bool = True, since: str | None = None
) -> str:
    """``sacct`` allocation rows; ``duplicates`` adds ``-D`` (requeued incarnations)."""
    words = ["sacct", "-X", "-P", "-n"]
    if duplicates:
        words.append("-D")
    if since:
        words += ["-S", since]
    words += ["-o", SACCT_FIELDS]
    if job_ids:
        words += ["-j", _ids(job_ids)]
    return shlex.join(words)


def parse_sacct(stdout: str) -> list[AcctRow]:
    rows: list[AcctRow] = []
    for line in records(stdout, _SACCT_TAIL + 1):
        parts = line.split("|")
        if len(parts) < _SACCT_TAIL + 2 or not JOB_ID_RE.fullmatch(parts[0].strip()):
            continue
        name = "|".join(parts[1:-_SACCT_TAIL]).strip()  # the only free text: may hold | or \n
        raw, exit_code, derived, reason, elapsed, nodelist, elapsed_raw, tres = (
            p.strip() for p in parts[-_SACCT_TAIL:]
        )
        rows.append(
            AcctRow(
                parts[0].strip(),
                name,
                normalize_state(raw),
                raw,
                exit_code,
                elapsed,
                nodelist,
                derived_exit_code=derived,
                reason="" if reason == "None" else reason,
                elapsed_s=_int(elapsed_raw),
                alloc_tres=tres,
            )
        )
    return rows


def tres_gpus(tres: str) -> int:
    """GPUs in a TRES string (``AllocTRES``): ``gres/gpu=16``, or the sum of typed
    ``gres/gpu:h100=8`` entries when there is no untyped one; 0 when none."""
    plain, typed = None, 0
    for item in tres.split(","):
        key, _, value = item.strip().partition("=")
        if not value.isdigit():
            continue
        if key == "gres/gpu":
            plain = int(value)
        elif key.startswith("gres/gpu:"):
            typed += int(value)
    return plain if plain is not None else typed


def merge_acct(rows: Iterable[AcctRow]) -> dict[str, AcctRecord]:
    """Group ``sacct -D`` rows by job id, in output order (oldest incarnation first)."""
    grouped: dict[str, list[AcctRow]] = {}
    for row in rows:
        grouped.setdefault(row.job_id, []).append(row)
    return {jid: AcctRecord(latest=rs[-1], earlier=tuple(rs[:-1])) for jid, rs in grouped.items()}


@dataclass(frozen=True)
class Usage:
    """What Slurm's accounting says a set of jobs used: GPU-hours over every incarnation
    of every job found, which jobs were found, which expected ones sacct does not have
    (yet: slurmdbd lags), and which have not ended."""

    gpu_hours: float
    jobs: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    running: tuple[str, ...] = ()

    @property
    def final(self) -> bool:
        """Every expected job is recorded and has ended: the figure will not change."""
        return not self.missing and not self.running


def usage_of(records: Mapping[str, AcctRecord], expected: Iterable[str] = ()) -> Usage:
    """The :class:`Usage` of ``records`` (from :func:`merge_acct`); ``expected`` job ids
    that are not among them are ``missing``. A job ``running`` is one whose newest
    incarnation is not in a terminal state (pending, running, requeued ...)."""
    found = tuple(records)
    return Usage(
        gpu_hours=sum(record.gpu_hours for record in records.values()),
        jobs=found,
        missing=tuple(j for j in dict.fromkeys(expected) if j not in records),
        running=tuple(j for j, r in records.items() if not is_terminal(r.latest.state)),
    )


# --- sinfo --------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeRow:
    node: str
    partition: str
    default: bool
    available: str
    state: str
    gpus_total: int
    gpus_used: int


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    default: bool
    up: bool
    nodes: int
    nodes_usable: int
    gpus_total: int
    gpus_used: int
    gpus_per_node: int

    @property
    def gpus_idle(self) -> int:
        return max(self.gpus_total - self.gpus_used, 0)


USABLE_NODE_STATES = ("idle", "mix", "alloc", "comp", "plnd")
UNUSABLE_FLAGS = "*$%!"  # not responding, maintenance, powering down, to be powered down


def node_usable(state: str) -> bool:
    """Whether a node in this ``sinfo`` compact state can run jobs (now or once freed)."""
    if any(flag in state for flag in UNUSABLE_FLAGS):
        return False
    return state.rstrip("~#@^-").startswith(USABLE_NODE_STATES)


def build_sinfo() -> str:
    """One row per (node, partition) with availability, state and GPUs total/used."""
    return shlex.join(["sinfo", "-h", "-N", "-S", "#P,N", "-O", SINFO_FORMAT])


def parse_sinfo(stdout: str) -> list[NodeRow]:
    rows: list[NodeRow] = []
    for line in stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 6 or not parts[0]:
            continue
        node, partition, available, state, gres, used = parts[:6]
        rows.append(
            NodeRow(
                node=node,
                partition=partition.rstrip("*"),
                default=partition.endswith("*"),
                available=available,
                state=state,
                gpus_total=_gpus(gres),
                gpus_used=_gpus(used),
            )
        )
    return rows


def partitions(rows: Iterable[NodeRow]) -> list[PartitionInfo]:
    """Per-partition capacity, in sinfo's order. Down or drained nodes count as not usable."""
    grouped: dict[str, list[NodeRow]] = {}
    for row in rows:
        grouped.setdefault(row.partition, []).append(row)
    infos = []
    for name, nodes in grouped.items():
        usable = [n for n in nodes if node_usable(n.state)]
        infos.append(
            PartitionInfo(
                name=name,
                default=any(n.default for n in nodes),
                up=all(n.available == "up" for n in nodes),
                nodes=len({n.node for n in nodes}),
                nodes_usable=len({n.node for n in usable}),
                gpus_total=sum(n.gpus_total for n in usable),
                gpus_used=sum(n.gpus_used for n in usable),
                gpus_per_node=max((n.gpus_total for n in nodes), default=0),
            )
        )
    return infos


def format_partitions(infos: Iterable[PartitionInfo]) -> str:
    """``a3m*, a3u, a4, a3h``: the default marked with ``*``, as sinfo does."""
    return ", ".join(p.name + ("*" if p.default else "") for p in infos)


# --- the shape of a job: the sbatch options of both the estimate and the submit -----------


@dataclass(frozen=True)
class JobShape:
    """What a job asks Slurm for: ``nodes`` in ``partition``, for ``time_limit`` (None:
    the partition's default), charged to ``account`` (None: the login's default), kept
    away from the ``exclude`` node list."""

    nodes: int
    partition: str
    time_limit: str | None = None
    account: str | None = None
    exclude: str | None = None


def limit_options(shape: JobShape) -> list[str]:
    """``[-t T] [--account A] [--exclude nodes]``: the shape's limits, in sbatch's words
    (NeMo-Run's ``run.py`` takes them under the same flags and hands them to sbatch)."""
    return _limits(shape.time_limit, shape.account, shape.exclude)


def _limits(time_limit: str | None, account: str | None, exclude: str | None) -> list[str]:
    words = []
    if time_limit:
        words += ["-t", time_limit]
    if account:
        words += ["--account", account]
    if exclude:
        words += ["--exclude", exclude]
    return words


def sbatch_options(shape: JobShape) -> list[str]:
    """``-N n -p partition [-t T] [--account A] [--exclude nodes]``: what the start
    estimate (:func:`build_test_only`) and the submit both give sbatch for this shape."""
    where = ["-N", str(shape.nodes), "-p", shape.partition]
    return where + limit_options(shape)


# --- sbatch --test-only: when would a job start? --------------------------------------------

TEST_ONLY_NAME = "trainbot-start-estimate"
_TEST_ONLY_RE = re.compile(
    r"Job \S+ to start at (?P<start>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?: using (?P<cpus>[0-9]+) processors)?(?: on nodes (?P<nodes>\S+))?"
    r"(?: in partition (?P<partition>\S+))?"
)


@dataclass(frozen=True)
class StartEstimate:
    """Slurm's answer to ``sbatch --test-only``: when the job would start (epoch seconds,
    None when Slurm gave no time), on which nodes, or why it could not say. ``asked_at``
    is the login node's clock when it was asked (0: not known)."""

    start: float | None
    nodes: str = ""
    partition: str = ""
    error: str = ""
    asked_at: float = 0.0

    @property
    def wait_s(self) -> float | None:
        """Seconds from asking to the expected start (0: it would start now)."""
        if self.start is None:
            return None
        return max(0.0, self.start - self.asked_at) if self.asked_at else None


def _probe_options(gpus_per_node: int) -> str:
    """What an estimate adds to a job's own options: a name, one task per node, its GPUs."""
    return shlex.join(
        ["-J", TEST_ONLY_NAME, "--ntasks-per-node=1", f"--gres=gpu:{gpus_per_node}", "--wrap=true"]
    )


def build_test_only(shape: JobShape, *, gpus_per_node: int) -> str:
    """``sbatch --test-only`` for a job of this shape (nothing is submitted): the options
    of :func:`sbatch_options`, as the submit gives them. Times are printed in UTC
    (``TZ=UTC0``) so :func:`parse_test_only` needs no time zone; the answer, on stderr,
    goes to stdout."""
    options = shlex.join(sbatch_options(shape))
    return f"TZ=UTC0 sbatch --test-only {options} {_probe_options(gpus_per_node)} 2>&1"


WAIT_MARK = "@@trainbot-wait"


def build_wait_survey(
    sizes: Sequence[int], *, gpus_per_node: int, time_limit: str | None, account: str | None
) -> str:
    """``sbatch --test-only`` for each partition (as ``sinfo`` lists them) and each node
    count in ``sizes``, each answer after a ``WAIT_MARK <partition> <nodes>`` line."""
    limits = shlex.join(_limits(time_limit, account, None))
    options = f"{limits} {_probe_options(gpus_per_node)}".strip()
    counts = " ".join(str(int(n)) for n in sizes)
    return (
        f"for p in $(sinfo -h -o %R | sort -u); do for n in {counts}; do "
        f'echo "{WAIT_MARK} $p $n"; '
        f'TZ=UTC0 sbatch --test-only -N "$n" -p "$p" {options} 2>&1; done; done'
    )


def parse_wait_survey(output: str, asked_at: float) -> dict[tuple[str, int], StartEstimate]:
    """(partition, nodes) -> Slurm's estimate, from :func:`build_wait_survey`'s output."""
    found: dict[tuple[str, int], list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        if line.startswith(WAIT_MARK):
            _, partition, nodes = (line.split() + ["", ""])[:3]
            current = found.setdefault((partition, _int(nodes)), []) if partition else None
        elif current is not None:
            current.append(line)
    return {
        key: replace(parse_test_only("\n".join(lines)), asked_at=asked_at)
        for key, lines in found.items()
    }


def parse_test_only(output: str) -> StartEstimate:
    """``sbatch: Job 1234 to start at 2026-12-03T11:00:00 using 16 processors on nodes
    dev[0-1] in partition a4`` (UTC, see :func:`build_test_only`), or Slurm's error."""
    match = _TEST_ONLY_RE.search(output)
    if match is None:
        lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
        reason = lines[-1] if lines else "no answer from sbatch"
        for prefix in ("allocation failure:", "sbatch: error:"):
            reason = reason.removeprefix(prefix).strip()
        return StartEstimate(start=None, error=reason[:300])
    start = datetime.strptime(match["start"], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return StartEstimate(
        start=start.timestamp(),
        nodes=match["nodes"] or "",
        partition=match["partition"] or "",
    )


# --- scancel ------------------------------------------------------------------------------


def build_scancel(job_ids: Sequence[str], *, pending_only: bool = False) -> str:
    """``scancel``; ``pending_only``: Slurm cancels only those still PENDING, so a job that
    started meanwhile keeps running."""
    state = ["--state=PENDING"] if pending_only else []
    return shlex.join(["scancel", *state, *(check_job_id(j) for j in job_ids)])


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _gpus(gres: str) -> int:
    return sum(int(m.group(1)) for m in _GPU_RE.finditer(gres))
