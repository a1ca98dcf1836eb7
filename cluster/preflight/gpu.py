"""GPU utilisation and memory of running jobs, read on their nodes: every job of one
cluster (as one Unix user) in one SSH round trip.

On the login node, for each job: ``srun --overlap --jobid=<id> --ntasks-per-node=1
nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total
--format=csv,noheader,nounits`` (an extra step that shares the job's resources; one task
per node), several at once. nvidia-smi prints one line per GPU, ``<util>, <used>,
<total>`` (percent, MiB, MiB) with those flags (nvidia-smi --help-query-gpu: "--format=csv,
noheader,nounits"). Each output line comes back prefixed with its job id.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from cluster.ssh.connect import LoginLike
from cluster.ssh.pool import SSHPool

QUERY = (
    "nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits"
)
PARALLEL = 16  # srun steps at once
STEP_TIMEOUT_S = 20
JOB_ID_RE = re.compile(r"^[0-9]+(?:_[0-9]+)?$")
LINE_RE = re.compile(r"^(?P<job>[0-9_]+)\|\s*(?P<util>\d+), (?P<used>\d+), (?P<total>\d+)\s*$")


@dataclass(frozen=True)
class GpuSample:
    """One job's GPUs at one moment: the mean utilisation (percent) and memory (MiB)."""

    gpus: int
    util_pct: float
    mem_used_mib: float
    mem_total_mib: float

    def describe(self) -> str:
        used, total = self.mem_used_mib / 1024, self.mem_total_mib / 1024
        return f"{self.util_pct:.0f}% busy, {used:.1f}/{total:.0f} GiB memory"


def sample_script(job_ids: Sequence[str]) -> str:
    """The login-node shell command that samples ``job_ids`` (each line: ``<id>|<line>``)."""
    for job in job_ids:
        if not JOB_ID_RE.match(job):
            raise ValueError(f"not a Slurm job id: {job!r}")
    step = (
        f'timeout {STEP_TIMEOUT_S} srun --overlap --jobid="$0" --ntasks-per-node=1 --quiet '
        f'{QUERY} 2>&1 | sed "s/^/$0|/"'
    )
    ids = " ".join(job_ids)
    return f"printf '%s\\n' {ids} | xargs -P {PARALLEL} -n 1 sh -c {shlex.quote(step)}"


def parse_samples(text: str) -> dict[str, GpuSample]:
    """Per job, the mean over its GPUs (all nodes); jobs that printed no reading are left
    out (a job that just ended, a node that did not answer)."""
    rows: dict[str, list[tuple[int, int, int]]] = {}
    for line in text.splitlines():
        if m := LINE_RE.match(line):
            rows.setdefault(m["job"], []).append((int(m["util"]), int(m["used"]), int(m["total"])))
    return {
        job: GpuSample(
            gpus=len(r),
            util_pct=sum(x[0] for x in r) / len(r),
            mem_used_mib=sum(x[1] for x in r) / len(r),
            mem_total_mib=sum(x[2] for x in r) / len(r),
        )
        for job, r in rows.items()
    }


async def sample(
    pool: SSHPool, login: LoginLike, job_ids: Sequence[str], *, cluster: str = ""
) -> dict[str, GpuSample]:
    """GPU figures of ``job_ids`` (running jobs of one Unix user) in one round trip."""
    if not job_ids:
        return {}
    timeout_s = STEP_TIMEOUT_S * (len(job_ids) // PARALLEL + 1) + 10
    result = await pool.run(
        login, sample_script(job_ids), timeout_s=timeout_s, check=False, cluster=cluster
    )
    return parse_samples(result.stdout)
