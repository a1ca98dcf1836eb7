"""``sacct``: a job's accounting, every incarnation of it (pure; no I/O here).

Allocation rows (``-X -P -n``, ``-D`` for requeued incarnations) are grouped per
job (:func:`merge_acct`); GPU-hours come from each row's run time and AllocTRES.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cluster.slurm.base import JOB_ID_RE, is_terminal, job_id_list, normalize_state, records, to_int

NO_NODES = "None assigned"  # sacct's NodeList of an incarnation that never ran
SACCT_FIELDS = (
    "JobID,JobName%60,State,ExitCode,DerivedExitCode,Reason,Elapsed,NodeList,ElapsedRaw,AllocTRES"
)
_SACCT_TAIL = 8  # fields after the job name (the only free text)


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
        words += ["-j", job_id_list(job_ids)]
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
                elapsed_s=to_int(elapsed_raw),
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
