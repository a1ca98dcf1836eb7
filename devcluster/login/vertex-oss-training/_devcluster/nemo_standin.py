"""Stand-in for a NeMo 2.0 recipe run (pretrain, cpt, sft) on the dev cluster.

run.py passes the mounted directories as NEMO_LOG_DIR, NEMO_CACHE_DIR and
NEMO_DATA_DIR (a real run sees them as container mounts). Checkpoints go to
<log_dir>/<experiment name>/checkpoints/, and a run resumes from the newest
completed one there, as NeMo's AutoResume does.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import standin as s

GLOBAL_BATCH_SIZE = 32
CKPT_RE = re.compile(r"-step=(\d+)-")

HF_REPOS = {
    "llama3p1_2b": "meta-llama/Llama-3.2-1B",
    "llama3p1_8b": "meta-llama/Llama-3.1-8B",
    "llama3p1_70b": "meta-llama/Llama-3.1-70B",
}


def tokenizer_race(cache_dir: Path, mode: str) -> bool:
    """The GPT-2 tokenizer download race: every rank downloads into its working
    directory and moves the file across filesystems at once. True if it struck."""
    megatron = cache_dir / "torch" / "megatron"
    vocab = megatron / "megatron-gpt-345m_vocab"
    merges = megatron / "megatron-gpt-345m_merges"
    if mode == "off" or (vocab.is_file() and merges.is_file()):
        return False
    if mode != "until_seeded":
        # The slower ranks' downloads land; the cache is warm for the next run.
        megatron.mkdir(parents=True, exist_ok=True)
        vocab.write_text('{"!": 0, "\\"": 1, "#": 2}\n')
        merges.write_text("#version: 0.2\nĠ t\n")
    s.warn(
        "Traceback (most recent call last):",
        '  File "/opt/megatron-lm/megatron/core/datasets/utils_s3.py", line 112, in '
        "_download_gpt2_files",
        "    shutil.move(local_name, cached_name)",
        '  File "/usr/lib/python3.12/shutil.py", line 886, in move',
        "    os.rename(src, real_dst)",
        "OSError: [Errno 18] Invalid cross-device link: 'gpt2-vocab.json' -> "
        f"'{vocab}'",
    )
    return True


def completed_checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    found = []
    if ckpt_dir.is_dir():
        for path in ckpt_dir.iterdir():
            match = CKPT_RE.search(path.name + "-")
            if not path.is_dir() or match is None:
                continue
            if Path(str(path) + "-unfinished").exists():
                continue
            found.append((int(match.group(1)), path))
    return sorted(found)


def save_checkpoint(ckpt_dir: Path, step: int, save_time_s: float, last: bool = False) -> None:
    consumed = (step + 1) * GLOBAL_BATCH_SIZE
    name = f"model_name=0--val_loss=0.00-step={step}-consumed_samples={consumed}.0"
    if last:
        name += "-last"
    path = ckpt_dir / name
    marker = Path(str(path) + "-unfinished")
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    marker.touch()
    s.write_files(path / "context", {"io.json": '{"step": %d}\n' % step, "model.yaml": "stand-in\n"})
    time.sleep(save_time_s)
    s.write_files(path / "weights", {"metadata.json": "{}\n", "__0_0.distcp": "0" * 64})
    marker.unlink()


def main(workload: str, model: str) -> None:
    if int(os.environ.get("SLURM_PROCID", "0")) != 0:
        s.follow_rank0()
    k = s.knobs()
    overrides = s.parse_overrides(sys.argv[1:])
    name = os.environ.get("NEMO_EXPERIMENT_NAME") or f"{workload}_{model}"
    log_dir = Path(os.environ.get("NEMO_LOG_DIR") or Path.cwd() / "nemo_experiments")
    cache_dir = Path(os.environ.get("NEMO_CACHE_DIR") or Path.home() / ".cache")
    steps = int(overrides.get("trainer.max_steps") or s.int_knob(k, "steps", 30))
    step_time_s = s.float_knob(k, "step_time_s", 2.0)
    ckpt_every = max(1, s.int_knob(k, "ckpt_every", max(1, steps // 3)))
    save_time_s = s.float_knob(k, "save_time_s", 0.5)
    fault = s.fault_armed(k)
    fault_at = s.int_knob(k, "fault_at_step", steps // 3)
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1)
    ckpt_dir = log_dir / name / "checkpoints"

    s.say(
        f"[NeMo I {s.stamp()} nemo_logging:393] Stand-in {workload} recipe for {model} "
        "(dev cluster: no GPUs, nothing is trained)",
        f"[NeMo I {s.stamp()} nemo_logging:393] Slurm job: {s.job_summary()}",
        *(f"[NeMo I {s.stamp()} nemo_logging:393] {line}" for line in s.secret_fingerprints()),
        f"[NeMo I {s.stamp()} nemo_logging:393] Experiments will be logged at {log_dir / name}",
        "GPU available: True (cuda), used: True",
        f"Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/{nodes * 8}",
    )
    if k.get("tensorboard", "0") in ("1", "true", "yes"):
        tb_root = log_dir / "tb_logs"  # NeMo's TensorBoardLogger: <save_dir>/<name>/<version>
        s.warn(
            f"[NeMo W {s.stamp()} nemo_logger:173] \"update_logger_directory\" is True. "
            f'Overwriting tensorboard logger "save_dir" to {tb_root}'
        )
        s.tensorboard_events(tb_root / name)
    if fault == "gated":
        s.gated_repo_error(HF_REPOS.get(model, "meta-llama/Llama-3.1-8B"))
        s.finish(1)
    if fault == "wandb":
        s.wandb_error()
        s.finish(1)
    if tokenizer_race(cache_dir, k.get("tokenizer_race", "cold")):
        s.finish(1)

    start = 0
    done = completed_checkpoints(ckpt_dir)
    if done:
        step, path = done[-1]
        start = step + 1
        s.say(f"[NeMo I {s.stamp()} nemo_logging:393] Restoring states from the checkpoint path at {path}")
    for step in range(start, steps):
        s.strike(fault, step, fault_at, s.finish)
        time.sleep(step_time_s)
        loss = s.loss_at(step, steps)
        s.say(
            f"Training epoch 0, iteration {step}/{steps - 1} | lr: 3e-05 | consumed_samples: "
            f"{(step + 1) * GLOBAL_BATCH_SIZE} | global_batch_size: {GLOBAL_BATCH_SIZE} | "
            f"global_step: {step} | reduced_train_loss: {loss:.4f} | train_step_timing in s: "
            f"{step_time_s * s.random.uniform(0.97, 1.03):.5f}"
        )
        if (step + 1) % ckpt_every == 0 and step + 1 < steps:
            save_checkpoint(ckpt_dir, step, save_time_s)
    if start < steps:
        save_checkpoint(ckpt_dir, steps - 1, save_time_s, last=True)
    s.say(f"`Trainer.fit` stopped: `max_steps={steps}` reached.")
    s.finish(0)
