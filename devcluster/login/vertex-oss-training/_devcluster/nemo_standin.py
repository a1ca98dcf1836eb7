"""Stand-in for a NeMo 2.0 recipe run (pretrain, cpt, sft) on the dev cluster.

run.py passes the mounted directories as NEMO_LOG_DIR, NEMO_CACHE_DIR and
NEMO_DATA_DIR (a real run sees them as container mounts). The recipe logs to
<log_dir>/<experiment name> with NeMo's logger name, "default", so checkpoints go to
<log_dir>/<experiment name>/default/checkpoints/ (it says where: "Experiments will be
logged at ..."), and a run resumes from the newest completed one there, as NeMo's
AutoResume does.

As upstream (NVIDIA/NeMo 8cfedd7203462cb251a914e700e5605444277561):
- nemo/lightning/nemo_logger.py: name "default"; "Experiments will be logged at <dir>";
  ModelCheckpoint's dirpath is <dir>/checkpoints.
- nemo/lightning/pytorch/callbacks/progress_printer.py: "Training epoch E, iteration
  i/N | metric: value | ..." per step and "Validation: iteration k/V" while validating;
  val_loss, logged for the progress bar, rides on every training line after the first
  validation. Its format_string prints each metric as f" | {metric}: {val:.4}", so a NaN
  or inf loss prints "reduced_train_loss: nan" / "inf" (NVIDIA/NeMo
  01f7dbc537d780c4faa456ea2078da037b109e57, same file; its "TODO(ashors): handle nan
  losses" notes the printer goes on printing them).
- nemo/collections/llm/recipes/log/default.py (pretraining: save_last=True, a -last copy
  at every save) and recipes/finetune_default.py (fine-tuning: save_last="link", a -last
  link to the newest save); "<name>-unfinished" marks a save in progress
  (pytorch/callbacks/model_checkpoint.py).
Every task prints (NeMo-Run runs one per GPU, all into one file through srun --output:
NVIDIA/NeMo-Run 0c49127199cad0495466dc85620ca58a4111f4bc, core/execution/slurm.py);
global rank 0 prints the progress.
"""

from __future__ import annotations

import os
import re
import shutil
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


def write_checkpoint(path: Path, step: int, save_time_s: float) -> None:
    marker = Path(str(path) + "-unfinished")
    path.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    s.write_files(path / "context", {"io.json": f'{{"step": {step}}}\n', "model.yaml": "stand-in\n"})
    time.sleep(save_time_s)
    s.write_files(path / "weights", {"metadata.json": "{}\n", "__0_0.distcp": "0" * 64})
    marker.unlink()


def save_checkpoint(
    ckpt_dir: Path, step: int, save_time_s: float, val_loss: float | None, link: bool
) -> None:
    """A save and its -last: a copy of its own (pretraining, save_last=True) or a link to
    it (fine-tuning, save_last="link"); the previous -last goes."""
    consumed = (step + 1) * GLOBAL_BATCH_SIZE
    name = f"model_name=0--val_loss={val_loss or 0:.2f}-step={step}-consumed_samples={consumed}.0"
    write_checkpoint(ckpt_dir / name, step, save_time_s)
    for old in ckpt_dir.glob("*-last"):
        if old.is_symlink() or old.is_file():
            old.unlink()
        else:
            shutil.rmtree(old, ignore_errors=True)
    last = ckpt_dir / f"{name}-last"
    if link:
        last.symlink_to(name)
    else:
        write_checkpoint(last, step, 0.0)


STARTUP_LINES = [
    "INFO: Importing container image layers (enroot import)...",
    "Downloading shards: model-00001-of-00030.safetensors",
    "[NeMo I nemo_logging:393] Building the model, loading the tokenizer",
]


