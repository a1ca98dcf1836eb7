"""Run health from parsed progress (bot/lifecycle/health.py), through apply_snapshot's read of a log
chunk: each episode said once, also across a restart (the launch record is re-read)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from bot.core.home import home_blocks
from bot.engine.tracking import apply_snapshot
from bot.lifecycle.health import TRAINBOT, gpu_sampled, observe
from bot.lifecycle.launch import Launch, Phase
from bot.settings.sections import HealthRules, Watch
from bot.wording import health as health_words
from bot.wording import render
from cluster.preflight.gpu import GpuSample, parse_samples, sample_script
from cluster.watching.progress import Point, Progress, parse_nemo
from tests.bot.engine.test_tracking import PROFILE, snapshot, threads
from tests.bot.engine.test_tracking import launch as tracked_launch


def nemo_line(it: int, loss: str, took: float = 1.0, last: int = 99) -> str:
    """NeMo's progress printer's line (see cluster/watching/progress.py for the upstream source)."""
    return (
        f"Training epoch 0, iteration {it}/{last} | lr: 3e-05 | global_step: {it} | "
        f"reduced_train_loss: {loss} | train_step_timing in s: {took}\n"
    )


def launch() -> Launch:
    return tracked_launch(Phase.RUNNING)


def feed(
    record: Launch, text: str, rules: HealthRules | None = None, saved: tuple[int, ...] = ()
) -> list[str]:
    """One poll whose log chunk is ``text``, through apply_snapshot as the poller applies
    it; the record then goes through JSON as the store keeps it. The health lines said."""
    tracking = record.attempts[-1].tracking
    offset = tracking.log_offset if tracking is not None else 0
    ckpts = tuple(f"model_name=0--val_loss=0.00-step={s}-consumed_samples=1.0" for s in saved)
    snap = snapshot("RUNNING", text, offset=offset, ckpts=ckpts)
    watch = Watch(health=rules or HealthRules())
    events = apply_snapshot(record, snap, PROFILE, watch, now=100.0)
    restored = Launch.model_validate_json(record.model_dump_json())
    record.__dict__.update(restored.__dict__)
    return [t for t in threads(events) if not t.startswith(("Running", "💾"))]


def test_a_negative_inf_loss_is_read_as_inf_not_dropped() -> None:
    assert parse_nemo(nemo_line(3, "-inf")).points[0].loss == float("-inf")


def test_nan_is_said_once_and_stops_the_run_by_default() -> None:
    record = launch()
    said = feed(record, "".join(nemo_line(i, "2.0") for i in range(5)) + nemo_line(5, "nan"))
    assert len(said) == 1 and "<@U0ALICE> the training loss is nan at step 6" in said[0]
    assert record.cancelled_by == TRAINBOT and record.cancelled_at == 100.0
    assert feed(record, nemo_line(6, "nan") + nemo_line(7, "nan")) == []


def test_nan_under_flag_leaves_the_run_running_per_cluster() -> None:
    record = launch()
    rules = HealthRules(nan_action="stop", nan_action_clusters={"a4": "flag"})
    said = feed(record, nemo_line(0, "nan"), rules)
    assert "The run goes on" in said[0] and not record.cancelled_by


def test_a_teams_nan_policy_wins_over_its_clusters() -> None:
    record = launch()
    record.slurm_account = "nlp"
    rules = HealthRules(nan_action_clusters={"a4": "flag"}, nan_action_accounts={"nlp": "stop"})
    said = feed(record, nemo_line(0, "inf"), rules)
    assert "trainbot is stopping the run" in said[0] and record.cancelled_by == TRAINBOT


def test_a_spike_is_said_once_per_episode() -> None:
    record = launch()
    assert feed(record, "".join(nemo_line(i, "2.0") for i in range(6))) == []
    said = feed(record, nemo_line(6, "9.5") + nemo_line(7, "9.0"))
    assert len(said) == 1 and "Loss spike at step 7: 9.5" in said[0], said
    assert feed(record, nemo_line(8, "9.1")) == []  # the same episode, after a restart
    assert feed(record, nemo_line(9, "2.0")) == []  # back: the episode ends
    assert len(feed(record, nemo_line(10, "8.0"))) == 1  # a new one


def test_slow_steps_name_a_checkpoint_save_and_recovery_is_said_once() -> None:
    record = launch()
    assert feed(record, "".join(nemo_line(i, "2.0", 1.0) for i in range(6))) == []
    assert feed(record, nemo_line(6, "2.0", 5.0) + nemo_line(7, "2.0", 5.0)) == []
    said = feed(record, nemo_line(8, "2.0", 5.0), saved=(7,))
    assert len(said) == 1 and "Steps are slow since step 7" in said[0], said
    assert "checkpoint saves at step 7" in said[0], said
    assert feed(record, nemo_line(9, "2.0", 5.0)) == []
    back = feed(record, nemo_line(10, "2.0", 1.0) + nemo_line(11, "2.0", 1.0))
    assert len(back) == 1 and "back to normal at step 11" in back[0], back


def test_a_long_slow_window_does_not_become_the_median() -> None:
    record = launch()
    assert feed(record, "".join(nemo_line(i, "2.0", 1.0) for i in range(6))) == []
    slow = feed(record, "".join(nemo_line(i, "2.0", 5.0) for i in range(6, 66)))
    assert len(slow) == 1 and "Steps are slow since step 7" in slow[0], slow
    assert feed(record, nemo_line(66, "2.0", 5.0)) == []  # still slow, 61 steps on
    back = feed(record, nemo_line(67, "2.0", 1.0))
    assert len(back) == 1 and "back to normal at step 68" in back[0], back


def test_validation_rising_while_training_falls_is_one_note() -> None:
    record = launch()
    rules = HealthRules(val_rising=3)
    points = [Point(step=s, total=100, loss=3.0 - s / 10) for s in range(1, 20)]
    vals = ((5, 1.0), (10, 1.1), (15, 1.2))
    said = observe(
        record, Progress(tuple(points), False, vals), rules, ended=False, saved_steps=(), now=1.0
    )
    assert len(said) == 1 and said[0] == {
        "move": "health", "note": "val_rising", "validations": [1.0, 1.1, 1.2], "step": 15,
        "train_from": 2.5, "train_to": 1.1,
    }  # fmt: skip
    assert "Validation loss rose over the last 3 validations (1 → 1.1 → 1.2, up to step 15)" in (
        health_words.note(said[0])
    )
    record.validation_history.extend(vals)
    record.progress_history.extend((q.step, q.loss or 0.0) for q in points)
    more = Progress((Point(step=21, total=100, loss=0.9),), False, ((20, 1.3),))
    assert observe(record, more, rules, ended=False, saved_steps=(), now=2.0) == []


def test_bad_health_config_says_what_would_be_right() -> None:
    with pytest.raises(ValidationError, match="nan_action"):
        Watch.model_validate({"health": {"nan_action": "pause"}})
    with pytest.raises(ValidationError, match="greater than 1"):
        HealthRules(spike_factor=0.5)


def test_gpu_figures_show_on_the_status_line_and_app_home_and_idle_is_said_once() -> None:
    record = launch()
    rules = HealthRules(idle_util_pct=10, idle_window_s=600)
    idle = GpuSample(gpus=16, util_pct=2.0, mem_used_mib=1024.0, mem_total_mib=81559.0)
    assert gpu_sampled(record, idle, rules, now=1000.0) == []  # the window starts
    assert "GPU 2%" in render.progress_line(record)
    blocks = json.dumps(home_blocks([record], [], {}, {}, now=1000.0))
    assert "GPU 2%" in blocks
    said = gpu_sampled(record, idle, rules, now=1600.0)
    assert len(said) == 1 and said[0]["note"] == "gpu_idle", said
    assert (said[0]["owner"], said[0]["gpus"], said[0]["job"], said[0]["minutes"]) == (
        "U0ALICE",
        16,
        "7",
        10,
    )
    words = health_words.note(said[0])
    assert "16 GPUs of job 7 have been nearly idle for 10 min" in words
    assert "2% busy, 1.0/80 GiB memory" in words and "<@U0ALICE>" in words
    assert gpu_sampled(record, idle, rules, now=1900.0) == []
    busy = GpuSample(gpus=16, util_pct=90.0, mem_used_mib=60000.0, mem_total_mib=81559.0)
    assert gpu_sampled(record, busy, rules, now=2000.0) == []
    assert "GPU 90%" in render.progress_line(record)


def test_gpu_samples_are_parsed_per_job_and_bad_job_ids_refused() -> None:
    text = "12|2, 100, 81559\n12|4, 300, 81559\n13|srun: error: Invalid job id specified\n"
    samples = parse_samples(text)
    assert list(samples) == ["12"] and samples["12"].util_pct == 3.0
    assert samples["12"].gpus == 2 and samples["12"].mem_used_mib == 200.0
    with pytest.raises(ValueError, match="not a Slurm job id"):
        sample_script(["12; rm -rf ~"])
