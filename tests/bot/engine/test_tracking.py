"""What one poll means for a launch, and what the parent and thread look like:
pure functions, fed recorded-shape snapshots (the live paths run in the e2e tests)."""

from __future__ import annotations

import io
from dataclasses import replace

from PIL import Image

from bot.engine.tracking import HISTORY_MAX, apply_snapshot
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.notify.poster import thread_blocks
from bot.settings.sections import Watch
from bot.wording import render, thread
from cluster.frameworks.nemo import NEMO
from cluster.launching.spec import LaunchSpec
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import QueueRow
from cluster.slurm.sacct import AcctRecord, parse_sacct
from cluster.watching.collector import Checkpoint, JobSnapshot, LogChunk
from commands.requests import TrainRequest

PROFILE = ClusterProfile(
    name="a4",
    type="hcc-a4",
    login={"host": "127.0.0.1", "port": 2222, "user": "trainer"},
    partition="a4",
    max_nodes=4,
)
NEMO_LOG = "/home/trainer/x/log-trainer-trainer.run_7_0.out"


def launch(phase: Phase = Phase.SUBMITTED) -> Launch:
    request = TrainRequest(
        workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4", nodes=2
    )
    launch = Launch(id="L-7f3a9c", request=request, user_id="U0ALICE", channel="C1", phase=phase)
    spec = LaunchSpec(
        profile=PROFILE, launch_id=launch.id, framework="nemo", nodes=2, script="s.py"
    )
    tracking = NEMO.tracking(spec, "- Job id: 7\n- Local Directory: /home/trainer/x\n")
    tracking = tracking.model_copy(update={"checkpoint_dir": "/ck"})
    launch.attempts.append(Attempt(number=1, job_id="7", submitted_at=1000.0, tracking=tracking))
    return launch


def snapshot(
    state: str, text: str = "", offset: int = 0, ckpts: tuple[str, ...] = ()
) -> JobSnapshot:
    queue = QueueRow("7", state, state, "None", "0:10", 2, "dev[0-1]", 0, "trainer-trainer.run")
    size = offset + len(text.encode())
    return JobSnapshot(
        job_id="7",
        state=state,
        queue=queue if state in ("RUNNING", "PENDING") else None,
        acct=None,
        restart=0,
        log=LogChunk(NEMO_LOG, text, size, size) if text or offset else LogChunk("", "", 0, -1),
        new_checkpoints=tuple(Checkpoint(int(c.split("step=")[1].split("-")[0]), c) for c in ckpts),
    )


def progress_line(step: int, total: int, loss: float) -> str:
    return (
        f"Training epoch 0, iteration {step}/{total - 1} | lr: 3e-05 | consumed_samples: 64 | "
        f"global_batch_size: 32 | global_step: {step} | reduced_train_loss: {loss} | "
        "train_step_timing in s: 0.5\n"
    )


def threads(events: list[Event]) -> list[str]:
    return [thread.line(e) for e in events if e.kind == "thread"]


def test_running_progress_checkpoints_and_no_repeats() -> None:
    stored = launch()
    ck = "model_name=0--val_loss=0.00-step=1-consumed_samples=64.0"
    text = progress_line(0, 10, 2.5) + progress_line(1, 10, 2.25) + "partial line without newl"
    first = apply_snapshot(
        stored, snapshot("RUNNING", text, ckpts=(ck,)), PROFILE, Watch(), now=2000.0
    )
    assert threads(first) == ["Running on dev[0-1].", "💾 Checkpoint step 1 saved."]
    assert stored.phase == Phase.RUNNING
    assert (stored.progress.step, stored.progress.total, stored.progress.loss) == (2, 10, 2.25)
    tracking = stored.attempts[0].tracking
    assert tracking is not None and tracking.log_path == NEMO_LOG
    assert tracking.log_offset == len(
        (progress_line(0, 10, 2.5) + progress_line(1, 10, 2.25)).encode()
    )
    # The same poll again (a restart, a redelivery): nothing new is said.
    again = apply_snapshot(
        stored,
        snapshot("RUNNING", "", offset=tracking.log_offset, ckpts=(ck,)),
        PROFILE,
        Watch(),
        now=2001.0,
    )
    assert threads(again) == []


