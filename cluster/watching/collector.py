"""The collector: one SSH round trip per cluster per poll, whatever the number of jobs.

The caller keeps each job's :class:`~cluster.frameworks.Tracking` record (where its
files are, how far its log was read) and feeds it back after each poll with
:meth:`JobSnapshot.advance`. The remote half is ``collect_remote.py``; the Slurm
text it returns is parsed here with :mod:`cluster.slurm.base` and :mod:`cluster.slurm.sacct`.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cluster.slurm.base import QueueRow, build_squeue, parse_squeue
from cluster.slurm.sacct import AcctRecord, build_sacct, merge_acct, parse_sacct
from cluster.ssh.connect import LoginLike
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import run_remote_python
from cluster.watching.tracking import Tracking

log = logging.getLogger(__name__)

MAX_BYTES_PER_JOB = 64 * 1024
MAX_TOTAL_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class LogChunk:
    path: str
    text: str
    offset: int  # where the next read starts
    size: int  # the file's size (-1: not there yet)
    reset: bool = False  # the file shrank or changed: read again from 0

    @property
    def more(self) -> bool:
        return self.size > self.offset

    @property
    def start(self) -> int:
        """Where this chunk's text begins in the file."""
        return self.offset - len(self.text.encode("utf-8"))


@dataclass(frozen=True)
class Checkpoint:
    step: int
    name: str
    size_bytes: int = 0  # the files under it when first seen complete (0: not measured)


@dataclass(frozen=True)
class JobSnapshot:
    """One job after one poll. ``state`` is None when Slurm does not know the job (yet)."""

    job_id: str
    state: str | None
    queue: QueueRow | None
    acct: AcctRecord | None
    restart: int
    log: LogChunk
    directory: str = ""  # the job's directory, as found (see Tracking.log_dir)
    new_checkpoints: tuple[Checkpoint, ...] = ()
    attach_ready: bool | None = None
    attach_found: str = ""  # which of the tracking's attach paths exists

    @property
    def restarts(self) -> int:
        """Requeues seen: squeue's RestartCnt, sacct -D's earlier incarnations, the log name."""
        counts = [self.restart]
        if self.queue is not None:
            counts.append(self.queue.restarts)
        if self.acct is not None:
            counts.append(self.acct.restarts)
        return max(counts)

    def advance(self, tracking: Tracking, consumed: int | None = None) -> Tracking:
        """``tracking`` moved past this poll: the log found and how far it was read
        (``consumed`` bytes of this chunk, when the caller used only its whole lines),
        and the job's directory once a searched one (``*``) is found."""
        chunk = self.log
        if not chunk.path:
            return tracking
        offset = chunk.offset if consumed is None else chunk.start + consumed
        changes: dict[str, Any] = {"log_path": chunk.path, "log_offset": offset}
        if "*" in tracking.log_dir and self.directory:
            changes["log_dir"] = self.directory
        return tracking.model_copy(update=changes)


@dataclass(frozen=True)
class PollResult:
    cluster: str
    jobs: dict[str, JobSnapshot]
    slurm_calls: tuple[str, ...]
    round_trips: int
    elapsed_ms: float
    errors: tuple[str, ...] = field(default=())


