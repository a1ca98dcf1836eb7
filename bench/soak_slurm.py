"""Slurm's own record of the soak's jobs, asked here (``sacct``/``squeue``/``scancel``
run on this machine: it is the dev cluster's login node). Every call is bounded in
time."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from bench.soak_infra import run
from cluster.slurm.sacct import tres_gpus


@dataclass(frozen=True)
class JobRow:
    job_id: str
    name: str
    state: str
    submit: float
    start: float
    end: float
    nodelist: str
    elapsed_s: int = 0  # ElapsedRaw
    gpus: int = 0  # AllocTRES gres/gpu

    @property
    def gpu_hours(self) -> float:
        return self.elapsed_s * self.gpus / 3600


def _epoch(value: str) -> float:
    return float(value) if value.isdigit() else 0.0


def sacct_rows(since: float, fragment: str, *, duplicates: bool = False) -> list[JobRow]:
    """Every job (``-D``: every incarnation) since ``since`` whose name contains ``fragment``."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 120))
    fields = "JobID,JobName%120,State,Submit,Start,End,NodeList,ElapsedRaw,AllocTRES"
    argv = ["sacct", "--allusers", "-X", "-P", "-n", "-S", start, "-o", fields]
    if duplicates:
        argv.insert(1, "-D")
    out = run(argv, timeout_s=60, env={**os.environ, "SLURM_TIME_FORMAT": "%s"})
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 9 or fragment not in parts[1]:
            continue
        rows.append(
            JobRow(
                parts[0], parts[1], parts[2], _epoch(parts[3]), _epoch(parts[4]),
                _epoch(parts[5]), parts[6], int(_epoch(parts[7])), tres_gpus(parts[8]),
            )
        )  # fmt: skip
    return rows


@dataclass(frozen=True)
class SoakQueueRow:
    job_id: str
    name: str
    state: str
    nodelist: str
    elapsed_s: int


def seconds(elapsed: str) -> int:
    """squeue's ``%M``: ``5:02``, ``1:05:02`` or ``2-01:05:02``."""
    days, _, clock = elapsed.rpartition("-")
    total = 0
    for part in clock.split(":"):
        total = total * 60 + (int(part) if part.isdigit() else 0)
    return total + int(days or 0) * 86400


def squeue_rows(fragment: str) -> list[SoakQueueRow]:
    out = run(["squeue", "-h", "-o", "%i|%j|%T|%N|%M"], timeout_s=30)
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 5 and fragment in parts[1]:
            rows.append(SoakQueueRow(parts[0], parts[1], parts[2], parts[3], seconds(parts[4])))
    return rows


def scancel(job_ids: list[str]) -> None:
    if job_ids:
        run(["scancel", *job_ids], timeout_s=30)
