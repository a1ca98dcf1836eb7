"""Which changes of a launch mention its owner and may come as DMs: the pure classifier
fed the launch edits the poll and the commands really make."""

from __future__ import annotations

from bot.engine.tracking import apply_snapshot
from bot.lifecycle import notices
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.lifecycle.notices import Before, classify
from bot.settings.sections import Watch
from bot.wording import thread
from tests.bot.engine.test_tracking import PROFILE, launch, snapshot


def change(launch: Launch, edit: object) -> tuple[list[str], bool, list[Event]]:
    """Classify what ``edit(item)`` does, and tag its events as the store does."""
    before = Before.of(launch)
    events = edit(launch)  # type: ignore[operator]
    found, mention = classify(before, launch)
    notices.tag(events, found, mention)
    return list(found), mention, events


def running() -> Launch:
    stored = launch(Phase.RUNNING)
    stored.attempts[0].started_at = 1000.0
    stored.attempts[0].slurm_state = "RUNNING"
    return stored


def test_completed_mentions_the_owner_on_the_final_line() -> None:
    launch = running()
    launch.progress_history = [(1, 2.0), (2, 1.5)]
    found, mention, events = change(
        launch, lambda i: apply_snapshot(i, snapshot("COMPLETED"), PROFILE, Watch(), now=1600.0)
    )
    assert found == ["completed"] and mention
    lines = [e for e in events if e.kind == "thread"]
    said = {"move": "closing", "state": "COMPLETED", "outcome": "COMPLETED", "attempts": 1}
    said |= {"buttons": ["run_again"], "notices": ["completed"], "mention": True}
    assert lines[-1].data.items() >= said.items() and not lines[-1].text
    assert thread.posted(launch, lines[-1]).startswith("<@U0ALICE> ✅ COMPLETED in 10 min")


def test_a_start_and_a_checkpoint_are_quiet() -> None:
    stored = launch(Phase.SUBMITTED)
    ckpt = "model_name=0--val_loss=0.00-step=19-consumed_samples=1280.0"
    found, mention, events = change(
        stored,
        lambda i: apply_snapshot(i, snapshot("RUNNING", ckpts=(ckpt,)), PROFILE, now=1100.0),
    )
    assert found == ["started", "checkpoint"] and not mention
    last = [e for e in events if e.kind == "thread"][-1]
    assert last.data == {"move": "checkpoint", "step": 19, "notices": ["started", "checkpoint"]}
    assert thread.posted(stored, last) == "💾 Checkpoint step 19 saved."  # no mention


def test_a_hang_mentions_the_owner_once() -> None:
    launch = running()
    launch.progress.step, launch.progress.total, launch.progress.updated_at = 5, 10, 1100.0
    watch = Watch(hang_min_s=60, hang_step_factor=10)
    snap = snapshot("RUNNING", "", offset=10)
    found, mention, events = change(
        launch, lambda i: apply_snapshot(i, snap, PROFILE, watch, now=1200.0)
    )
    assert found == ["hung"] and mention
    tagged = [e for e in events if e.data.get("notices")]
    assert [thread.line(e)[:18] for e in tagged] == ["⚠️ No progress for"]
    again, _, _ = change(launch, lambda i: apply_snapshot(i, snap, PROFILE, watch, now=1300.0))
    assert again == []


def test_a_failure_mentions_the_owner() -> None:
    launch = running()
    found, mention, _ = change(
        launch, lambda i: apply_snapshot(i, snapshot("FAILED"), PROFILE, Watch(), now=1600.0)
    )
    assert launch.outcome == "FAILED" and found == ["failed"] and mention


def test_cancelled_by_someone_else_mentions_the_owner_by_themselves_not() -> None:
    def cancel_by(who: str):  # type: ignore[no-untyped-def]
        def edit(launch: Launch) -> list[Event]:
            launch.cancelled_by = who
            launch.phase, launch.outcome = Phase.DONE, "CANCELLED"
            return [Event("thread", launch.id, f"🚫 Cancelled by <@{who}>.")]

        return edit

    assert change(launch(Phase.QUEUED), cancel_by("U0BOB"))[:2] == (["cancelled"], True)
    assert change(launch(Phase.QUEUED), cancel_by("U0ALICE"))[:2] == (["cancelled"], False)


def test_approval_asked_and_answered_mention_the_owner() -> None:
    asked = launch(Phase.AWAITING_APPROVAL)
    assert classify(None, asked) == (["approval"], True)

    def decide(phase: Phase):  # type: ignore[no-untyped-def]
        def edit(launch: Launch) -> list[Event]:
            launch.phase = phase
            return [Event("thread", launch.id, "decided"), Event("update", launch.id)]

        return edit

    assert change(launch(Phase.AWAITING_APPROVAL), decide(Phase.QUEUED))[:2] == (["approved"], True)
    assert change(launch(Phase.AWAITING_APPROVAL), decide(Phase.REJECTED))[:2] == (
        ["rejected"],
        True,
    )
    queued = classify(None, launch(Phase.QUEUED))
    assert queued == ([], False)  # a plain /train: nothing to tell


def test_a_change_without_a_thread_line_carries_no_notice() -> None:
    events = [Event("update", "L-1")]
    notices.tag(events, ["completed"], True)
    assert events[0].data == {}


def test_dm_text_is_one_short_line_with_the_thread_link() -> None:
    stored = launch(Phase.DONE)
    text = thread.dm(stored, "✅ COMPLETED in 41 min · 1 attempt\nmore", "https://x/p1")
    assert text == (
        "sft llama3p1_8b on a4 (`L-7f3a9c`): ✅ COMPLETED in 41 min · 1 attempt · "
        "<https://x/p1|thread>"
    )
    assert thread.summary(["a", "b"]) == "While your quiet hours lasted (2 updates):\n• a\n• b"


def test_a_sweep_member_concerns_its_owner_only_when_it_fails_hangs_or_another_cancels() -> None:
    launch = running()
    launch.sweep = "S-0a1b2c"
    launch.progress_history = [(1, 2.0), (2, 1.5)]
    found, mention, _ = change(
        launch, lambda i: apply_snapshot(i, snapshot("COMPLETED"), PROFILE, Watch(), now=1600.0)
    )
    assert (found, mention) == ([], False)  # the sweep's table and comparison tell it
    failing = running()
    failing.sweep = "S-0a1b2c"
    found, mention, _ = change(
        failing, lambda i: apply_snapshot(i, snapshot("FAILED"), PROFILE, Watch(), now=1600.0)
    )
    assert "failed" in found and mention
    for who, told in (("U0ALICE", False), ("U0BOB", True)):
        member = running()
        member.sweep = "S-0a1b2c"

        def cancel(i: Launch, who: str = who) -> list[Event]:
            i.cancelled_by, i.phase, i.outcome = who, Phase.DONE, "CANCELLED"
            return [Event("thread", i.id, "🚫 Cancelled.")]

        found, mention, _ = change(member, cancel)
        assert (found == ["cancelled"], mention) == (told, told), who
