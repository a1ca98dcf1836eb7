"""What NeMo and NeMo-RL really print, read the way the poller reads it: in chunks.

The shapes are upstream's: NeMo-RL's drivers (NVIDIA-NeMo/RL
7ea279abfbeb698b092856d0dab61e7cf39bc909, nemo_rl/algorithms/{sft,dpo,rm,grpo}.py) and
NeMo's progress printer (NVIDIA/NeMo 8cfedd7203462cb251a914e700e5605444277561,
nemo/lightning/pytorch/callbacks/progress_printer.py, nemo_logger.py)."""

from __future__ import annotations

from cluster.watching import progress
from cluster.watching.progress import Point, parse_nemo, parse_nemo_rl

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
    found: list[tuple[int, float]] = []
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


def grpo_step(k: int, n: int, loss: float, reward: float) -> str:
    return rl_step(
        k,
        n,
        f"  • Loss: {loss:.4f}",
        "  • Generation KL Error: 0.0012",
        f"  • Avg Reward: {reward:.4f}",
        "  • Mean Generation Length: 512.0000",
    )


def grpo_validation(k: int, accuracy: float) -> str:
    return "\n".join(
        [
            f"▶ Starting validation at step {k}...",
            "",
            "📊 Validation Results:",
            f"    • Accuracy: {accuracy:.4f}",
            "    • Average response length: 512.3 tokens",
            "    • Samples processed: 64",
        ]
    )


def test_grpo_reward_and_validation_accuracy_are_read_beside_its_signed_loss() -> None:
    """grpo.py prints "  • Avg Reward:" in its training results and "    • Accuracy:" under
    "📊 Validation Results:"; DPO's lower-case "accuracy" is a training metric, not it."""
    text = "\n".join(
        [
            grpo_step(1, 4, -0.0021, 0.31),
            grpo_step(2, 4, 0.0034, 0.42),
            grpo_validation(2, 0.48),
        ]
    )
    read = parse_nemo_rl(text)
    assert [(p.step, p.loss, p.reward) for p in read.points] == [
        (1, -0.0021, 0.31),
        (2, 0.0034, 0.42),
    ]
    assert read.accuracy == ((2, 0.48),)
    # The validation block alone, in a chunk of its own, keeps the step it follows.
    alone = parse_nemo_rl(grpo_validation(2, 0.5), read.last)
    assert alone.accuracy == ((2, 0.5),) and alone.points == ()
    dpo = parse_nemo_rl(rl_step(1, 5, *dpo_metrics(0.6931)))
    assert dpo.accuracy == () and dpo.points[0].reward is None


def test_a_run_that_stops_early_on_purpose_says_why() -> None:
    """NeMo-RL's checkpoint_must_save_by, Megatron's exit_duration_in_mins and
    exit_interval, Lightning's max_time: each line says the run stopped early; NeMo-RL's
    normal end ("Max number of steps has been reached, stopping training early") does not."""
    assert progress.early_stop("Timeout has been reached, stopping training early") == (
        progress.TIME_BUDGET
    )
    assert progress.early_stop(" [exiting program after 230.5 minutes]") == progress.TIME_BUDGET
    assert progress.early_stop("[exiting program at iteration 400]") == "its exit interval"
    lightning = "Time limit reached. Elapsed time is 4:00:00. Signaling Trainer to stop."
    assert progress.early_stop(lightning) == progress.TIME_BUDGET
    normal = "Max number of steps has been reached, stopping training early"
    assert progress.early_stop(normal) == ""
    stopped = parse_nemo_rl(
        rl_step(3, 10, "  • Loss: 0.5") + "\nTimeout has been reached, stopping training early\n"
    )
    assert stopped.stopped_early == progress.TIME_BUDGET and not stopped.finished


def test_max_num_steps_mid_epoch_is_the_total_not_epochs_times_steps() -> None:
    """A 3-epoch run of 4 batches each with max_num_steps=5 prints "Step k/4" under "Epoch
    e/3": its total is min(5, 3 x 4) = 5, from the config it prints at start, and its own
    "Max number of steps has been reached" line ends it as finished."""
    config = "Final config:\n{'sft': {'max_num_epochs': 3, 'max_num_steps': 5, 'val_period': 10}}"
    lines = [config, *sft_epochs(3, 4)[:2]]  # epoch 1 and its 4 steps, epoch 2's header
    first = parse_nemo_rl("\n".join(lines))
    assert {p.total for p in first.points} == {5}
    rest = rl_step(1, 4, "  • Loss: 0.2") + "\nMax number of steps has been reached, stopping"
    rest += " training early\n"
    last = parse_nemo_rl(f"{BAR} Epoch 2/3 {BAR}\n" + rest, first.last)
    assert [(p.step, p.total) for p in last.points] == [(5, 5)] and last.finished
    assert last.stopped_early == ""


def test_mlflow_run_links_are_found_beside_wandb_ones() -> None:
    text = (
        "wandb: 🚀 View run at https://wandb.ai/team/proj/runs/abc123\n"
        "🏃 View run bold-fox-42 at: https://mlflow.example.com/#/experiments/3/runs/0a1b2c3d\n"
        "🧪 View experiment at: https://mlflow.example.com/#/experiments/3\n"
    )
    assert progress.run_links(text) == [
        "https://wandb.ai/team/proj/runs/abc123",
        "https://mlflow.example.com/#/experiments/3/runs/0a1b2c3d",
    ]
