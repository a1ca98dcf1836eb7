"""NeMo-RL launcher: ``sbatch ... launch.sh`` in ``<recipes_dir>/nemo_rl``.

The job works in ``<nemo_rl dir>/<job id>/`` (``checkpoints/step_N``,
``ray-logs/``, ``nemo_rl_output.log``, and ``attach.sh`` for ``--interactive``
jobs); sbatch's own output is ``slurm-<job id>.out`` in the submit directory.
"""

from __future__ import annotations

from cluster.profiles import join_remote
from cluster.remote import RemoteArg


def sbatch_argv(
    *,
    nodes: int,
    partition: str,
    job_name: str,
    cluster_type: str,
    job_script: str | None = None,
    interactive: bool = False,
    time_limit: str | None = None,
    account: str | None = None,
    exclude: str | None = None,
    args: tuple[str, ...] = (),
    overrides: tuple[tuple[str, str], ...] = (),
) -> list[RemoteArg]:
    """``sbatch --parsable -N n -p part -J name [-t T] launch.sh --cluster_type ...``."""
    argv: list[RemoteArg] = ["sbatch", "--parsable", "-N", str(nodes), "-p", partition]
    argv += ["-J", job_name]
    if time_limit:
        argv += ["-t", time_limit]
    if account:
        argv += ["--account", account]
    if exclude:
        argv += ["--exclude", exclude]
    argv += ["launch.sh", "--cluster_type", cluster_type]
    if interactive:
        argv.append("--interactive")
    if job_script:
        argv += ["--job_script", job_script]
    argv += [*args, *(f"{key}={value}" for key, value in overrides)]
    return argv


def job_dir(nemo_rl_dir: str, job_id: str) -> str:
    return join_remote(nemo_rl_dir, job_id)


def attach_command(nemo_rl_dir: str, job_id: str) -> str:
    """What a person runs on the login node to attach (re-runnable)."""
    return f"bash {join_remote(nemo_rl_dir, job_id, 'attach.sh')}"
