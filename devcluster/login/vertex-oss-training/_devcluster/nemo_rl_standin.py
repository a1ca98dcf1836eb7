"""Stand-in for a NeMo-RL driver (sft, dpo, grpo, rm) on the dev cluster.

launch.sh runs it inside the job with NEMO_RL_JOB_DIR=<submit dir>/<job id>.
Checkpoints are written as <checkpoint_dir>/tmp_step_N and renamed to step_N
when complete; on start it resumes from the highest step_N, as NeMo-RL does.
Overrides use NeMo-RL's dotted keys, e.g. dpo.max_num_steps=20,
checkpointing.checkpoint_dir=..., logger.wandb_enabled=False,
logger.tensorboard_enabled=True (logger.log_dir, default logs).

What it prints follows NeMo-RL's drivers (NVIDIA-NeMo/RL, formerly NVIDIA/NeMo-RL,
commit 7ea279abfbeb698b092856d0dab61e7cf39bc909, nemo_rl/algorithms/{sft,dpo,rm,grpo}.py):
the set-up block, "Epoch e/E" headers with "Step k/min(len(loader), max_num_steps)"
under them (k restarts each epoch), and each algorithm's "Training Results": SFT and
GRPO print "  • Loss:", DPO and RM print their metrics by field name ("  • loss:",
"  • accuracy:", ...), GRPO adds its reward and generation lines; its loss is a clipped
policy-gradient term near zero, of either sign, and every grpo.val_period steps it
validates ("📊 Validation Results:" with "    • Accuracy: <x>", grpo.py ``validate``).

What real drivers do that a well-behaved stand-in would hide:
- Output is block-buffered: the drivers print with plain print() and ray.sub sends the
  driver's output to a file, so Python writes it in 8 KiB blocks unless PYTHONUNBUFFERED
  is set (knob rl_buffered=1; off by default while launchers without PYTHONUNBUFFERED
  share this dev cluster).
- checkpointing.checkpoint_must_save_by=DD:HH:MM:SS (nemo_rl/utils/timer.py
  TimeoutChecker, fit_last_save_time: it stops when one more step would pass the budget)
  saves a checkpoint, prints "Timeout has been reached, stopping training early" and
  returns: the job exits 0 and Slurm says COMPLETED at a step short of the total.
- With max_num_steps below epochs x len(loader), the step header's total is per epoch
  and the run ends mid-epoch (knob epoch_steps).
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


def save_checkpoint(ckpt_dir: Path, step: int, save_time_s: float, model: str = "") -> None:
    # As NeMo-RL's checkpointer: the policy's weights, training_info.json and the run's whole
    # config as config.yaml (what examples/converters/convert_dcp_to_hf.py reads).
    tmp = ckpt_dir / f"tmp_step_{step}"
    s.write_files(tmp / "policy" / "weights", {"model.safetensors.index.json": "{}\n"})
    config = f"policy:\n  model_name: {model or 'meta-llama/Llama-3.1-8B-Instruct'}\n"
    s.write_files(tmp, {"training_info.json": '{"step": %d}\n' % step, "config.yaml": config})
    time.sleep(save_time_s)
    tmp.rename(ckpt_dir / f"step_{step}")


# The metrics DPO and RM print, in their dataclasses' field order (DPOValMetrics, RMValMetrics).
DPO_METRICS = ("loss", "sft_loss", "preference_loss", "accuracy", "rewards_chosen_mean",
               "rewards_rejected_mean", "num_valid_samples", "global_valid_seqs",
               "global_valid_toks")  # fmt: skip
RM_METRICS = ("loss", "accuracy", "rewards_chosen_mean", "rewards_rejected_mean")
STARTUP_LINES = [
    "INFO: Importing container image layers (enroot import)...",
    "Downloading shards: model-00001-of-00030.safetensors",
    "2026-01-01 00:00:00,000\tINFO worker.py:1841 -- Connecting to existing Ray cluster",
    "INFO vllm.engine: Loading model weights; CUDA graphs are being captured",
]


def grpo_loss(step: int) -> float:
    """GRPO's clipped policy-gradient loss: near zero, of either sign, now and then several
    times its usual size (a ratio rule calls that a spike; it is noise)."""
    return 0.0015 + 0.002 * s.math.sin(step * 1.7) + (0.012 if step % 5 == 0 else 0.0)


def grpo_reward(step: int, steps: int) -> float:
    """The mean reward of a GRPO step: rising as the policy learns."""
    rng = s.random.Random(step * 31)
    return 0.2 + 0.5 * (1 - s.math.exp(-3.0 * step / max(steps, 1))) + rng.uniform(-0.02, 0.02)


def validation(step: int, steps: int) -> list[str]:
    """GRPO's validation block (grpo.py ``validate``)."""
    accuracy = 0.1 + 0.5 * (1 - s.math.exp(-3.0 * step / max(steps, 1)))
    return [
        f"▶ Starting validation at step {step}...",
        "",
        "📊 Validation Results:",
        f"    • Accuracy: {accuracy:.4f}",
        "    • Average response length: 512.3 tokens",
        "    • Samples processed: 64",
        "",
        "  ⏱️  Validation Timing:",
        "    • Total validation time: 0.50s",
    ]


