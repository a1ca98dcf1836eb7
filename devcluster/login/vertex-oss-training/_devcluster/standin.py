"""Stand-in training workload for the dev cluster.

The dev cluster has no GPUs, so its recipes do not train anything. They print
what NeMo and NeMo-RL print (progress lines with a falling loss, checkpoint
messages, the final line), write checkpoints in each framework's layout, and
fail the way real runs fail, byte for byte where trainbot reads the text.

Knobs and faults come from, in rising precedence:
  ~/devcluster-control/default.env      applies to every job
  ~/devcluster-control/<tag>.env        applies to jobs whose Slurm job name contains <tag>
  DEVCLUSTER_<KEY> environment variables
Each file holds KEY=VALUE lines. Keys:
  fault           oom | nccl | hang | gated | wandb | none, or a failure real runs print
                  today (START_FAULTS before step 1, STEP_FAULTS at fault_at_step):
                  pyxis_mount | registry_401 | sqsh_missing | hub_429 | heartbeat |
                  xid154 | ray_node | vllm_dead
  fault_at_step   step at which oom, nccl or hang strike (default: a third of the way)
  fault_once      1: the fault strikes only the first job that matches (then it is spent)
  steps           training steps (default 30)
  step_time_s     seconds per step (default 2)
  ckpt_every      checkpoint interval in steps (default steps/3)
  save_time_s     seconds a checkpoint save takes (default 0.5)
  tokenizer_race  cold (default: fail once on a cold cache, filling it) |
                  until_seeded (fail until someone else seeds the cache) | off
  attach_delay_s  NeMo-RL interactive: seconds before attach.sh appears (default 10)
  teardown_s      seconds a failing rank 0 takes to exit after its last output (default 1;
                  0 exits at once, which lets srun drop the traceback: see the README)
  tensorboard     1: NeMo recipes log to TensorBoard (NeMo-RL: logger.tensorboard_enabled=True)
  startup_s       seconds of start-up before step 1 (image import, model download, Ray,
                  vLLM; real 70B runs often take over 10 minutes; default 0)
  startup_line_s  seconds between the start-up phase's lines (default 5; 0: it prints nothing)
  epochs          NeMo-RL: epochs (as <algorithm>.max_num_epochs; default 1)
  epoch_steps     NeMo-RL: batches per epoch, len(dataloader) (default: steps)
  val_every       NeMo: validate every N steps and carry val_loss on later lines (default 0: never)
  nan_at          NeMo: from this step on the loss prints as nan (as NeMo's progress printer
                  formats a NaN: "reduced_train_loss: nan"); nan_value=inf prints inf instead
  spike_at        NeMo: this step's loss is spike_factor (default 10) times the usual one
  slow_at         NeMo: from this step, slow_steps steps (default 5) take slow_factor
                  (default 4) times step_time_s, and print that as their step timing
  rl_buffered     NeMo-RL: 1 prints without flushing, as the real drivers do (block-buffered
                  into the log unless PYTHONUNBUFFERED reaches the driver; default 0)
  max_time        NeMo: trainer.max_time (DD:HH:MM:SS) when the launch does not give it: past it,
                  Lightning's Timer stops the run after a checkpoint and it exits 0
  must_save_by    NeMo-RL: checkpointing.checkpoint_must_save_by (DD:HH:MM:SS) when the launch
                  does not give it
  val_every       (NeMo-RL GRPO: validate every N steps, as grpo.val_period)
  rl_layout       NeMo-RL launch.sh: seed (default: <job id>/nemo_rl_output.log, ray-logs/) or
                  ray.sub (upstream: <job id>[-<restart>]-logs/ray-driver.log, <job id>-attach.sh);
                  rl_layout_<cluster type> (e.g. rl_layout_hcc-a3h=ray.sub) picks it per cluster
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

CONTROL_DIR = Path.home() / "devcluster-control"
RANK_DIR = Path("/tmp/devcluster-standin")


def read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip().lower()] = value.strip()
    return values


def knobs() -> dict[str, str]:
    values: dict[str, str] = {"_tag": "default"}
    job_name = os.environ.get("SLURM_JOB_NAME", "")
    if CONTROL_DIR.is_dir():
        default = CONTROL_DIR / "default.env"
        if default.is_file():
            values.update(read_env_file(default))
        for path in sorted(CONTROL_DIR.glob("*.env")):
            if path.name != "default.env" and path.stem in job_name:
                values.update(read_env_file(path))
                values["_tag"] = path.stem
    for key, value in os.environ.items():
        if key.startswith("DEVCLUSTER_"):
            values[key[len("DEVCLUSTER_") :].lower()] = value
    return values


def fault_armed(k: dict[str, str]) -> str:
    """The fault to inject, or "" (a spent fault_once counts as none)."""
    fault = k.get("fault", "none").strip().lower()
    if fault in ("", "none"):
        return ""
    if k.get("fault_once", "0") in ("1", "true", "yes"):
        marker = CONTROL_DIR / "spent" / f"{k['_tag']}-{fault}"
        if marker.exists():
            return ""
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(os.environ.get("SLURM_JOB_ID", "") + "\n")
    return fault


FLUSH = True  # buffer_output() makes say() print as the real drivers do: plain print()


def buffer_output() -> None:
    """From now on, say() prints without flushing, as NeMo-RL's drivers do: into a file,
    Python then writes in blocks (io.DEFAULT_BUFFER_SIZE) unless PYTHONUNBUFFERED is set."""
    global FLUSH
    FLUSH = False


def say(*lines: str) -> None:
    for line in lines:
        print(line, flush=FLUSH)


def warn(*lines: str) -> None:
    for line in lines:
        print(line, file=sys.stderr, flush=True)


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def rank_file() -> Path:
    """Where rank 0 leaves its exit code for the other ranks. Job ids start again
    from 1 when the dev cluster is rebuilt, so the name also carries the working
    directory the ranks share (nemo-run's per-experiment directory)."""
    job = os.environ.get("SLURM_JOB_ID", "0")
    step = os.environ.get("SLURM_STEP_ID", "batch")
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    where = hashlib.sha256(os.getcwd().encode()).hexdigest()[:12]
    return RANK_DIR / f"{job}.{step}.{restart}.{where}.rc"


def finish(rc: int) -> None:
    """Rank 0 ends the run; the other ranks (see follow_rank0) end with it.

    A real rank that fails tears down CUDA, NCCL and the interpreter before it
    exits, so its last output reaches srun well before its exit does. A stand-in
    that exited within a millisecond of printing would race srun, which stops
    reading the job's output as soon as it kills the other ranks.
    """
    if rc != 0:
        time.sleep(float_knob(knobs(), "teardown_s", 1.0))
    if not RANK_DIR.is_dir():  # devcluster/up makes it; shared by every login user's jobs
        RANK_DIR.mkdir(parents=True, exist_ok=True)
        os.chmod(RANK_DIR, 0o1777)
    rank_file().write_text(str(rc))
    sys.exit(rc)


def follow_rank0() -> None:
    """Ranks other than 0 stay silent and end the way rank 0 ends."""
    path = rank_file()
    while not path.exists():
        time.sleep(0.5)
    sys.exit(int(path.read_text() or "1"))


def startup(k: dict[str, str], lines: list[str]) -> None:
    """The slow start-up before step 1: ``startup_s`` seconds, a line from ``lines`` every
    ``startup_line_s`` seconds (none when that is 0: a silent start-up)."""
    total_s = float_knob(k, "startup_s", 0.0)
    every_s = float_knob(k, "startup_line_s", 5.0)
    end = time.monotonic() + total_s
    i = 0
    while (left := end - time.monotonic()) > 0:
        if every_s > 0:
            say(lines[i % len(lines)])
            i += 1
        time.sleep(min(left, every_s) if every_s > 0 else left)


def hang() -> None:
    """A silent hang: the process lives on, printing nothing, until it is cancelled."""
    while True:
        time.sleep(3600)


# Failures real runs print today, each in its upstream format (the sources are cited with
# the same texts in tests/cluster/data/corpus/corpus.yaml): pyxis and enroot before the
# program starts, the Hugging Face Hub's rate limit at start-up, PyTorch's NCCL heartbeat
# monitor, an Xid that needs a GPU reset, Ray losing a node, vLLM's dead engine.
START_FAULTS = {
    "pyxis_mount": [
        "slurmstepd: error: pyxis: --container-mounts: source path does not exist: "
        "/home/trainer/data/missing",
        "slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1",
    ],
    "registry_401": [
        "slurmstepd: error: pyxis: failed to import docker image: nvcr.io#nvidia/nemo:26.02",
        "slurmstepd: error: pyxis: printing enroot log file:",
        "slurmstepd: error: pyxis:     [ERROR] URL https://nvcr.io/v2/nvidia/nemo/manifests/26.02 "
        "returned error code: 401 Unauthorized",
        "slurmstepd: error: pyxis: couldn't start container",
    ],
    "sqsh_missing": [
        "slurmstepd: error: pyxis: failed to create container filesystem for image: "
        "/home/trainer/images/missing.sqsh",
        "slurmstepd: error: pyxis: printing enroot log file:",
        "slurmstepd: error: pyxis:     [ERROR] No such file or directory: "
        "/home/trainer/images/missing.sqsh",
        "slurmstepd: error: pyxis: couldn't start container",
    ],
    "hub_429": [
        "huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: "
        "https://huggingface.co/api/models/meta-llama/Llama-3.1-8B-Instruct/revision/main",
    ],
}
STEP_FAULTS = {
    "heartbeat": [
        "[rank0]:[E1203 20:11:04.481000000 ProcessGroupNCCL.cpp:1316] [PG ID 0 PG GUID "
        "0(default_pg) Rank 0] Heartbeat monitor timed out! Process will be terminated after "
        "dumping debug info. workMetaList_.size()=1",
    ],
    "xid154": [
        "NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
        "(GPU Reset Required)",
    ],
    "ray_node": [
        "(raylet) The node with node id: 4f2a0c1d and address: 10.0.0.12 and node name: dev2 has "
        "been marked dead because the detector has missed too many heartbeats from it.",
    ],
    "vllm_dead": [
        "(EngineCore_DP0 pid=5120) ERROR [core.py:710] AssertionError: weight shapes differ",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause.",
    ],
}


def start_fault(fault: str) -> bool:
    """A failure before the first step (START_FAULTS): printed; True when it struck."""
    if fault not in START_FAULTS:
        return False
    warn(*START_FAULTS[fault])
    return True


def strike(fault: str, step: int, fault_at: int, end: Callable[[int], None]) -> None:
    """A training-time fault (oom, nccl, hang, STEP_FAULTS) once ``step`` reaches ``fault_at``."""
    if fault not in ("oom", "nccl", "hang", *STEP_FAULTS) or step < fault_at:
        return
    if fault in STEP_FAULTS:
        warn(*STEP_FAULTS[fault])
        end(134 if fault == "heartbeat" else 1)
    if fault == "oom":
        oom_error()
        end(1)
    if fault == "nccl":
        nccl_error(step * 7 + 11)
        end(134)
    hang()


def loss_at(step: int, steps: int, start: float = 2.6, floor: float = 0.9) -> float:
    rng = random.Random(step)
    return floor + (start - floor) * math.exp(-3.0 * step / max(steps, 1)) + rng.uniform(-0.03, 0.03)


def secret_fingerprints() -> list[str]:
    """Say whether the job received its secrets, without ever printing them."""
    lines = []
    for name in ("HF_TOKEN", "WANDB_API_KEY"):
        value = os.environ.get(name, "")
        if value:
            digest = hashlib.sha256(value.encode()).hexdigest()[:12]
            lines.append(f"{name} is set (sha256 {digest})")
        else:
            lines.append(f"{name} is not set")
    return lines


WANDB_RUNS = Path.home() / ".cache" / "devcluster-wandb"  # the runs this stand-in "created"


def wandb_lines(project: str) -> list[str]:
    """What wandb.init prints for the run W&B's own variables name (WANDB_RUN_ID,
    WANDB_RESUME, WANDB_RUN_GROUP, WANDB_TAGS): a new run the first time, "Resuming"
    afterwards. Each start is also appended to <run dir>/<id>.starts, one line per start
    (job id, restart count, group, tags), so a test can see which run every attempt used."""
    run_id = os.environ.get("WANDB_RUN_ID", "")
    if not run_id:
        return []
    WANDB_RUNS.mkdir(parents=True, exist_ok=True)
    record = WANDB_RUNS / f"{run_id}.starts"
    resumed = record.exists()
    if resumed and os.environ.get("WANDB_RESUME", "") not in ("allow", "must", "auto"):
        warn(f"wandb: ERROR run {run_id} exists and resume is not set")
    job = os.environ.get("SLURM_JOB_ID", "")
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    group = os.environ.get("WANDB_RUN_GROUP", "")
    tags = os.environ.get("WANDB_TAGS", "")
    with record.open("a") as out:
        out.write(f"job={job} restart={restart} group={group} tags={tags}\n")
    url = f"https://wandb.ai/devcluster/{project}"
    return [
        f"wandb: {'Resuming' if resumed else 'Syncing'} run {run_id}",
        f"wandb: ⭐️ View project at {url}",
        f"wandb: 🚀 View run at {url}/runs/{run_id}",
    ]


def gated_repo_error(repo: str) -> None:
    warn(
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/huggingface_hub/utils/_http.py", '
        "line 409, in hf_raise_for_status",
        "    response.raise_for_status()",
        "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
        f"https://huggingface.co/{repo}/resolve/main/config.json",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        f"huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-{os.getpid():08x})",
        "",
        f"Cannot access gated repo for url https://huggingface.co/{repo}/resolve/main/config.json.",
        f"Access to model {repo} is restricted. You must have access to it and be authenticated "
        "to access it. Please log in.",
    )


def wandb_error() -> None:
    warn(
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/wandb/sdk/wandb_login.py", line 325, '
        "in _login",
        "    wlogin.prompt_api_key()",
        "wandb.errors.errors.UsageError: api_key not configured (no-tty). call "
        "wandb.login(key=[your_api_key])",
    )


def oom_error(rank: int = 0) -> None:
    warn(
        f"[rank{rank}]: Traceback (most recent call last):",
        f'[rank{rank}]:   File "/opt/megatron-lm/megatron/core/pipeline_parallel/schedules.py", '
        "line 275, in forward_step",
        f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. "
        "GPU 0 has a total capacity of 79.10 GiB of which 1.27 GiB is free. Including "
        "non-PyTorch memory, this process has 77.82 GiB memory in use. Of the allocated memory "
        "74.02 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated.",
    )


def nccl_error(seq: int) -> None:
    t = time.strftime("%m%d %H:%M:%S")
    warn(
        f"[rank0]:[E{t}.000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600042 milliseconds before timing out.",
        f"[rank0]:[E{t}.000000 ProcessGroupNCCL.cpp:1785] [PG 0 (default_pg) Rank 0] Exception "
        "(either an error before or asynchronous errors while processing NCCL work) "
        "caught: Watchdog caught collective operation timeout",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
    )


def parse_overrides(argv: list[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for arg in argv:
        if "=" in arg:
            key, _, value = arg.partition("=")
            overrides[key.lstrip("+")] = value
    return overrides


def tensorboard_events(directory: Path) -> None:
    """An (empty) event file where a TensorBoard writer would put its first one."""
    directory.mkdir(parents=True, exist_ok=True)
    host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    (directory / f"events.out.tfevents.{int(time.time())}.{host}.{os.getpid()}.0").touch()


def write_files(directory: Path, names: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in names.items():
        (directory / name).write_text(text)


def duration_s(value: str) -> float | None:
    """A time budget as NeMo-RL's checkpoint_must_save_by and Lightning's max_time write it,
    "DD:HH:MM:SS", in seconds (None when not set)."""
    if not value or value.lower() in ("null", "none"):
        return None
    days, hours, minutes, seconds = (int(part) for part in value.split(":"))
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def int_knob(k: dict[str, str], key: str, default: int) -> int:
    try:
        return int(k.get(key, default))
    except ValueError:
        return default


def float_knob(k: dict[str, str], key: str, default: float) -> float:
    try:
        return float(k.get(key, default))
    except ValueError:
        return default


def job_summary() -> str:
    return json.dumps(
        {
            "job_id": os.environ.get("SLURM_JOB_ID"),
            "nodes": os.environ.get("SLURM_JOB_NODELIST"),
            "num_nodes": os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES"),
            "partition": os.environ.get("SLURM_JOB_PARTITION"),
            "restart": os.environ.get("SLURM_RESTART_COUNT", "0"),
        }
    )


def health_loss(k: dict[str, str], step: int, loss: float) -> float:
    """The loss a step prints, with the health knobs applied (nan_at, spike_at)."""
    nan_at = int_knob(k, "nan_at", -1)
    if 0 <= nan_at <= step:
        return float(k.get("nan_value", "nan"))
    if int_knob(k, "spike_at", -1) == step:
        return loss * float_knob(k, "spike_factor", 10.0)
    return loss


def slow_factor_at(k: dict[str, str], step: int) -> float:
    """How many times the usual step time this step takes (slow_at, slow_steps, slow_factor)."""
    slow_at = int_knob(k, "slow_at", -1)
    if 0 <= slow_at <= step < slow_at + int_knob(k, "slow_steps", 5):
        return float_knob(k, "slow_factor", 4.0)
    return 1.0
