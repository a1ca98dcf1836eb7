"""``sbatch``: a job's shape in sbatch's options, the job id it answers, and when a job
would start (``sbatch --test-only``, one shape or a survey of every partition); pure,
no I/O here."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from cluster.slurm.base import to_int


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
            current = found.setdefault((partition, to_int(nodes)), []) if partition else None
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