def test_completed_says_so_once_with_a_summary_and_a_plot() -> None:
    stored = launch(Phase.RUNNING)
    stored.attempts[0].started_at = 1000.0
    stored.attempts[0].slurm_state = "RUNNING"
    stored.progress_history = [(1, 2.0), (2, 1.5)]
    events = apply_snapshot(stored, snapshot("COMPLETED"), PROFILE, Watch(), now=1600.0)
    assert stored.phase == Phase.DONE and stored.outcome == "COMPLETED"
    [summary] = threads(events)
    assert summary.startswith("✅ COMPLETED in 10 min · 1 attempt · 2.7 GPU-hours")
    assert [e.kind for e in events if e.kind in ("plot", "update")] == ["plot", "update"]
    assert apply_snapshot(stored, snapshot("COMPLETED"), PROFILE, Watch(), now=1700.0) == []


def test_silent_hang_is_reported_once() -> None:
    stored = launch(Phase.RUNNING)
    stored.attempts[0].started_at = 1000.0
    stored.attempts[0].slurm_state = "RUNNING"
    stored.progress.step, stored.progress.total, stored.progress.updated_at = 5, 10, 1100.0
    watch = Watch(hang_min_s=60, hang_step_factor=10)
    quiet = apply_snapshot(stored, snapshot("RUNNING", "", offset=10), PROFILE, watch, now=1150.0)
    assert threads(quiet) == []
    hung = apply_snapshot(stored, snapshot("RUNNING", "", offset=10), PROFILE, watch, now=1200.0)
    assert [e.kind for e in hung].count("oncall") == 1
    assert threads(hung)[0].startswith("⚠️ No progress for 1 min (last seen at step 5;")
    assert (
        apply_snapshot(stored, snapshot("RUNNING", "", offset=10), PROFILE, watch, now=1300.0) == []
    )


def test_a_requeued_job_running_again_is_not_a_hang() -> None:
    """After Slurm requeues a job (a node failure), the time it waits PENDING is not time
    without progress: the hang clock starts again when it runs again."""
    stored = launch(Phase.RUNNING)
    stored.attempts[0].started_at = 1000.0
    stored.attempts[0].slurm_state = "RUNNING"
    stored.progress.step, stored.progress.total, stored.progress.updated_at = 5, 10, 1100.0
    watch = Watch(hang_min_s=60, hang_step_factor=10)
    pending = apply_snapshot(stored, snapshot("PENDING", "", offset=10), PROFILE, watch, now=1110.0)
    assert threads(pending) == ["Job 7 is pending again (requeued)."]
    again = apply_snapshot(stored, snapshot("RUNNING", "", offset=10), PROFILE, watch, now=1300.0)
    assert threads(again) == ["Running on dev[0-1]."]
    assert [e.kind for e in again].count("oncall") == 0
    hung = apply_snapshot(stored, snapshot("RUNNING", "", offset=10), PROFILE, watch, now=1370.0)
    assert [e.kind for e in hung].count("oncall") == 1  # a hang after that still counts


def test_parent_message_tells_the_state_at_a_glance() -> None:
    stored = launch(Phase.RUNNING)
    stored.attempts[0].job_id = "4187"
    p = stored.progress
    p.step, p.total, p.loss, p.step_time_s = 1240, 5000, 1.87, 0.42
    text, blocks = render.parent(stored, PROFILE, now=1540.0)
    assert text.splitlines() == [
        "🟢 *RUNNING*  sft · llama3p1_8b · 2 nodes × 8 GPU · a4 (hcc-a4) · job 4187",
        "step 1,240 / 5,000 · loss 1.87 · 0.42 s/step · ETA 26 min · attempt 1",
    ]
    actions = [b for b in blocks if b["type"] == "actions"][0]["elements"]
    assert [a["action_id"] for a in actions] == ["trainbot_logs", "trainbot_cancel"]
    assert "confirm" in actions[1]


def test_thread_buttons_follow_the_launch_state() -> None:
    rejected = launch(Phase.REJECTED)
    use = Event(
        "thread",
        rejected.id,
        "Not submitted.",
        data={"buttons": ["use_partition"], "partition": "a4"},
    )
    blocks = thread_blocks(rejected, use)
    assert blocks is not None
    [button] = blocks[1]["elements"]
    assert (button["action_id"], button["value"]) == ("trainbot_use_partition", "L-7f3a9c:a4")
    hang = Event("thread", rejected.id, "No progress.", data={"buttons": ["cancel", "retry"]})
    assert thread_blocks(rejected, hang) is None  # it has ended: nothing to cancel
    assert thread_blocks(launch(Phase.RUNNING), hang) is not None


