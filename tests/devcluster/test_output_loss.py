"""Where a failing rank's last lines go: nemo-run's ``srun --kill-on-bad-exit=1
--output <one file>`` has srun receive every rank's output over TCP and write it
to that one file. When rank 0 fails, srun kills the other ranks, and once one is
reported killed by a signal it stops reading (``srun: Force Terminated``): what
of rank 0's output is still in flight, usually its traceback, never reaches the
file. That is srun's behaviour, not a cluster setting (``JobFileAppend`` and
``--open-mode`` do not change it), so these tests pin it down rather than wish it
away: the loss is only ever the tail, only with ``Force Terminated``, and never
without ``--kill-on-bad-exit``."""

from __future__ import annotations

import re

import pytest

from .conftest import HOME, RECIPES, Login
from .test_devcluster import nemo_log, run_nemo

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]

RUNS = 3
RACE = "DEVCLUSTER_STEPS=2 DEVCLUSTER_STEP_TIME_S=0.1 DEVCLUSTER_TOKENIZER_RACE=cold"
TRACEBACK = "Invalid cross-device link: 'gpt2-"
# What the stand-in's rank 0 prints on a cold cache, in order: stdout, then stderr.
ORDER = (
    "Stand-in sft recipe for llama3p1_8b",
    "Slurm job: ",
    "HF_TOKEN is ",
    "WANDB_API_KEY is ",
    "Experiments will be logged at ",
    "GPU available: True",
    "Initializing distributed: GLOBAL_RANK: 0",
    "Traceback (most recent call last):",
    "megatron/core/datasets/utils_s3.py",
    "shutil.move(local_name, cached_name)",
    "python3.12/shutil.py",
    "os.rename(src, real_dst)",
    TRACEBACK,
)


def only_the_tail_is_missing(log: str) -> bool:
    """The lines present are the first ones rank 0 printed, in order, each once:
    nothing was overwritten, truncated at the start or interleaved out of order."""
    if "\0" in log:
        return False
    present = [m for m in ORDER if m in log]
    positions = [log.index(m) for m in present]
    once = all(log.count(m) == 1 for m in present)
    return tuple(present) == ORDER[: len(present)] and positions == sorted(positions) and once


def test_a_lost_traceback_is_always_the_tail_cut_by_srun_force_terminating_the_step(
    login: Login, unique: str
) -> None:
    outcomes = []
    for i in range(RUNS):
        name = f"{unique}-{i}"
        status = run_nemo(login, name, env=RACE, cache=f"{HOME}/.cache/tests/{name}")
        job = status["job"]
        assert login.wait_for_state(job)["State"] == "FAILED"
        log = nemo_log(login, status["dir"], job)
        sbatch_log = login.run(f"cat {status['dir']}/sbatch_*_{job}.out").stdout
        # What survives every time: srun's own lines about rank 0 in the sbatch log.
        assert re.search(r"^srun: error: dev\d: task 0: Exited with exit code 1$", sbatch_log, re.M)
        assert only_the_tail_is_missing(log), f"job {job}: log is not a clean prefix:\n{log}"
        forced = f"srun: Force Terminated StepId={job}." in sbatch_log
        if TRACEBACK not in log:
            assert forced, f"job {job} lost the traceback without srun's abort:\n{sbatch_log}"
        outcomes.append((job, TRACEBACK in log, forced))
    print(f"(job, traceback in log, srun force-terminated): {outcomes}")


BATCH = """#!/bin/bash
export PYTHONUNBUFFERED=1 SLURM_UNBUFFEREDIO=1 NEMO_LOG_DIR={d}/logs NEMO_EXPERIMENT_NAME={name}
for i in $(seq 1 {runs}); do
  export NEMO_CACHE_DIR={d}/cache-$i
  srun --output {d}/log-%j_$i.out --chdir {d} --wait=60 --kill-on-bad-exit=0 \\
    python3 {recipes}/nemo/sft/llama3p1_8b_sft.py
done
"""


def test_without_kill_on_bad_exit_the_traceback_always_reaches_the_log(
    login: Login, unique: str
) -> None:
    """nemo-run's srun line with ``--kill-on-bad-exit=0``: the other rank ends on
    its own (exit code 1, no signal), srun reads every connection to its end, and
    the traceback is in the log every time."""
    d = f"{HOME}/.cache/tests/{unique}"
    script = BATCH.format(d=d, name=unique, runs=RUNS, recipes=RECIPES)
    login.run(f"mkdir -p {d} && cat > {d}/job.sh", stdin=script)
    job = login.run(
        f"cd {d} && DEVCLUSTER_TOKENIZER_RACE=cold sbatch --parsable -N 2 -p a4 "
        f"--gpus-per-node=8 --ntasks-per-node=1 --open-mode=append -J {unique} "
        f"-o {d}/sbatch-%j.out job.sh"
    ).stdout.strip()
    assert re.fullmatch(r"\d+", job), job
    login.wait_for_state(job)
    sbatch_log = login.read(f"{d}/sbatch-{job}.out")
    assert "Force Terminated" not in sbatch_log
    for i in range(1, RUNS + 1):
        log = login.read(f"{d}/log-{job}_{i}.out")
        assert TRACEBACK in log, f"step {i} of job {job} lost the traceback:\n{log}"
        assert only_the_tail_is_missing(log)
