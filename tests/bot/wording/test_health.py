"""The words of each health note (bot/wording/health.py), from the facts
bot/lifecycle/health.py finds: one test per kind, figures as the thread shows them,
what a cluster printed escaped, and a kind with no words refused with a reason."""

from __future__ import annotations

import pytest

from bot.lifecycle.health import note
from bot.wording import health


def test_loss_nan_in_each_of_its_three_outcomes() -> None:
    facts = {"owner": "U1", "step": 1200, "loss": "nan"}
    what = "🛑 <@U1> the training loss is nan at step 1,200"
    assert health.note(note("loss_nan", then="ended", **facts)) == (
        f"{what}; the job has already ended."
    )
    assert health.note(note("loss_nan", then="stop", **facts)) == (
        f"{what}: trainbot is stopping the run (health policy: stop on NaN). "
        "It will not be retried."
    )
    assert health.note(note("loss_nan", then="flag", **facts)).startswith(
        f"{what}. The run goes on (health policy: flag)"
    )


def test_loss_spike() -> None:
    said = health.note(note("loss_spike", step=120, loss=9.123456, factor=3.0, median=2.0))
    assert said == "⚠️ Loss spike at step 120: 9.123, over 3× the recent median (2)."


def test_reward_collapse_and_flat() -> None:
    said = health.note(note("reward_collapse", step=50, window=10, median=0.1, best=0.8))
    assert said == (
        "📉 The reward collapsed at step 50: its median over the last 10 steps is 0.1, "
        "its best was 0.8."
    )
    flat = health.note(note("reward_flat", reward=0.0, steps=20, step=40))
    assert flat.startswith("📏 The reward has been 0 for 20 steps (up to step 40): every answer")


def test_val_rising() -> None:
    said = health.note(
        note("val_rising", validations=[1.0, 1.1, 1.2], step=15, train_from=2.5, train_to=1.1)
    )
    assert said == (
        "📝 Validation loss rose over the last 3 validations (1 → 1.1 → 1.2, up to step 15) "
        "while the training loss fell (2.5 → 1.1): the run may be overfitting."
    )


def test_slow_with_and_without_a_save_and_back_to_normal() -> None:
    slow = note("slow", first=7, step=12, step_time_s=5.0, median_s=1.0, saves=[9])
    assert health.note(slow) == (
        "🐢 Steps are slow since step 7: 5 s at step 12, the run's median is 1 s. "
        "Likely cause: checkpoint saves at step 9."
    )
    unsaved = health.note({**slow, "saves": []})
    assert "No checkpoint save in that window" in unsaved
    back = note("speed_back", step=68, step_time_s=1.0, median_s=1.0)
    assert health.note(back) == "✅ Step time is back to normal at step 68 (1 s; median 1 s)."


def test_gpu_idle_escapes_what_the_cluster_printed() -> None:
    idle = note("gpu_idle", owner="U1", gpus=16, job="7", minutes=10, sample="2% <!here>")
    assert health.note(idle) == (
        "🪫 <@U1> the 16 GPUs of job 7 have been nearly idle for 10 min: 2% &lt;!here&gt;. "
        "A starved data loader, I/O waits or a stuck rank are the usual causes."
    )


def test_a_kind_with_no_words_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match=r"kind 'gone' has no words here \(loss_nan"):
        health.note(note("gone"))