def test_the_hang_bound_follows_the_median_step_time() -> None:
    stored = launch()
    lines = "".join(
        progress_line(i, 100, 2.0).replace("0.5\n", f"{t}\n")
        for i, t in enumerate((1.0, 1.1, 50.0))
    )
    apply_snapshot(stored, snapshot("RUNNING", lines), PROFILE, Watch(), now=2000.0)
    assert stored.progress.recent_step_times_s == [1.0, 1.1, 50.0]
    assert stored.progress.median_step_time_s == 1.1  # one slow step does not stretch the bound
    watch = Watch(hang_min_s=5, hang_step_factor=10)
    assert watch.hang_after_s(stored.progress.median_step_time_s) == 11.0
    assert watch.hang_after_s(None) == 5


def test_names_from_the_cluster_never_ping_anyone() -> None:
    """A checkpoint directory or node list can hold Slack markup: it is escaped."""
    stored = launch()
    hostile = "<!channel>-step=1-"
    odd = "<!here>&step_x"
    events = apply_snapshot(
        stored, snapshot("RUNNING", "", ckpts=(hostile,)), PROFILE, Watch(), now=2000.0
    )
    stored.checkpoints.append(odd)  # a name whose step cannot be read is shown as it is
    events += apply_snapshot(stored, snapshot("COMPLETED"), PROFILE, Watch(), now=2100.0)
    texts = threads(events)
    assert "💾 Checkpoint step 1 saved." in texts
    assert not any("<!" in t for t in texts), texts
    assert any("&lt;!here&gt;&amp;step_x" in t for t in texts), texts


def test_run_time_comes_from_slurm_when_the_start_was_not_seen() -> None:
    """A job that ran and ended between two polls: Slurm's Elapsed says how long it ran."""
    stored = launch()
    (row,) = parse_sacct(
        "7|trainer-trainer.run|FAILED|1:0|1:0|None|00:02:05|dev[0-1]|125|gres/gpu=16\n"
    )
    done = replace(snapshot("FAILED"), acct=AcctRecord(latest=row))
    apply_snapshot(stored, done, PROFILE, Watch(), now=5000.0)
    assert stored.attempts[0].started_at == 5000.0 - 125


def test_the_wandb_run_link_is_posted_once() -> None:
    stored = launch()
    line = "wandb: 🚀 View run at https://wandb.ai/team/llama/runs/ab12cd\n"
    first = apply_snapshot(stored, snapshot("RUNNING", line), PROFILE, Watch(), now=2000.0)
    again = apply_snapshot(
        stored, snapshot("RUNNING", line, offset=len(line.encode())), PROFILE, Watch(), now=2001.0
    )
    link = "📈 W&B run: <https://wandb.ai/team/llama/runs/ab12cd|ab12cd>"
    assert link in threads(first) and link not in threads(again)
    hostile = "wandb: View run at https://wandb.ai/x/<!channel>\n"
    events = apply_snapshot(stored, snapshot("RUNNING", hostile, offset=99), PROFILE, Watch())
    assert not any("<!channel>" in t for t in threads(events))


NEMO_TB = (
    '[NeMo W 2025-05-06 23:48:47 nemo_logger:173] "update_logger_directory" is True. '
    'Overwriting tensorboard logger "save_dir" to /home/trainer/logs/tb_logs\n'
)


def test_a_run_logging_to_tensorboard_says_where_once() -> None:
    """NeMo names the logger's save_dir; the run's own events are under <it>/<experiment>."""
    stored = launch()
    first = apply_snapshot(stored, snapshot("RUNNING", NEMO_TB), PROFILE, Watch(), now=2000.0)
    again = apply_snapshot(
        stored, snapshot("RUNNING", NEMO_TB, offset=len(NEMO_TB)), PROFILE, Watch(), now=2001.0
    )
    said = [t for t in threads(first) if "TensorBoard" in t]
    assert said == [
        "📊 TensorBoard logs in `/home/trainer/logs/tb_logs/x`. To view them, run "
        "`tensorboard --logdir /home/trainer/logs/tb_logs/x` on the login node (127.0.0.1)."
    ]
    assert not any("TensorBoard" in t for t in threads(again))
    hostile = NEMO_TB.replace("/home/trainer/logs", "/x/<!channel>&")
    events = apply_snapshot(stored, snapshot("RUNNING", hostile, offset=999), PROFILE, Watch())
    (text,) = (t for t in threads(events) if "TensorBoard" in t)
    assert "<!channel>" not in text and "&lt;!channel&gt;&amp;" in text


