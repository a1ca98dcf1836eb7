"""What trainbot tells of a run that stops early, a job that waits, a run that prints in
blocks, and an RL run's reward: pure, fed snapshots in the shapes the collector returns
(the live paths run in tests/bot/e2e/test_truthful_live.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.core.core import resumed
from bot.engine.tracking import apply_snapshot
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.lifecycle.notices import Before, classify
from bot.notify.poster import thread_blocks
from bot.settings.sections import Watch
from bot.wording import render
from cluster.frameworks.nemo_rl import NEMO_RL
from cluster.launching.spec import LaunchSpec
from cluster.slurm.base import QueueRow
from cluster.slurm.sacct import AcctRecord, parse_sacct
from cluster.watching.collector import Checkpoint, JobSnapshot, LogChunk
from commands.errors import CommandError
from commands.requests import TrainRequest
from tests.bot.engine.test_tracking import PROFILE, progress_line, snapshot, threads
from tests.bot.engine.test_tracking import launch as nemo_launch

LOG = "/home/trainer/vertex-oss-training/nemo_rl/7/nemo_rl_output.log"
BAR = "=" * 25


def rl_launch(workload: str = "sft", phase: Phase = Phase.RUNNING) -> Launch:
    request = TrainRequest(
        workload=workload, model="llama3p1_8b", framework="nemo-rl", cluster="a4", nodes=1
    )
    launch = Launch(id="L-7f3a9c", request=request, user_id="U0ALICE", channel="C1", phase=phase)
    spec = LaunchSpec(
        profile=PROFILE, launch_id=launch.id, framework="nemo-rl", nodes=1, script="a.sh"
    )
    tracking = NEMO_RL.tracking(spec, "7\n")
    started = 1000.0 if phase == Phase.RUNNING else 0.0
    launch.attempts.append(
        Attempt(number=1, job_id="7", submitted_at=990.0, started_at=started, tracking=tracking)
    )
    launch.attempts[0].slurm_state = "RUNNING" if phase == Phase.RUNNING else "PENDING"
    return launch


def snap(
    launch: Launch, state: str, text: str = "", *, reason: str = "None", ckpts: tuple[int, ...] = ()
) -> JobSnapshot:
    tracking = launch.attempts[-1].tracking
    start = tracking.log_offset if tracking is not None else 0
    size = start + len(text.encode())
    queue = QueueRow("7", state, state, reason, "0:10", 1, "dev0", 0, "run")
    return JobSnapshot(
        job_id="7",
        state=state,
        queue=queue if state in ("RUNNING", "PENDING") else None,
        acct=None,
        restart=0,
        log=LogChunk(LOG, text, size, size),
        new_checkpoints=tuple(Checkpoint(s, f"step_{s}") for s in ckpts),
    )


def rl_step(k: int, n: int, loss: float, reward: float | None = None) -> str:
    lines = [f"{BAR} Step {k}/{n} {BAR}", "📊 Training Results:", f"  • Loss: {loss:.4f}"]
    if reward is not None:
        lines.append(f"  • Avg Reward: {reward:.4f}")
    return "\n".join([*lines, "⏱️  Timing:", "  • Total step time: 20.00s", ""]) + "\n"


def kinds(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e.kind == kind]


# -- stopped early ---------------------------------------------------------------------


def stopped_at_37(launch: Launch, watch: Watch) -> list[Event]:
    text = "".join(rl_step(k, 100, 0.5) for k in (36, 37))
    apply_snapshot(launch, snap(launch, "RUNNING", text, ckpts=(37,)), PROFILE, watch, now=1100.0)
    end = "Saving checkpoint for step 37...\nTimeout has been reached, stopping training early\n"
    apply_snapshot(launch, snap(launch, "RUNNING", end), PROFILE, watch, now=1110.0)
    return apply_snapshot(launch, snap(launch, "COMPLETED"), PROFILE, watch, now=1120.0)


def test_a_run_stopped_by_its_time_budget_is_resumed_from_its_checkpoint_not_a_success() -> None:
    launch = rl_launch()
    events = stopped_at_37(launch, Watch())
    said = threads(events)
    assert said == [
        "⏸️ STOPPED EARLY at step 37 / 100 (its time budget; Slurm: COMPLETED) · checkpoint "
        "step 37 · resuming from it (attempt 2)."
    ]
    assert not any("✅" in t for t in said)
    assert launch.phase == Phase.RETRYING and launch.active and launch.outcome == ""
    new = launch.attempts[-1]
    assert new.number == 2 and new.resume and new.from_step == 37 and not new.held
    assert kinds(events, "enqueue") and launch.resumes == 1
    assert launch.progress.stopped_early == ""  # the next attempt starts clean


def test_a_stopped_early_run_the_policy_does_not_resume_ends_stopped_early() -> None:
    launch = rl_launch()
    events = stopped_at_37(launch, Watch(resume_stopped_early="never"))
    (said,) = threads(events)
    assert said.startswith("⏸️ STOPPED EARLY at step 37 / 100 (its time budget; Slurm: COMPLETED)")
    assert "Not resumed: the policy resumes no run (watch.resume_stopped_early)." in said
    assert "from=L-7f3a9c" in said and "⏸️ STOPPED EARLY in" in said
    assert launch.phase == Phase.DONE and launch.outcome == "STOPPED_EARLY"
    assert render.status_label(launch) == ("⏸️", "STOPPED EARLY")


def test_completed_short_of_the_total_without_a_line_is_no_success_either() -> None:
    """COMPLETED at step 37 of 100 with no early-stop line: not resumed by default (only a
    time budget is), and never ✅."""
    launch = rl_launch()
    text = "".join(rl_step(k, 100, 0.5) for k in (36, 37))
    apply_snapshot(launch, snap(launch, "RUNNING", text, ckpts=(37,)), PROFILE, Watch(), now=1100.0)
    events = apply_snapshot(launch, snap(launch, "COMPLETED"), PROFILE, Watch(), now=1110.0)
    assert launch.outcome == "STOPPED_EARLY" and "✅" not in "".join(threads(events))
    resumed = rl_launch()
    apply_snapshot(
        resumed, snap(resumed, "RUNNING", text, ckpts=(37,)), PROFILE, Watch(), now=1100.0
    )
    always = Watch(resume_stopped_early="always")
    apply_snapshot(resumed, snap(resumed, "COMPLETED"), PROFILE, always, now=1110.0)
    assert resumed.phase == Phase.RETRYING


def test_a_run_that_reaches_its_total_completes() -> None:
    launch = rl_launch()
    text = (
        rl_step(100, 100, 0.3) + "Max number of steps has been reached, stopping training early\n"
    )
    apply_snapshot(launch, snap(launch, "RUNNING", text), PROFILE, Watch(), now=1100.0)
    events = apply_snapshot(launch, snap(launch, "COMPLETED"), PROFILE, Watch(), now=1110.0)
    assert launch.outcome == "COMPLETED" and threads(events)[-1].startswith("✅ COMPLETED")


def test_no_resume_without_a_checkpoint_of_this_attempt() -> None:
    launch = rl_launch()
    text = rl_step(3, 100, 0.5) + "Timeout has been reached, stopping training early\n"
    apply_snapshot(launch, snap(launch, "RUNNING", text), PROFILE, Watch(), now=1100.0)
    events = apply_snapshot(launch, snap(launch, "COMPLETED"), PROFILE, Watch(), now=1110.0)
    assert launch.outcome == "STOPPED_EARLY"
    assert "Not resumed: it saved no checkpoint in this attempt." in threads(events)[0]


def test_the_end_waits_until_the_log_is_read_to_its_end() -> None:
    """A COMPLETED job whose log still has unread bytes (the collector reads 64 KiB a poll)
    is ended at a later poll, once its last step and its why are read."""
    launch = rl_launch()
    apply_snapshot(
        launch, snap(launch, "RUNNING", rl_step(99, 100, 0.3)), PROFILE, Watch(), now=1.1e3
    )
    unread = replace(snap(launch, "COMPLETED"), log=LogChunk(LOG, "", 10, 5000))
    assert threads(apply_snapshot(launch, unread, PROFILE, Watch(), now=1.2e3)) == []
    assert launch.phase == Phase.RUNNING


# -- pending in plain words ------------------------------------------------------------


def test_a_job_held_after_its_prolog_failed_is_said_at_once_and_paged_once() -> None:
    launch = rl_launch(phase=Phase.SUBMITTED)
    waiting = apply_snapshot(launch, snap(launch, "PENDING", reason="Priority"), PROFILE, now=1e3)
    assert threads(waiting) == [] and kinds(waiting, "update")
    text, _ = render.parent(launch, PROFILE, now=1e3)
    assert "waiting behind jobs with a higher priority (Slurm: `Priority`)" in text
    held = "launch failed requeued held"
    events = apply_snapshot(launch, snap(launch, "PENDING", reason=held), PROFILE, now=1.1e3)
    (said,) = threads(events)
    assert said.startswith("⛔ HELD · job 7 is held: its launch failed on a node")
    assert "On-call is told" in said
    (page,) = kinds(events, "oncall")
    assert page.data["cause_key"] == "job_held"
    assert render.status_label(launch) == ("⛔", "HELD")
    again = apply_snapshot(launch, snap(launch, "PENDING", reason=held), PROFILE, now=1.2e3)
    assert again == []  # said once, paged once


def test_a_reason_that_never_clears_says_the_fix_and_does_not_page() -> None:
    launch = rl_launch(phase=Phase.SUBMITTED)
    events = apply_snapshot(
        launch, snap(launch, "PENDING", reason="PartitionTimeLimit"), PROFILE, now=1e3
    )
    (said,) = threads(events)
    assert said.startswith("⛔ CANNOT START · job 7 is over the partition's time limit")
    assert "shorter time=" in said and not kinds(events, "oncall")
    assert render.status_label(launch) == ("⛔", "CANNOT START")


def test_a_requeue_into_a_hold_does_not_say_it_will_run_again() -> None:
    launch = rl_launch()
    rows = parse_sacct(
        "7|run|REQUEUED|0:0|0:0|None|00:01:00|dev0|60|gres/gpu=8\n"
        "7|run|PENDING|0:0|0:0|None|00:00:00||0|gres/gpu=8\n"
    )
    queue = QueueRow(
        "7", "PENDING", "PENDING", "launch failed requeued held", "0:00", 1, "", 1, "r"
    )
    held = replace(
        snap(launch, "PENDING"),
        queue=queue,
        acct=AcctRecord(latest=rows[-1], earlier=tuple(rows[:-1])),
    )
    said = "\n".join(threads(apply_snapshot(launch, held, PROFILE, now=2e3)))
    assert "will not run again until it is released" in said
    assert "it will run again" not in said


# -- output in blocks, and the log interval ---------------------------------------------


def test_a_run_whose_log_grows_in_blocks_is_not_hung_and_a_silent_one_is() -> None:
    """A buffered driver writes 8 KiB blocks that end mid-line: growth counts as output even
    with no new whole line or step; silence past the bound still pages."""
    watch = Watch(hang_min_s=60, hang_step_factor=2)
    launch = rl_launch()
    apply_snapshot(launch, snap(launch, "RUNNING", rl_step(1, 10, 0.5)), PROFILE, watch, now=1010.0)
    for n, t in enumerate(range(1040, 1400, 40), start=1):  # a block every 40 s, no whole line
        cut = "x" * 40 * n  # read again from where the last whole line ended, and longer
        assert apply_snapshot(launch, snap(launch, "RUNNING", cut), PROFILE, watch, now=t) == []
    hung = apply_snapshot(launch, snap(launch, "RUNNING"), PROFILE, watch, now=1500.0)
    assert len(kinds(hung, "oncall")) == 1


def test_the_hang_bound_counts_the_steps_between_printed_points() -> None:
    """Megatron prints every log_interval iterations: 10 steps of 20 s between points is
    no hang at 10 x the median step time of one step."""
    watch = Watch(hang_min_s=60, hang_step_factor=2)
    launch = rl_launch()
    launch.progress.step, launch.progress.total, launch.progress.updated_at = 10, 100, 1000.0
    launch.progress.recent_step_times_s = [20.0]
    launch.progress.log_interval = 10
    assert apply_snapshot(launch, snap(launch, "RUNNING"), PROFILE, watch, now=1390.0) == []
    assert kinds(
        apply_snapshot(launch, snap(launch, "RUNNING"), PROFILE, watch, now=1401.0), "oncall"
    )


# -- RL: the reward is the number ---------------------------------------------------------


def test_grpo_shows_reward_and_accuracy_and_its_signed_loss_raises_no_spike() -> None:
    launch = rl_launch("grpo")
    losses = [0.0021, -0.0013, 0.0034, 0.0008, 0.0027, -0.0005, 0.0019, 0.0142, 0.0011]
    text = "".join(rl_step(k, 20, loss, 0.3 + 0.02 * k) for k, loss in enumerate(losses, start=1))
    text += "📊 Validation Results:\n    • Accuracy: 0.4800\n"
    events = apply_snapshot(launch, snap(launch, "RUNNING", text), PROFILE, Watch(), now=1100.0)
    assert not any("spike" in t.lower() for t in threads(events))
    line = render.progress_line(launch)
    assert "step 9 / 20 · reward 0.48 · accuracy 0.48 (val)" in line and "loss" not in line
    assert launch.reward_history[-1] == (9, 0.48) and launch.accuracy_history == [(9, 0.48)]
    assert render.loss_curve(launch).startswith(b"\x89PNG")


def test_the_end_of_run_picture_of_an_rl_run_plots_its_reward_and_accuracy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drawn: dict[str, object] = {}

    def draw(history: object, **kwargs: object) -> bytes:
        drawn.update(kwargs, history=history)
        return b"png"

    monkeypatch.setattr(render, "render_loss_png", draw)
    launch = rl_launch("grpo")
    launch.progress_history = [(1, 0.002), (2, -0.001)]
    launch.reward_history, launch.accuracy_history = [(1, 0.3), (2, 0.4)], [(2, 0.5)]
    render.loss_curve(launch)
    assert drawn["history"] == launch.reward_history and drawn["metric"] == "reward"
    assert drawn["validation"] == [(2, 0.5)] and "reward" in str(drawn["title"])
    sft = rl_launch()
    sft.progress_history = [(1, 0.7), (2, 0.6)]
    render.loss_curve(sft)
    assert drawn["history"] == sft.progress_history and drawn.get("metric") == "loss"


def test_a_reward_that_collapses_or_goes_flat_is_said_once() -> None:
    launch = rl_launch("grpo")
    rising = "".join(rl_step(k, 60, 0.001, 0.6) for k in range(1, 11))
    apply_snapshot(launch, snap(launch, "RUNNING", rising), PROFILE, Watch(), now=1100.0)
    falls = "".join(rl_step(k, 60, 0.001, 0.1) for k in range(11, 21))
    said = threads(
        apply_snapshot(launch, snap(launch, "RUNNING", falls), PROFILE, Watch(), now=1200)
    )
    assert len([t for t in said if "reward collapsed" in t]) == 1, said
    flat = "".join(rl_step(k, 60, 0.001, 0.1) for k in range(21, 41))
    said = threads(
        apply_snapshot(launch, snap(launch, "RUNNING", flat), PROFILE, Watch(), now=1300)
    )
    assert len([t for t in said if "has been 0.1 for 20 steps" in t]) == 1, said
    assert not [t for t in said if "collapsed" in t]  # the same episode: said once


def test_a_time_budget_that_runs_out_at_the_last_step_ends_nothing_early() -> None:
    launch = rl_launch()
    text = rl_step(100, 100, 0.3) + "Timeout has been reached, stopping training early\n"
    apply_snapshot(launch, snap(launch, "RUNNING", text, ckpts=(100,)), PROFILE, Watch(), now=1.1e3)
    apply_snapshot(launch, snap(launch, "COMPLETED"), PROFILE, Watch(), now=1.2e3)
    assert launch.outcome == "COMPLETED" and len(launch.attempts) == 1


def test_a_run_left_stopped_early_offers_a_resume_button_that_goes_on_from_it() -> None:
    launch = rl_launch()
    events = stopped_at_37(launch, Watch(resume_stopped_early="never"))
    (line,) = [e for e in events if e.kind == "thread"]
    blocks = thread_blocks(launch, line)
    assert blocks is not None and "trainbot_resume" in str(blocks)
    again = resumed(launch)
    assert again.start_from == launch.id and again.after is None
    assert again.workload == "sft" and again.framework == "nemo-rl"
    done = rl_launch()
    done.phase, done.outcome = Phase.DONE, "COMPLETED"
    with pytest.raises(CommandError, match="did not stop early"):
        resumed(done)


def test_a_cut_line_read_again_at_every_poll_is_not_growth() -> None:
    """The collector reads a log's unfinished last line again at each poll (a tqdm bar drawn
    with carriage returns, a stalled block): the same bytes are no sign of life."""
    watch = Watch(hang_min_s=60, hang_step_factor=2)
    launch = rl_launch()
    apply_snapshot(launch, snap(launch, "RUNNING", rl_step(1, 10, 0.5)), PROFILE, watch, now=1010.0)
    cut = "Loading shards:  40%|####      | 12/30\r"
    for t in range(1020, 1200, 20):
        events = apply_snapshot(launch, snap(launch, "RUNNING", cut), PROFILE, watch, now=t)
        if kinds(events, "oncall"):
            assert t >= 1070  # silent since 1010 (the cut line grew the log once, at 1020)
            return
    raise AssertionError("a log that stopped growing was never called hung")


def test_a_run_printing_every_tenth_step_gets_ten_times_the_hang_bound() -> None:
    """NeMo printing every 10 iterations, one line a poll: the gap between two polls' points
    is its log interval, and the hang bound grows with it."""
    watch = Watch(hang_min_s=60, hang_step_factor=2)
    launch = nemo_launch(Phase.RUNNING)
    launch.attempts[0].started_at, launch.attempts[0].slurm_state = 1000.0, "RUNNING"
    first = progress_line(9, 100, 1.5).replace("timing in s: 0.5", "timing in s: 20.0")
    apply_snapshot(launch, snapshot("RUNNING", first), PROFILE, watch, now=1200.0)
    tracking = launch.attempts[0].tracking
    assert tracking is not None
    second = progress_line(19, 100, 1.4).replace("timing in s: 0.5", "timing in s: 20.0")
    offset = tracking.log_offset
    apply_snapshot(launch, snapshot("RUNNING", second, offset=offset), PROFILE, watch, now=1400.0)
    assert launch.progress.log_interval == 10
    tracking = launch.attempts[0].tracking
    assert tracking is not None
    quiet = snapshot("RUNNING", "", offset=tracking.log_offset)
    assert apply_snapshot(launch, quiet, PROFILE, watch, now=1790.0) == []  # under 2 x 20 s x 10
    assert kinds(apply_snapshot(launch, quiet, PROFILE, watch, now=1801.0), "oncall")


def test_a_run_left_stopped_early_ends_as_a_run_does_not_as_an_urgent_failure() -> None:
    launch = rl_launch()
    before = Before.of(launch)
    stopped_at_37(launch, Watch(resume_stopped_early="never"))
    found, mention = classify(before, launch)
    assert "completed" in found and "failed" not in found and mention
