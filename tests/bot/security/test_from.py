"""from= is the owner's: someone who may read a launch's logs (a log viewer, an admin)
may still not start from its checkpoints, and a running parent needs from_running=yes.
Through the signed HTTP front end (tests.bot.security.kit)."""

from __future__ import annotations

import pytest

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from cluster.watching.tracking import Tracking
from support.slack_standin import SlackStandin
from tests.bot.security.kit import Secure, secure_bot, seed

pytestmark = pytest.mark.devcluster

CHECKPOINT = "model_name=0--val_loss=0.00-step=19-consumed_samples=1280.0"


async def with_checkpoint(s: Secure, owner: str, phase: Phase) -> Launch:
    """A launch of ``owner`` on a4 that saved a complete checkpoint under a4's log dir."""
    launch = await seed(s.bot, owner=owner, phase=phase)

    def saved(stored: Launch) -> list[Event]:
        where = f"~/vertex-oss-training/nemo/logs/{stored.id}/default/checkpoints"
        tracking = Tracking(framework="nemo", job_id="990002", checkpoint_dir=where)
        stored.attempts = [Attempt(number=1, job_id="990002", tracking=tracking)]
        stored.checkpoints = [CHECKPOINT]
        return []

    stored, _ = await s.bot.store.launches.mutate(launch.id, saved)
    return stored


async def test_from_by_someone_who_may_only_read_the_parent_is_refused(
    standin: SlackStandin,
) -> None:
    async with secure_bot(standin) as s:
        bobs = await with_checkpoint(s, "U0BOB", Phase.DONE)
        line = f"sft llama3p1_8b cluster=a4 from={bobs.id}"
        viewer = await s.command("/train", line, user="U0TESS")  # a log viewer on a4
        admin = await s.command("/train", line, user="U0ADMIN")
        stranger = await s.command("/train", line, user="U0ALICE")
        own = await s.command("/train", line, user="U0BOB")
        for user in ("U0TESS", "U0ADMIN", "U0ALICE"):
            assert await s.bot.store.history.active_ids(user) == [], user
    refusal = f"from={bobs.id}: {bobs.id} is bob's: only its owner may start from its checkpoints"
    assert refusal in viewer and refusal in admin, (viewer, admin)
    assert "policy.start_from" in viewer and "/jobs lists them" in viewer
    assert "its logs are for its owner" in stranger, stranger  # may not even see it
    assert own.startswith("Queued L-") and f"starts from {bobs.id}'s newest" in own, own


async def test_a_running_parent_needs_from_running(standin: SlackStandin) -> None:
    async with secure_bot(standin) as s:
        mine = await with_checkpoint(s, "U0ALICE", Phase.RUNNING)
        line = f"sft llama3p1_8b cluster=a4 from={mine.id}"
        refused = await s.command("/train", line)
        assert len(await s.bot.store.history.active_ids("U0ALICE")) == 1  # the parent alone
        said = await s.command("/train", f"{line} from_running=yes")
        waits = await s.command("/train", f"{line} after={mine.id}")  # from its end
    assert f"from={mine.id}: {mine.id} is still running" in refused, refused
    assert "Give from_running=yes" in refused and "or wait until it ends" in refused
    assert said.startswith("Queued L-"), said
    assert waits.startswith("Queued L-"), waits