def test_a_cluster_with_a_tensorboard_link_links_the_run() -> None:
    profile = PROFILE.model_copy(
        update={"tensorboard_url_template": "https://tb.example/?dir={log_dir}&job={job_id}"}
    )
    stored = launch()
    events = apply_snapshot(stored, snapshot("RUNNING", NEMO_TB), profile, Watch(), now=2000.0)
    assert (
        "📊 TensorBoard: <https://tb.example/?dir=/home/trainer/logs/tb_logs/x&amp;job=7|job 7> "
        "(logs in `/home/trainer/logs/tb_logs/x`)"
    ) in threads(events)


def test_a_long_run_keeps_its_start_and_its_spikes_and_still_plots() -> None:
    """12,000 steps read over many polls: the stored history stays bounded, still starts
    at step 1 and ends at the last step, keeps a one-step loss spike through every
    halving, and the loss curve draws from it."""
    stored, offset, spike = launch(), 0, 7778
    for first in range(0, 12_000, 500):
        text = "".join(
            progress_line(i, 12_000, 50.0 if i + 1 == spike else 3.0 - i / 6000)
            for i in range(first, first + 500)
        )
        offset += len(text.encode())
        apply_snapshot(stored, snapshot("RUNNING", text, offset - len(text.encode())), PROFILE)
    history = stored.progress_history
    assert len(history) <= HISTORY_MAX
    assert history[0] == (1, 3.0) and history[-1][0] == 12_000
    assert (spike, 50.0) in history
    assert [s for s, _ in history] == sorted(s for s, _ in history)
    png = render.loss_curve(stored)
    assert png.startswith(b"\x89PNG") and Image.open(io.BytesIO(png)).size == (900, 450)


def test_a_nemo_checkpoint_and_its_last_copy_or_link_are_announced_once() -> None:
    stored = launch(Phase.RUNNING)
    ck = "model_name=0--val_loss=2.05-step={}-consumed_samples={}.0"
    first, second = ck.format(9, 320), ck.format(19, 640)
    said = []
    for names in ((first, f"{first}-last"), (second, f"{second}-last")):
        events = apply_snapshot(stored, snapshot("RUNNING", ckpts=names), PROFILE, Watch(), now=2e3)
        said += [t for t in threads(events) if "Checkpoint" in t]
    assert said == ["💾 Checkpoint step 9 saved.", "💾 Checkpoint step 19 saved."]
    # The final save may exist only as its -last: that is a new step, announced.
    last = ck.format(29, 960) + "-last"
    events = apply_snapshot(stored, snapshot("RUNNING", ckpts=(last,)), PROFILE, Watch(), now=2e3)
    assert [t for t in threads(events) if "Checkpoint" in t] == ["💾 Checkpoint step 29 saved."]


def test_nemo_checkpoints_are_looked_for_where_the_run_says_it_logs() -> None:
    stored = launch(Phase.RUNNING)
    text = (
        "[NeMo I 2026-01-01 00:00:00 nemo_logger:162] Experiments will be logged at "
        "/lustre/logs/run-7/default\n"
    )
    apply_snapshot(stored, snapshot("RUNNING", text), PROFILE, Watch(), now=2e3)
    tracking = stored.attempts[0].tracking
    assert tracking is not None
    assert tracking.checkpoint_dir == "/lustre/logs/run-7/default/checkpoints"


def requeued(earlier_state: str | None) -> JobSnapshot:
    """Job 7 running again after one requeue; sacct -D read (or not, when None)."""
    queue = QueueRow("7", "RUNNING", "RUNNING", "None", "0:01", 2, "dev[2-3]", 1, "run")
    snap = replace(snapshot("RUNNING"), queue=queue)
    if earlier_state is None:
        return snap
    rows = parse_sacct(
        f"7|run|{earlier_state}|0:0|0:0|None|00:01:00|dev[0-1]|60|gres/gpu=16\n"
        "7|run|RUNNING|0:0|0:0|None|00:00:01|dev[2-3]|1|gres/gpu=16\n"
    )
    return replace(snap, acct=AcctRecord(latest=rows[-1], earlier=tuple(rows[:-1])))


def test_a_requeue_that_was_no_node_failure_is_said_and_not_paged() -> None:
    stored = launch(Phase.RUNNING)
    events = apply_snapshot(stored, requeued("REQUEUED"), PROFILE, Watch(), now=2e3)
    assert not [e for e in events if e.kind == "oncall"]
    (said,) = [t for t in threads(events) if "requeued" in t]
    assert said.startswith("🔁 Slurm requeued job 7 (restart 1; the run before ended REQUEUED")
    assert stored.attempts[0].restarts == 1