def results(
    algorithm: str, loss: float, step_time_s: float, reward: float | None = None
) -> list[str]:
    """One step's "Training Results" and "Timing" blocks, as each algorithm prints them."""
    rng = s.random.Random(int(abs(loss) * 1e6))
    lines = ["", "📊 Training Results:"]
    if algorithm == "dpo":
        values = {"loss": loss, "sft_loss": 0.0, "preference_loss": loss,
                  "accuracy": rng.uniform(0.5, 0.9), "rewards_chosen_mean": rng.uniform(0, 1),
                  "rewards_rejected_mean": rng.uniform(-1, 0), "num_valid_samples": 64.0,
                  "global_valid_seqs": 128.0, "global_valid_toks": 51200.0}  # fmt: skip
        lines += [f"  • {name}: {values[name]:.4f}" for name in DPO_METRICS]
    elif algorithm == "rm":
        values = {"loss": loss, "accuracy": rng.uniform(0.5, 0.9),
                  "rewards_chosen_mean": rng.uniform(0, 1),
                  "rewards_rejected_mean": rng.uniform(-1, 0)}  # fmt: skip
        lines += [f"  • {name}: {values[name]:.4f}" for name in RM_METRICS]
        lines.append("  • num valid samples: 64")
    else:
        lines.append(f"  • Loss: {loss:.4f}")
        if algorithm == "grpo":
            lines += [
                f"  • Generation KL Error: {rng.uniform(0, 0.01):.4f}",
                f"  • Avg Reward: {reward if reward is not None else rng.uniform(0, 1):.4f}",
                f"  • Mean Generation Length: {rng.uniform(200, 900):.4f}",
            ]
    took = step_time_s * rng.uniform(0.97, 1.03)
    lines += ["", "⏱️  Timing:", f"  • Total step time: {took:.2f}s"]
    return lines


def tensorboard(base: Path) -> None:
    """As NeMo-RL: the next exp_NNN under logger.log_dir (relative to where the job runs),
    its TensorBoard writer in <that>/tensorboard."""
    taken = [int(p.name[4:]) for p in base.glob("exp_*") if p.name[4:].isdigit()]
    directory = base / f"exp_{max(taken, default=0) + 1:03d}" / "tensorboard"
    s.tensorboard_events(directory)
    s.say(f"Initialized TensorboardLogger at {directory}")


