#!/usr/bin/env python3
"""Launch a NeMo recipe on Slurm through NeMo-Run (dev cluster edition).

    export NEMORUN_HOME=$WORK_DIR
    python3 run.py -e slurm --slurm-type hcc-a3m --partition a3m \\
      -d $WORK_DIR -i $WORK_DIR/nemo-20250721.sqsh \\
      -s pretrain/llama3p1_2b_pt.py -n 2 --experiment-name nemo-demo-run

Same flags as the real launcher. The submission is real (nemo-run's
SlurmExecutor with a LocalTunnel, "sbatch --requeue --parsable"), and so is the
status block it prints. The dev cluster has no pyxis/enroot: the image must
exist, but the task runs without a container, and the directories that a real
run mounts (--log-dir, --cache-dir, --data-dir) reach the recipe as
NEMO_LOG_DIR, NEMO_CACHE_DIR and NEMO_DATA_DIR.

Secrets (HF_TOKEN, WANDB_API_KEY) and DEVCLUSTER_* knobs are passed on from
this process's environment to the job, never through the command line.
Recipe overrides follow "--", e.g. "-- trainer.max_steps=50".
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

CLUSTER_TYPES = {
    # type: (GPUs per node, NCCL set-up a real job sources)
    "hcc-a3m": (8, "source /var/lib/tcpxo/lib64/nccl-env-profile.sh"),
    "hcc-a3u": (8, "source /usr/local/gib/scripts/set_nccl_env.sh"),
    "hcc-a4": (8, "export NCCL_NET=gIB NCCL_CROSS_NIC=0 NCCL_NET_GDR_LEVEL=PIX"),
    "hcc-a3h": (8, "source /usr/local/gib/scripts/set_nccl_env.sh"),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-e", "--executor", choices=["slurm"], required=True)
    parser.add_argument("--slurm-type", choices=sorted(CLUSTER_TYPES), required=True)
    parser.add_argument("--partition", default="general")
    parser.add_argument("-d", "--work-dir", required=True, help="NeMo working directory")
    parser.add_argument("-i", "--image", required=True, help="container image (.sqsh)")
    parser.add_argument("-s", "--script", required=True, help="recipe script, relative to -d")
    parser.add_argument("-n", "--nodes", type=int, default=1)
    parser.add_argument("--experiment-name", required=True)
    parser.add_argument("--log-dir")
    parser.add_argument("--cache-dir")
    parser.add_argument("--data-dir")
    parser.add_argument("-t", "--time", default="04:00:00", help="Slurm time limit")
    parser.add_argument("--account", default=None, help="Slurm account (default: your user)")
    parser.add_argument("--exclude", default=None, help="Slurm nodes to leave out (e.g. dev1)")
    parser.add_argument("overrides", nargs="*", help="recipe overrides after --")
    return parser.parse_args(argv)


def fail(message: str) -> None:
    print(f"run.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    work_dir = Path(args.work_dir).expanduser().resolve()
    script = (work_dir / args.script).resolve()
    image = Path(args.image).expanduser()
    if not script.is_file():
        fail(f"recipe script not found: {script}")
    if not image.is_file():
        fail(f"container image not found: {image}")
    if "NEMORUN_HOME" not in os.environ:
        fail("NEMORUN_HOME is not set (export NEMORUN_HOME=$WORK_DIR)")
    if args.nodes < 1:
        fail(f"-n must be at least 1 (got {args.nodes})")

    import nemo_run as run  # slow (about 1.5 s): only after the arguments are known good

    gpus_per_node, _nccl_setup = CLUSTER_TYPES[args.slurm_type]
    env_vars = {"NEMO_EXPERIMENT_NAME": args.experiment_name, "PYTHONUNBUFFERED": "1"}
    for flag, name in ((args.log_dir, "NEMO_LOG_DIR"), (args.cache_dir, "NEMO_CACHE_DIR"),
                       (args.data_dir, "NEMO_DATA_DIR")):
        if flag:
            path = Path(flag).expanduser()
            path.mkdir(parents=True, exist_ok=True)
            env_vars[name] = str(path)
    executor = run.SlurmExecutor(
        account=args.account or getpass.getuser(),
        partition=args.partition,
        nodes=args.nodes,
        # One task per GPU, all writing to one file through srun --output, as a real run
        # (NVIDIA/NeMo-Run 0c49127199cad0495466dc85620ca58a4111f4bc, slurm.py/slurm.sh.j2).
        ntasks_per_node=gpus_per_node,
        gpus_per_node=gpus_per_node,
        time=args.time,
        env_vars=env_vars,
        tunnel=run.LocalTunnel(job_dir=""),
        packager=run.Packager(),
        exclude=args.exclude,
    )
    # Secrets and DEVCLUSTER_* knobs are not put in env_vars (nemo-run writes
    # those into the sbatch script on disk): sbatch exports this process's
    # environment to the job by default, and that is how they travel.
    task = run.Script(path=str(script), entrypoint="python3", args=list(args.overrides))
    with run.Experiment(args.experiment_name, log_level="WARN") as exp:
        exp.add(task, executor=executor, name=args.experiment_name)
        exp.run(detach=True)


if __name__ == "__main__":
    main(sys.argv[1:])
