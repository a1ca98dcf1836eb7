"""Stand-in for a NeMo-RL driver (sft, dpo, grpo, rm) on the dev cluster.

launch.sh runs it inside the job with NEMO_RL_JOB_DIR=<submit dir>/<job id>.
Checkpoints are written as <checkpoint_dir>/tmp_step_N and renamed to step_N
when complete; on start it resumes from the highest step_N, as NeMo-RL does.
Overrides use NeMo-RL's dotted keys, e.g. dpo.max_num_steps=20,
checkpointing.checkpoint_dir=..., logger.wandb_enabled=False,
logger.tensorboard_enabled=True (logger.log_dir, default logs).
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import standin as s

STEP_RE = re.compile(r"^step_(\d+)$")


def completed_steps(ckpt_dir: Path) -> list[int]:
    if not ckpt_dir.is_dir():
        return []
    return sorted(int(m.group(1)) for p in ckpt_dir.iterdir() if (m := STEP_RE.match(p.name)))


def save_checkpoint(ckpt_dir: Path, step: int, save_time_s: float) -> None:
    tmp = ckpt_dir / f"tmp_step_{step}"
    s.write_files(tmp / "policy" / "weights", {"model.safetensors.index.json": "{}\n"})
    s.write_files(tmp, {"training_info.json": '{"step": %d}\n' % step, "config.yaml": "stand-in\n"})
    time.sleep(save_time_s)
    tmp.rename(ckpt_dir / f"step_{step}")


def tensorboard(base: Path) -> None:
    """As NeMo-RL: the next exp_NNN under logger.log_dir (relative to where the job runs),
    its TensorBoard writer in <that>/tensorboard."""
    taken = [int(p.name[4:]) for p in base.glob("exp_*") if p.name[4:].isdigit()]
    directory = base / f"exp_{max(taken, default=0) + 1:03d}" / "tensorboard"
    s.tensorboard_events(directory)
    s.say(f"Initialized TensorboardLogger at {directory}")


def main(algorithm: str) -> None:
    k = s.knobs()
    overrides = s.parse_overrides(sys.argv[1:])
    job_dir = Path(os.environ.get("NEMO_RL_JOB_DIR") or Path.cwd())
    ckpt_dir = Path(overrides.get("checkpointing.checkpoint_dir") or job_dir / "checkpoints")
    steps = int(overrides.get(f"{algorithm}.max_num_steps") or s.int_knob(k, "steps", 30))
    step_time_s = s.float_knob(k, "step_time_s", 2.0)
    save_period = int(
        overrides.get("checkpointing.save_period") or s.int_knob(k, "ckpt_every", max(1, steps // 3))
    )
    save_time_s = s.float_knob(k, "save_time_s", 0.5)
    wandb_enabled = overrides.get("logger.wandb_enabled", "True").lower() not in ("false", "0")
    model = overrides.get("policy.model_name", "meta-llama/Llama-3.1-8B-Instruct")
    fault = s.fault_armed(k)
    fault_at = s.int_knob(k, "fault_at_step", max(1, steps // 3))

    s.say(
        f"Stand-in NeMo-RL {algorithm} driver (dev cluster: no GPUs, nothing is trained)",
        f"Slurm job: {s.job_summary()}",
        *s.secret_fingerprints(),
        f"Loaded configuration: policy.model_name={model} {algorithm}.max_num_steps={steps} "
        f"checkpointing.checkpoint_dir={ckpt_dir} logger.wandb_enabled={wandb_enabled}",
        "▶ Setting up compute cluster...",
        f"  ✓ Ray cluster initialized with {os.environ.get('SLURM_JOB_NUM_NODES', '1')} nodes",
    )
    if overrides.get("logger.tensorboard_enabled", "False").lower() in ("true", "1"):
        tensorboard(Path(overrides.get("logger.log_dir") or "logs"))
    if fault == "gated":
        s.gated_repo_error(model)
        sys.exit(1)
    if fault == "wandb" and wandb_enabled:
        s.wandb_error()
        sys.exit(1)

    done = completed_steps(ckpt_dir)
    start = done[-1] + 1 if done else 1
    if done:
        s.say(f"Loading checkpoint from {ckpt_dir / f'step_{done[-1]}'}")
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    for step in range(start, steps + 1):
        s.strike(fault, step, fault_at, sys.exit)
        s.say(f"{'=' * 25} Step {step}/{steps} {'=' * 25}", "▶ Preparing batch...", "▶ Training policy...")
        time.sleep(step_time_s)
        loss = s.loss_at(step, steps, start=0.6931, floor=0.35)
        s.say(
            "📊 Training Results:",
            f"  • Loss: {loss:.4f}",
            f"  • Grad Norm: {s.random.uniform(0.5, 2.0):.4f}",
            "⏱️  Timing:",
            f"  • Total step time: {step_time_s * s.random.uniform(0.97, 1.03):.2f}s",
        )
        if step % save_period == 0 or step == steps:
            s.say(f"Saving checkpoint for step {step}...")
            save_checkpoint(ckpt_dir, step, save_time_s)
    s.say(f"Max number of steps has been reached, stopping training ({steps} steps).")