def main(algorithm: str) -> None:
    k = s.knobs()
    if k.get("rl_buffered", "0") in ("1", "true", "yes"):
        s.buffer_output()
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
    budget = s.duration_s(
        overrides.get("checkpointing.checkpoint_must_save_by") or k.get("must_save_by", "")
    )
    val_period = int(overrides.get("grpo.val_period") or s.int_knob(k, "val_every", 0))

    epochs = int(overrides.get(f"{algorithm}.max_num_epochs") or s.int_knob(k, "epochs", 1))
    per_epoch = max(1, s.int_knob(k, "epoch_steps", steps))  # len(train_dataloader)

    s.say(
        f"Stand-in NeMo-RL {algorithm} driver (dev cluster: no GPUs, nothing is trained)",
        f"Slurm job: {s.job_summary()}",
        *s.secret_fingerprints(),
        f"Loaded configuration: policy.model_name={model} {algorithm}.max_num_steps={steps} "
        f"checkpointing.checkpoint_dir={ckpt_dir} logger.wandb_enabled={wandb_enabled}",
        *(s.wandb_lines("nemo-rl") if wandb_enabled else []),
    )
    s.startup(k, STARTUP_LINES)
    s.say(
        "",
        "▶ Setting up compute cluster...",
        f"  ✓ Ray cluster initialized with {os.environ.get('SLURM_JOB_NUM_NODES', '1')} nodes",
        "",
        "▶ Setting up model...",
        "  ✓ Model initialized",
        "",
        "=" * 60,
        " " * 18 + "SETUP COMPLETE",
        "=" * 60,
        "",
    )
    if overrides.get("logger.tensorboard_enabled", "False").lower() in ("true", "1"):
        tensorboard(Path(overrides.get("logger.log_dir") or "logs"))
    if fault == "gated":
        s.gated_repo_error(model)
        sys.exit(1)
    if fault == "wandb" and wandb_enabled:
        s.wandb_error()
        sys.exit(1)
    if s.start_fault(fault):
        sys.exit(1)

    done = completed_steps(ckpt_dir)
    total_steps = done[-1] if done else 0
    if done:
        s.say(f"Loading checkpoint from {ckpt_dir / f'step_{done[-1]}'}")
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    # As the drivers: the epoch and the step within it are restored from the checkpoint,
    # "Step k/N" counts within the epoch, checkpoints and the stop count total steps.
    epoch, current = divmod(total_steps, per_epoch)
    shown = min(per_epoch, steps)
    began, took = time.monotonic(), 0.0
    while epoch < epochs and total_steps < steps:
        s.say("", f"{'=' * 25} Epoch {epoch + 1}/{epochs} {'=' * 25}")
        while current < per_epoch and total_steps < steps:
            step = total_steps + 1
            s.strike(fault, step, fault_at, sys.exit)
            s.say("", f"{'=' * 25} Step {current + 1}/{shown} {'=' * 25}")
            if algorithm == "grpo":
                s.say("▶ Preparing batch...", "▶ Generating responses for batch of size 64...")
                s.say("▶ Processing rewards...", "▶ Computing advantages...")
                s.say("▶ Preparing for training...", "▶ Training policy...")
            elif algorithm == "sft":
                s.say("▶ Preparing batch...", "▶ Taking a training step...")
            else:
                s.say("▶ Taking a training step...")
            started = time.monotonic()
            time.sleep(step_time_s)
            took = time.monotonic() - started
            loss = s.loss_at(step, steps, start=0.6931, floor=0.35)
            reward = None
            if algorithm == "grpo":
                loss, reward = grpo_loss(step), grpo_reward(step, steps)
                if val_period and step % val_period == 0:
                    s.say(*validation(step, steps))
            # TimeoutChecker(fit_last_save_time=True): stop when one more step would pass it.
            timed_out = budget is not None and time.monotonic() - began + took >= budget
            if step % save_period == 0 or step == steps or timed_out:
                s.say(f"Saving checkpoint for step {step}...")
                save_checkpoint(ckpt_dir, step, save_time_s, model)
            s.say(*results(algorithm, loss, step_time_s, reward))
            current += 1
            total_steps += 1
            if timed_out:
                s.say("Timeout has been reached, stopping training early")
                return
            if total_steps >= steps:
                s.say("Max number of steps has been reached, stopping training early")
        epoch += 1
        current = 0
