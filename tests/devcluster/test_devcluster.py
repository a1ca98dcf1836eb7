"""The dev cluster is real: Slurm, accounting, the login node, nemo-run and the
stand-in recipes behave as FIELD_GUIDE.md says, reached over SSH with strict
host keys, the way a person at the login node would."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import DEV, HOME, PROJECT, RECIPES, Login

pytestmark = pytest.mark.devcluster

# The tokenizer race has its own test; elsewhere a cold cache (a fresh machine) must not fail.
FAST = (
    "DEVCLUSTER_STEPS=5 DEVCLUSTER_STEP_TIME_S=0.2 DEVCLUSTER_SAVE_TIME_S=0.1 "
    "DEVCLUSTER_TOKENIZER_RACE=off"
)
STATUS_RE = re.compile(
    r"Experiment Status for (?P<exp>\S+)\s+Task 0: (?P<task>\S+)\s+- Status: \S+\s+"
    r"- Executor: SlurmExecutor on @localhost\s+- Job id: (?P<job>\d+)\s+"
    r"- Local Directory: (?P<dir>\S+)"
)
NEMO_PROGRESS_RE = re.compile(
    r"^Training epoch 0, iteration (\d+)/(\d+) \| lr: \S+ \| consumed_samples: \d+ \| "
    r"global_batch_size: \d+ \| global_step: (\d+) \| reduced_train_loss: ([\d.]+) \| "
    r"train_step_timing in s: [\d.]+$",
    re.M,
)


def run_nemo(
    login: Login, name: str, *, nodes: int = 2, env: str = FAST, cache: str = ""
) -> dict[str, str]:
    cache = cache or f"{HOME}/.cache"
    out = login.run(
        f"cd {RECIPES}/nemo && {env} NEMORUN_HOME=$PWD python3 run.py -e slurm "
        f"--slurm-type hcc-a4 --partition a4 -d $PWD -i $PWD/nemo-20250721.sqsh "
        f"-s sft/llama3p1_8b_sft.py -n {nodes} --experiment-name {name} "
        f"--cache-dir {cache} --log-dir {RECIPES}/nemo/logs"
    ).stdout
    match = STATUS_RE.search(out)
    assert match, f"no nemo-run status block in:\n{out}"
    return match.groupdict()


def nemo_log(login: Login, local_dir: str, job_id: str) -> str:
    return login.run(f"cat {local_dir}/log-*_{job_id}_0.out").stdout


def sbatch_rl(login: Login, args: str, *, env: str = FAST, nodes: int = 1, name: str = "") -> str:
    jname = f"-J {name} " if name else ""
    out = login.run(
        f"cd {RECIPES}/nemo_rl && {env} sbatch --parsable -N {nodes} -p a3u {jname}"
        f"launch.sh --cluster_type hcc-a3u {args}"
    ).stdout.strip()
    assert re.fullmatch(r"\d+", out), out
    return out


def test_sinfo_shows_four_nodes_with_eight_gpus_in_every_partition(login: Login) -> None:
    out = login.run("sinfo -h -o '%P %D %G'").stdout.split("\n")
    rows = sorted(line.split() for line in out if line)
    assert rows == sorted(
        [["a3m*", "4", "gpu:8"], ["a3u", "4", "gpu:8"], ["a4", "4", "gpu:8"], ["a3h", "4", "gpu:8"]]
    )
    nodes = login.run("sinfo -h -N -p a4 -o '%N %G'").stdout.split()
    assert nodes == ["dev0", "gpu:8", "dev1", "gpu:8", "dev2", "gpu:8", "dev3", "gpu:8"]


def test_invalid_partition_fails_with_the_guides_error_text(login: Login) -> None:
    proc = login.run("sbatch -p general --wrap true", check=False)
    assert proc.returncode != 0
    assert proc.stderr.splitlines() == [
        "sbatch: error: invalid partition specified: general",
        "sbatch: error: Batch job submission failed: Invalid partition name specified",
    ]


def test_host_key_checking_is_strict(tmp_path: Path) -> None:
    if not (DEV / "known_hosts").exists():
        pytest.skip("the dev cluster is not up")
    other = tmp_path / "known_hosts"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True
    )
    other.write_text(
        "[127.0.0.1]:2222 " + " ".join((tmp_path / "k.pub").read_text().split()[:2]) + "\n"
    )
    for known_hosts in (other, tmp_path / "empty"):
        proc = subprocess.run(
            ["ssh", "-i", str(DEV / "id_ed25519"), "-p", "2222",
             "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes",
             "-o", "BatchMode=yes", "trainer@127.0.0.1", "true"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert proc.returncode == 255
        assert "Host key verification failed" in proc.stderr


def test_run_py_launches_a_two_node_sft_through_nemo_run(login: Login, unique: str) -> None:
    status = run_nemo(login, unique)
    assert status["exp"].startswith(f"{unique}_") and status["task"] == unique
    assert status["dir"] == f"{RECIPES}/nemo/experiments/{unique}/{status['exp']}/{unique}"
    row = login.wait_for_state(status["job"])
    assert row["State"] == "COMPLETED", row
    assert row["NNodes"] == "2" and row["Partition"] == "a4"
    assert row["JobName"] == f"trainer-trainer.{unique}"
    log = nemo_log(login, status["dir"], status["job"])
    steps = [int(m[2]) for m in NEMO_PROGRESS_RE.findall(log)]
    assert steps == [0, 1, 2, 3, 4]
    losses = [float(m[3]) for m in NEMO_PROGRESS_RE.findall(log)]
    assert losses[-1] < losses[0]
    assert "`Trainer.fit` stopped: `max_steps=5` reached." in log
    ckpts = login.run(f"ls {RECIPES}/nemo/logs/{unique}/default/checkpoints").stdout.split()
    assert ckpts[-1] == "model_name=0--val_loss=0.00-step=4-consumed_samples=160.0-last"
    assert not any(c.endswith("-unfinished") for c in ckpts)
    assert login.exists(f"{RECIPES}/nemo/logs/{unique}/default/checkpoints/{ckpts[0]}/weights")


def test_tokenizer_race_on_a_cold_cache_and_not_on_the_rerun(login: Login, unique: str) -> None:
    cache = f"{HOME}/.cache/tests/{unique}"
    env = "DEVCLUSTER_STEPS=2 DEVCLUSTER_STEP_TIME_S=0.1 DEVCLUSTER_TOKENIZER_RACE=cold"
    first = run_nemo(login, unique, nodes=1, env=env, cache=cache)
    assert login.wait_for_state(first["job"])["State"] == "FAILED"
    log = nemo_log(login, first["dir"], first["job"])
    expected = (
        "OSError: [Errno 18] Invalid cross-device link: 'gpt2-vocab.json' -> "
        f"'{cache}/torch/megatron/megatron-gpt-345m_vocab'"
    )
    assert expected in log.splitlines()
    for name in ("megatron-gpt-345m_vocab", "megatron-gpt-345m_merges"):
        assert login.exists(f"{cache}/torch/megatron/{name}")
    second = run_nemo(login, unique, nodes=1, env=env, cache=cache)
    assert login.wait_for_state(second["job"])["State"] == "COMPLETED"
    assert "Invalid cross-device link" not in nemo_log(login, second["dir"], second["job"])


def test_launch_sh_creates_the_job_dir_layout(login: Login, unique: str) -> None:
    job = sbatch_rl(
        login, "--job_script algorithms/dpo.sh dpo.max_num_steps=3", nodes=2, name=unique
    )
    row = login.wait_for_state(job)
    assert row["State"] == "COMPLETED" and row["NNodes"] == "2" and row["JobName"] == unique
    job_dir = f"{RECIPES}/nemo_rl/{job}"
    assert login.run(f"ls {job_dir}").stdout.split() == [
        "checkpoints",
        "nemo_rl_output.log",
        "ray-logs",
    ]
    assert login.run(f"ls {job_dir}/checkpoints").stdout.split() == ["step_1", "step_2", "step_3"]
    log = login.read(f"{job_dir}/nemo_rl_output.log")
    assert re.findall(r"^=+ Step (\d+)/3 =+$", log, re.M) == ["1", "2", "3"]
    # DPO prints its metrics by field name, lower case (NVIDIA-NeMo/RL nemo_rl/algorithms/dpo.py)
    assert re.search(r"^📊 Training Results:\n  • loss: 0\.\d{4}$", log, re.M)
    assert "Saving checkpoint for step 3..." in log


def test_interactive_job_writes_attach_sh_that_runs_inside_the_allocation(
    login: Login, cancel_after: list[str]
) -> None:
    job = sbatch_rl(login, "--interactive", env="DEVCLUSTER_ATTACH_DELAY_S=1")
    cancel_after.append(job)
    attach = f"{RECIPES}/nemo_rl/{job}/attach.sh"
    login.wait_for(lambda: login.exists(attach), "attach.sh", timeout_s=60)
    out = login.run(
        f"bash {attach} bash -c 'echo $SLURM_JOB_ID $SLURM_STEP_ID $SLURMD_NODENAME'"
    ).stdout
    job_id, step_id, node = out.split()
    assert job_id == job and step_id.isdigit() and re.fullmatch(r"dev[0-3]", node)
    # Without arguments it is a shell in the allocation, as after "ssh -t login bash attach.sh".
    shell = login.run(f"bash {attach}", stdin="echo inside $SLURM_JOB_ID\nexit\n").stdout
    assert f"inside {job}" in shell
    # The job holds its nodes until cancelled (squeue: sacct may lag behind a live job).
    assert login.run(f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING"


FAULTS = {
    "oom": "torch.OutOfMemoryError: CUDA out of memory.",
    "nccl": "Watchdog caught collective operation timeout",
    "gated": "huggingface_hub.errors.GatedRepoError: 401 Client Error.",
    "wandb": "api_key not configured (no-tty)",
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_injected_faults_produce_their_signatures(login: Login, unique: str, fault: str) -> None:
    job = sbatch_rl(
        login, "--job_script algorithms/grpo.sh", name=unique,
        env=f"{FAST} DEVCLUSTER_FAULT={fault} DEVCLUSTER_FAULT_AT_STEP=2",
    )  # fmt: skip
    assert login.wait_for_state(job)["State"] == "FAILED"
    assert FAULTS[fault] in login.read(f"{RECIPES}/nemo_rl/{job}/nemo_rl_output.log")


def test_nemo_fault_via_control_file_without_touching_the_recipe(login: Login, unique: str) -> None:
    control = f"{HOME}/devcluster-control/{unique}.env"
    login.run(f"printf 'fault=oom\\nfault_at_step=1\\n' > {control}")
    try:
        status = run_nemo(login, unique, nodes=1)
        assert login.wait_for_state(status["job"])["State"] == "FAILED"
        log = nemo_log(login, status["dir"], status["job"])
        assert FAULTS["oom"] in log
        assert len(NEMO_PROGRESS_RE.findall(log)) == 1
    finally:
        login.run(f"rm -f {control}")


def test_silent_hang_stops_progress_while_the_job_keeps_running(
    login: Login, unique: str, cancel_after: list[str]
) -> None:
    job = sbatch_rl(
        login, "--job_script algorithms/sft.sh", name=unique,
        env=f"{FAST} DEVCLUSTER_FAULT=hang DEVCLUSTER_FAULT_AT_STEP=2",
    )  # fmt: skip
    cancel_after.append(job)
    log_path = f"{RECIPES}/nemo_rl/{job}/nemo_rl_output.log"
    # Step 1 is whole once its timing is printed; the hang strikes before step 2's header.
    login.wait_for(
        lambda: "Total step time" in login.run(f"cat {log_path} 2>/dev/null", check=False).stdout,
        "step 1's results",
    )
    first = login.read(log_path)
    assert "Step 1/5" in first
    time.sleep(2)
    assert login.read(log_path) == first
    assert "Step 2/5" not in first
    assert login.run(f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING"


def test_killing_a_slurmd_ends_the_running_incarnation_node_fail(
    login: Login, unique: str, cancel_after: list[str]
) -> None:
    job = sbatch_rl(
        login, "--job_script algorithms/sft.sh", nodes=2, name=unique,
        env="DEVCLUSTER_STEPS=200 DEVCLUSTER_STEP_TIME_S=0.5",
    )  # fmt: skip
    cancel_after.append(job)
    login.wait_for_state(job, ("RUNNING",), timeout_s=60)
    node = login.run(f"squeue -h -j {job} -o %N").stdout.strip()
    victim = login.run(f"scontrol show hostnames {node} | tail -n 1").stdout.strip()
    node_script = str(PROJECT / "devcluster" / "node")
    subprocess.run([node_script, "fail", victim], check=True, capture_output=True)
    try:
        login.wait_for(
            lambda: any(r["State"] == "NODE_FAIL" for r in login.sacct(job, duplicates=True)),
            "NODE_FAIL in sacct -D",
            timeout_s=90,
        )
        restarts = login.run(f"scontrol show job {job}").stdout
        assert "Restarts=1" in restarts  # Slurm requeues the same job id (JobRequeue=1)
    finally:
        subprocess.run([node_script, "restore", victim], check=True, capture_output=True)
    login.wait_for(
        lambda: login.run(f"sinfo -h -n {victim} -o %t").stdout.strip() in ("idle", "mix", "alloc"),
        f"{victim} back in service",
        timeout_s=60,
    )