async def collect(
    pool: SSHPool,
    login: LoginLike,
    jobs: Sequence[Tracking],
    *,
    known_checkpoints: Mapping[str, Sequence[str]] | None = None,
    known_restarts: Mapping[str, int] | None = None,
    cluster: str = "",
    timeout_s: float = 60.0,
    max_bytes_per_job: int = MAX_BYTES_PER_JOB,
    max_total_bytes: int = MAX_TOTAL_BYTES,
    roots: Sequence[str] = (),
) -> PollResult:
    """Poll every job of one cluster in one SSH round trip. ``known_restarts``: the requeues
    already seen of each job (a job requeued since has its ``sacct -D`` records read);
    ``roots``: a log that does not lie in one of these directories (links resolved on
    the login node) is not read."""
    if not jobs:
        return PollResult(cluster, {}, (), 0, 0.0)
    started = time.monotonic()
    before = pool.stats.round_trips
    known = known_checkpoints or {}
    restarts = known_restarts or {}
    payload = {
        "mode": "poll",
        "jobs": [
            {
                **j.payload(),
                "known_checkpoints": list(known.get(j.job_id, ())),
                "known_restarts": restarts.get(j.job_id, 0),
            }
            for j in jobs
        ],
        "squeue_argv": shlex.split(build_squeue()),
        "sacct_argv": shlex.split(build_sacct(duplicates=True)),
        "max_bytes_per_job": max_bytes_per_job,
        "max_total_bytes": max_total_bytes,
        "slurm_timeout_s": max(timeout_s / 3, 5.0),
        "roots": list(roots),
    }
    raw = await run_remote_python(
        pool, login, "watching/collect_remote.py", payload, timeout_s=timeout_s, cluster=cluster
    )
    result = parse_collect_output(raw, cluster=cluster)
    elapsed_ms = (time.monotonic() - started) * 1000
    log.debug(
        "cluster=%s polled %d jobs in %.0f ms (slurm calls: %s)",
        cluster,
        len(jobs),
        elapsed_ms,
        ",".join(result.slurm_calls) or "none",
    )
    return replace(result, round_trips=pool.stats.round_trips - before, elapsed_ms=elapsed_ms)


def parse_collect_output(raw: dict[str, Any], *, cluster: str = "") -> PollResult:
    """Turn the remote script's JSON into typed snapshots (pure)."""
    errors: list[str] = []
    queue: dict[str, QueueRow] = {}
    acct: dict[str, AcctRecord] = {}
    squeue = raw.get("squeue") or {}
    if squeue:
        queue = {row.job_id: row for row in parse_squeue(squeue.get("stdout", ""))}
        if squeue.get("rc") and "Invalid job id" not in squeue.get("stderr", ""):
            errors.append(f"squeue exited {squeue['rc']}: {squeue.get('stderr', '').strip()}")
    sacct = raw.get("sacct") or {}
    if sacct:
        acct = merge_acct(parse_sacct(sacct.get("stdout", "")))
        if sacct.get("rc"):
            errors.append(f"sacct exited {sacct['rc']}: {sacct.get('stderr', '').strip()}")
    snapshots = {}
    for job_id, data in raw.get("jobs", {}).items():
        q, a = queue.get(job_id), acct.get(job_id)
        state = q.state if q is not None else (a.latest.state if a is not None else None)
        snapshots[job_id] = JobSnapshot(
            job_id=job_id,
            state=state,
            queue=q,
            acct=a,
            restart=int(data.get("restart", 0)),
            log=_chunk(data.get("log")),
            directory=str(data.get("dir") or ""),
            new_checkpoints=tuple(
                Checkpoint(
                    step=int(c["step"]), name=str(c["name"]), size_bytes=int(c.get("bytes") or 0)
                )
                for c in data.get("checkpoints", [])
            ),
            attach_ready=data.get("attach_ready"),
            attach_found=str(data.get("attach_found") or ""),
        )
    for error in errors:
        log.warning("cluster=%s collector: %s", cluster, error)
    return PollResult(
        cluster=cluster,
        jobs=snapshots,
        slurm_calls=tuple(raw.get("slurm_calls", [])),
        round_trips=1,
        elapsed_ms=0.0,
        errors=tuple(errors),
    )


def _chunk(data: dict[str, Any] | None) -> LogChunk:
    if not data:
        return LogChunk(path="", text="", offset=0, size=-1)
    return LogChunk(
        path=str(data.get("path", "")),
        text=str(data.get("text", "")),
        offset=int(data.get("offset", 0)),
        size=int(data.get("size", -1)),
        reset=bool(data.get("reset", False)),
    )