def test_a_node_failure_requeue_waits_for_sacct_then_is_paged_once() -> None:
    stored = launch(Phase.RUNNING)
    # squeue shows the restart before the accounting is read: nothing is decided yet.
    events = apply_snapshot(stored, requeued(None), PROFILE, Watch(), now=2e3)
    assert not [t for t in threads(events) if "requeued" in t] and stored.attempts[0].restarts == 0
    events = apply_snapshot(stored, requeued("NODE_FAIL"), PROFILE, Watch(), now=2e3)
    (page,) = [e for e in events if e.kind == "oncall"]
    assert page.data["cause_key"] == "node_failure"
    assert page.data["facts"] == {"nodes": "dev[0-1]", "job": "7"}
    assert any(t.startswith("⚠️ Slurm requeued job 7 (restart 1)") for t in threads(events))
    again = apply_snapshot(stored, requeued("NODE_FAIL"), PROFILE, Watch(), now=2e3)
    assert not [e for e in again if e.kind == "oncall"]


def startup_poll(launch: Launch, text: str, now: float, watch: Watch) -> list[Event]:
    chunk = launch.attempts[0].tracking
    offset = chunk.log_offset if chunk is not None else 0
    return apply_snapshot(launch, snapshot("RUNNING", text, offset=offset), PROFILE, watch, now=now)


def test_a_long_start_up_that_keeps_printing_is_not_a_hang_and_a_silent_one_is() -> None:
    watch = Watch(hang_min_s=60, hang_step_factor=10, startup_max_s=3600)
    stored = launch(Phase.RUNNING)
    stored.attempts[0].started_at = 1000.0
    stored.attempts[0].slurm_state = "RUNNING"
    # 15 minutes of start-up, a line every 30 s: no report.
    for t in range(1030, 1000 + 15 * 60 + 1, 30):
        assert startup_poll(stored, f"Downloading shards: {t}\n", float(t), watch) == []
    # Then silence: a hang once it lasts hang_min_s, naming the last start-up line.
    assert threads(startup_poll(stored, "", 1950.0, watch)) == []
    hung = startup_poll(stored, "", 1961.0, watch)
    assert [e.kind for e in hung].count("oncall") == 1
    assert threads(hung)[0].startswith(
        "⚠️ No progress for 1 min (last seen at start-up, last line `Downloading shards: 1900`"
    )


def test_a_start_up_past_its_longest_is_a_hang_however_much_it_prints() -> None:
    watch = Watch(hang_min_s=60, startup_max_s=300)
    stored = launch(Phase.RUNNING)
    stored.attempts[0].started_at = 1000.0
    stored.attempts[0].slurm_state = "RUNNING"
    for t in range(1030, 1300, 30):
        assert startup_poll(stored, "still loading\n", float(t), watch) == []
    hung = startup_poll(stored, "still loading\n", 1300.0, watch)
    assert [e.kind for e in hung].count("oncall") == 1


def test_a_run_that_ends_in_the_poll_that_names_its_checkpoint_dir_waits_one_poll_for_them() -> (
    None
):
    """A short run can end before the first poll: that poll reads the log naming the
    checkpoint directory, which its collect could not list yet. The end waits one poll,
    whose collect lists the checkpoints; they are said, then the end."""
    stored = launch(Phase.RUNNING)
    text = (
        "[NeMo I 2026-01-01 00:00:00 nemo_logger:162] Experiments will be logged at "
        "/lustre/logs/run-7/default\n"
    )
    first = apply_snapshot(stored, snapshot("COMPLETED", text), PROFILE, Watch(), now=2e3)
    assert stored.phase == Phase.RUNNING and not any("Completed" in t for t in threads(first))
    ck = "model_name=0--val_loss=2.05-step={}-consumed_samples={}.0"
    names = (ck.format(2, 96), ck.format(5, 192))
    then = apply_snapshot(stored, snapshot("COMPLETED", ckpts=names), PROFILE, Watch(), now=2e3 + 2)
    said = threads(then)
    assert [t for t in said if t.startswith("💾")] == [
        "💾 Checkpoint step 2 saved.",
        "💾 Checkpoint step 5 saved.",
    ]
    assert phase_of(stored) == Phase.DONE and stored.outcome == "COMPLETED"
    # A directory known before the poll that ends the run: the end is taken at once.
    known = launch(Phase.RUNNING)
    apply_snapshot(known, snapshot("COMPLETED", "step line\n"), PROFILE, Watch(), now=2e3)
    assert known.phase == Phase.DONE


def phase_of(launch: Launch) -> Phase:
    """The launch's phase now (apply_snapshot changes it in place, which mypy's narrowing
    from an earlier assert does not see)."""
    return launch.phase
