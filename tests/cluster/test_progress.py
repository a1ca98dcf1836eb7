"""What NeMo and NeMo-RL really print, read the way the poller reads it: in chunks.

The shapes are upstream's: NeMo-RL's drivers (NVIDIA-NeMo/RL
7ea279abfbeb698b092856d0dab61e7cf39bc909, nemo_rl/algorithms/{sft,dpo,rm,grpo}.py) and
NeMo's progress printer (NVIDIA/NeMo 8cfedd7203462cb251a914e700e5605444277561,
nemo/lightning/pytorch/callbacks/progress_printer.py, nemo_logger.py)."""

from __future__ import annotations

from cluster import progress
from cluster.progress import Point, parse_nemo, parse_nemo_rl

BAR = "=" * 25


def rl_step(k: int, n: int, *metrics: str) -> str:
    return "\n".join(
        [f"{BAR} Step {k}/{n} {BAR}", "▶ Taking a training step...", "", "📊 Training Results:"]
        + list(metrics)
        + ["", "⏱️  Timing:", "  • Total step time: 1.50s", ""]
    )


def dpo_metrics(loss: float) -> list[str]:
    names = ("sft_loss", "preference_loss", "accuracy", "rewards_chosen_mean")
    return [f"  • loss: {loss:.4f}", *(f"  • {n}: 0.5000" for n in names)]


def test_dpo_and_rm_print_loss_in_lower_case_and_it_is_read() -> None:
    dpo = rl_step(1, 5, *dpo_metrics(0.6931)) + "\n" + rl_step(2, 5, *dpo_metrics(0.61))
    rm = rl_step(1, 5, "  • loss: 0.7000", "  • accuracy: 0.5000", "  • num valid samples: 64")
    points = parse_nemo_rl(dpo).points
    assert [(p.step, p.loss) for p in points] == [(1, 0.6931), (2, 0.61)]
    assert [p.loss for p in parse_nemo_rl(rm).points] == [0.7]
    # SFT and GRPO keep the capital; the other "• ...loss:" metrics are not the loss.
    assert parse_nemo_rl(rl_step(1, 5, "  • Loss: 1.2000")).points[0].loss == 1.2
    assert parse_nemo_rl(rl_step(1, 5, "  • sft_loss: 0.3000")).points[0].loss is None


def sft_epochs(epochs: int, per_epoch: int) -> list[str]:
    lines = []
    for e in range(1, epochs + 1):
        lines.append(f"\n{BAR} Epoch {e}/{epochs} {BAR}")
        for k in range(1, per_epoch + 1):
            lines.append(rl_step(k, per_epoch, f"  • Loss: {1 / (e * 10 + k):.4f}"))
    return lines


def test_a_two_epoch_sft_numbers_its_steps_across_epochs_in_any_chunking() -> None:
    lines = sft_epochs(2, 3)
    whole = parse_nemo_rl("\n".join(lines))
    assert [(p.step, p.total) for p in whole.points] == [(k, 6) for k in range(1, 7)]
    # One step per poll: the epoch header of epoch 2 and its first step come in one chunk,
    # every other chunk starts after the header it belongs to.
    carry: Point | None = None
    seen = []
    for chunk in lines:
        for point in parse_nemo_rl(chunk, carry).points:
            seen.append(point.step)
            carry = point
    assert seen == [1, 2, 3, 4, 5, 6]
    # A requeued run resumes mid-epoch in a new log: the epoch header places it.
    resumed = f"{BAR} Epoch 2/2 {BAR}\n" + rl_step(2, 3, "  • Loss: 0.1")
    assert [p.step for p in parse_nemo_rl(resumed).points] == [5]


def nemo_line(it: int, val: float | None = None) -> str:
    line = (
        f"Training epoch 0, iteration {it}/9 | lr: 3e-05 | consumed_samples: {32 * (it + 1)} | "
        f"global_batch_size: 32 | global_step: {it} | reduced_train_loss: 2.{it} | "
        "train_step_timing in s: 0.5"
    )
    return line + (f" | val_loss: {val}" if val is not None else "")


def test_nemo_val_loss_riding_on_every_line_is_one_validation_per_validation() -> None:
    lines = [nemo_line(0), nemo_line(1), "Validation: iteration 1/2", "Validation: iteration 2/2"]
    lines += [nemo_line(i, 2.05) for i in range(2, 6)]
    lines += ["Validation: iteration 1/2", "Validation: iteration 2/2"]
    lines += [nemo_line(i, 1.9) for i in range(6, 10)]
    assert parse_nemo("\n".join(lines)).validation == ((2, 2.05), (6, 1.9))
    # Read a line at a time, carrying the last point (and the last validation's value).
    carry: Point | None = None
    found = []
    for line in lines:
        progress = parse_nemo(line, carry)
        found += progress.validation
        if progress.last is not None:
            last = found[-1][1] if found else None
            carry = Point(progress.last.step, progress.last.total, val_loss=last)
    assert found == [(2, 2.05), (6, 1.9)]


def test_nemo_names_the_experiment_directory_its_checkpoints_go_under() -> None:
    text = (
        "[NeMo I 2026-01-01 00:00:00 nemo_logger:162] Experiments will be logged at "
        "/lustre/logs/run-1/default\n"
    )
    assert progress.experiment_dirs(text) == ["/lustre/logs/run-1/default"]