def main(workload: str, model: str) -> None:
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    tasks = int(os.environ.get("SLURM_NTASKS") or 1)
    # Lightning's line, from every task (srun interleaves them in the one log file).
    member = f"Initializing distributed: GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/{tasks}"
    if rank != 0:
        s.say(member)
        s.follow_rank0()
    k = s.knobs()
    overrides = s.parse_overrides(sys.argv[1:])
    name = os.environ.get("NEMO_EXPERIMENT_NAME") or f"{workload}_{model}"
    log_dir = Path(os.environ.get("NEMO_LOG_DIR") or Path.cwd() / "nemo_experiments")
    cache_dir = Path(os.environ.get("NEMO_CACHE_DIR") or Path.home() / ".cache")
    steps = int(overrides.get("trainer.max_steps") or s.int_knob(k, "steps", 30))
    step_time_s = s.float_knob(k, "step_time_s", 2.0)
    ckpt_every = max(1, s.int_knob(k, "ckpt_every", max(1, steps // 3)))
    val_every = int(overrides.get("trainer.val_check_interval") or s.int_knob(k, "val_every", 0))
    save_time_s = s.float_knob(k, "save_time_s", 0.5)
    fault = s.fault_armed(k)
    fault_at = s.int_knob(k, "fault_at_step", steps // 3)
    experiment_dir = log_dir / name / "default"  # the recipe's dir, NeMo's logger name
    ckpt_dir = experiment_dir / "checkpoints"

    s.say(
        f"[NeMo I {s.stamp()} nemo_logging:393] Stand-in {workload} recipe for {model} "
        "(dev cluster: no GPUs, nothing is trained)",
        f"[NeMo I {s.stamp()} nemo_logging:393] Slurm job: {s.job_summary()}",
        *(f"[NeMo I {s.stamp()} nemo_logging:393] {line}" for line in s.secret_fingerprints()),
        *s.wandb_lines("nemo"),
    )
    s.startup(k, STARTUP_LINES)
    s.say(
        f"[NeMo I {s.stamp()} nemo_logger:162] Experiments will be logged at {experiment_dir}",
        "GPU available: True (cuda), used: True",
        member,
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
    if s.start_fault(fault):
        s.finish(1)
    if tokenizer_race(cache_dir, k.get("tokenizer_race", "cold")):
        s.finish(1)

    start = 0
    done = completed_checkpoints(ckpt_dir)
    if done:
        step, path = done[-1]
        start = step + 1
        s.say(f"[NeMo I {s.stamp()} nemo_logging:393] Restoring states from the checkpoint path at {path}")
    link = workload == "sft"  # fine-tuning keeps a -last link; pretraining (and CPT) a copy
    val_loss: float | None = None
    # Lightning's Timer callback (lightning/pytorch/callbacks/timer.py): past trainer.max_time
    # it says so and signals the trainer to stop; the checkpoint callback saves at train end.
    budget = s.duration_s(overrides.get("trainer.max_time") or k.get("max_time", ""))
    began = time.monotonic()
    for step in range(start, steps):
        s.strike(fault, step, fault_at, s.finish)
        took_s = step_time_s * s.slow_factor_at(k, step)
        time.sleep(took_s)
        loss = s.health_loss(k, step, s.loss_at(step, steps))
        line = (
            f"Training epoch 0, iteration {step}/{steps - 1} | lr: 3e-05 | consumed_samples: "
            f"{(step + 1) * GLOBAL_BATCH_SIZE} | global_batch_size: {GLOBAL_BATCH_SIZE} | "
            f"global_step: {step} | reduced_train_loss: {loss:.4f} | train_step_timing in s: "
            f"{took_s * s.random.uniform(0.97, 1.03):.5f}"
        )
        s.say(line + (f" | val_loss: {val_loss:.4}" if val_loss is not None else ""))
        if val_every and (step + 1) % val_every == 0:
            for batch in range(1, 3):
                s.say(f"Validation: iteration {batch}/2")
            val_loss = s.loss_at(step, steps) + 0.05
        timed_out = budget is not None and time.monotonic() - began >= budget and step + 1 < steps
        if (step + 1) % ckpt_every == 0 or step + 1 == steps or timed_out:
            save_checkpoint(ckpt_dir, step, save_time_s, val_loss, link)
        if timed_out:
            elapsed = time.strftime("%H:%M:%S", time.gmtime(time.monotonic() - began))
            s.say(f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop.")
            s.finish(0)
    s.say(f"`Trainer.fit` stopped: `max_steps={steps}` reached.")
    s.finish(0)
