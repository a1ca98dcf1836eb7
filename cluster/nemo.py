"""NeMo launcher: the ``run.py`` command line, nemo-run's status block, its log files.

``run.py`` (run in ``<recipes_dir>/nemo`` from a login shell, ``NEMORUN_HOME``
set) submits through nemo-run and prints a status block with the Slurm job id
and the task's Local Directory, where the logs are. The Slurm job name is
``<account>-<account>.<experiment name>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster.collect_remote import pick_nemo_logs
from cluster.remote import RemoteArg, RPath

__all__ = ["NemoStatus", "nemo_run_argv", "parse_status_block", "pick_nemo_logs"]

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def nemo_run_argv(
    *,
    cluster_type: str,
    partition: str,
    work_dir: str,
    image: str,
    script: str,
    nodes: int,
    experiment_name: str,
    log_dir: str | None = None,
    cache_dir: str | None = None,
    data_dir: str | None = None,
    time_limit: str | None = None,
    account: str | None = None,
    exclude: str | None = None,
    overrides: tuple[tuple[str, str], ...] = (),
) -> list[RemoteArg]:
    """``python3 run.py -e slurm ...``; recipe overrides follow ``--``."""
    argv: list[RemoteArg] = ["python3", "run.py", "-e", "slurm"]
    argv += ["--slurm-type", cluster_type, "--partition", partition]
    argv += ["-d", RPath(work_dir), "-i", RPath(image), "-s", script, "-n", str(nodes)]
    argv += ["--experiment-name", experiment_name]
    for flag, path in (
        ("--log-dir", log_dir),
        ("--cache-dir", cache_dir),
        ("--data-dir", data_dir),
    ):
        if path:
            argv += [flag, RPath(path)]
    if time_limit:
        argv += ["-t", time_limit]
    if account:
        argv += ["--account", account]
    if exclude:
        argv += ["--exclude", exclude]
    if overrides:
        argv += ["--", *(f"{key}={value}" for key, value in overrides)]
    return argv


@dataclass(frozen=True)
class NemoStatus:
    """What nemo-run's "Experiment Status" block says about the first task."""

    experiment_id: str
    task: str
    status: str
    job_id: str
    local_dir: str


def parse_status_block(text: str) -> NemoStatus:
    """Parse run.py's output; ValueError when no job id is in it."""
    clean = _ANSI_RE.sub("", text)
    fields: dict[str, str] = {}
    for line in clean.splitlines():
        line = line.strip()
        if match := re.match(r"Experiment Status for (\S+)", line):
            fields["experiment_id"] = match.group(1)
        elif match := re.match(r"Task \d+: (\S+)", line):
            fields.setdefault("task", match.group(1))
        elif match := re.match(r"- (Status|Job id|Local Directory): (.+)", line):
            key = {"Status": "status", "Job id": "job_id", "Local Directory": "local_dir"}
            fields.setdefault(key[match.group(1)], match.group(2).strip())
    job_id = fields.get("job_id", "")
    if not re.fullmatch(r"\d+(_\d+)?", job_id):
        raise ValueError(f"no Slurm job id in nemo-run's output: {clean.strip()[-300:]!r}")
    return NemoStatus(
        experiment_id=fields.get("experiment_id", ""),
        task=fields.get("task", ""),
        status=fields.get("status", ""),
        job_id=job_id,
        local_dir=fields.get("local_dir", ""),
    )
