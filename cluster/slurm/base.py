"""Pure builders and parsers for Slurm's command-line tools (no I/O here): the words
they all share (states, host lists, job ids, piped records), ``squeue`` and ``scancel``.
``sacct``, ``sinfo`` and ``sbatch`` have modules of their own (:mod:`cluster.slurm.sacct`,
:mod:`cluster.slurm.sinfo`, :mod:`cluster.slurm.sbatch`).

Formats are pipe-separated (``-P`` / ``-O 'Field:|'``), which do not change
between Slurm versions the way ``--json`` does. States are mapped once, by
prefix (``CANCELLED by 1000`` is CANCELLED).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

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

SQUEUE_FIELDS = ("JobID", "State", "Reason", "TimeUsed", "NumNodes", "ReasonList", "RestartCnt")
SQUEUE_FORMAT = ",".join(f"{f}:|" for f in (*SQUEUE_FIELDS, "Name"))


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


def job_id_list(job_ids: Iterable[str]) -> str:
    ids = [check_job_id(j) for j in job_ids]
    if not ids:
        raise ValueError("no job ids given")
    return ",".join(ids)


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


def to_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


_SLURM_TIME_RE = re.compile(
    r"(?:(?P<days>[0-9]{1,3})-(?P<dh>[0-9]{1,2})(?::(?P<dm>[0-9]{1,2})(?::(?P<ds>[0-9]{1,2}))?)?)"
    r"|(?:(?P<h>[0-9]{1,2}):(?P<m>[0-9]{1,2}):(?P<s>[0-9]{1,2}))"
    r"|(?:(?P<mm>[0-9]{1,6})(?::(?P<ss>[0-9]{1,2}))?)"
)
SLURM_TIME_FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
MAX_TIME_S = 365 * 86400


def slurm_time_seconds(value: str) -> int:
    """Seconds in a Slurm time limit (``--time``), or ValueError with a short reason.

    Accepts Slurm's own formats: minutes, minutes:seconds, hours:minutes:seconds,
    days-hours, days-hours:minutes and days-hours:minutes:seconds. Zero and
    "UNLIMITED" are refused: every launch gets a limit.
    """
    match = _SLURM_TIME_RE.fullmatch(value)
    if match is None:
        raise ValueError("not a Slurm time")
    g = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    if "days" in g:
        days, hours, minutes, seconds = g["days"], g["dh"], g.get("dm", 0), g.get("ds", 0)
    elif "h" in g:
        days, hours, minutes, seconds = 0, g["h"], g["m"], g["s"]
    else:
        days, hours, minutes, seconds = 0, 0, g["mm"], g.get("ss", 0)
    if "days" in g and hours >= 24:
        raise ValueError("hours after 'D-' must be 0 to 23")
    if minutes >= 60 and "mm" not in g:
        raise ValueError("minutes must be 0 to 59")
    if seconds >= 60:
        raise ValueError("seconds must be 0 to 59")
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError("zero means no limit; give a positive time")
    if total > MAX_TIME_S:
        raise ValueError("more than 365 days")
    return total


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
        words += ["-j", job_id_list(job_ids)]
    if user:
        words += ["-u", user]
    return shlex.join(words)


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
                nodes=to_int(nodes),
                nodelist=nodelist,
                restarts=to_int(restarts),
                name=name,
            )
        )
    return rows


# --- scancel ------------------------------------------------------------------------------


def build_scancel(job_ids: Sequence[str], *, pending_only: bool = False) -> str:
    """``scancel``; ``pending_only``: Slurm cancels only those still PENDING, so a job that
    started meanwhile keeps running."""
    state = ["--state=PENDING"] if pending_only else []
    return shlex.join(["scancel", *state, *(check_job_id(j) for j in job_ids)])
