"""On-call and admin groups: who may act on paged launches, and group changes. Through the
signed HTTP front end (tests.bot.security.kit)."""

from __future__ import annotations

import asyncio
import json

import pytest

from bot.lifecycle.launch import Phase
from bot.text.actions import ACTION_CANCEL, ACTION_RETRY
from support.slack_requests import event_envelope, post_signed
from support.slack_standin import SlackStandin
from tests.bot.security.kit import REFUSED_LOGS, secure_bot, seed

pytestmark = pytest.mark.devcluster


# -- on-call -------------------------------------------------------------------

# clicker, button, launch paged? -> allowed, text
ONCALL = [
    ("U0BOB", ACTION_CANCEL, True, True, "Cancelled"),
    ("U0BOB", ACTION_RETRY, True, True, "is not running"),  # past the check; nothing to retry
    ("U0BOB", ACTION_CANCEL, False, False, "Only alice"),  # never paged: not theirs
    ("U0MALLORY", ACTION_CANCEL, True, False, "Only alice"),
    ("U0ALICE", ACTION_CANCEL, False, True, "Cancelled"),
]


@pytest.mark.parametrize(("clicker", "action", "paged", "allowed", "says"), ONCALL)
async def test_oncall_acts_on_launches_that_paged_them(
    standin: SlackStandin, clicker: str, action: str, paged: bool, allowed: bool, says: str
) -> None:
    async with secure_bot(standin) as s:
        alerts = ("hang:L",) if paged else ()
        launch = await seed(s.bot, phase=Phase.QUEUED, open_alerts=alerts)
        said = await s.click(action, launch.id, user=clicker)
        stored = await s.bot.store.launches.get(launch.id)
    assert says in said, said
    assert stored is not None
    cancelled = action == ACTION_CANCEL and allowed
    assert (stored.outcome == "CANCELLED") is cancelled


async def test_removal_from_admin_group_takes_effect_on_group_event(
    standin: SlackStandin, log_file: str
) -> None:
    async with secure_bot(standin) as s:
        launch = await seed(s.bot, log_path=log_file)
        assert REFUSED_LOGS not in await s.command("/logs", launch.id, user="U0DAVE")
        standin.usergroups["S0ADMINS"] = []
        event = event_envelope({"type": "subteam_members_changed", "subteam_id": "S0ADMINS"})
        answer = await post_signed(s.url, json.dumps(event), content_type="application/json")
        assert answer.status == 200
        await asyncio.sleep(0.3)
        said = await s.command("/logs", launch.id, user="U0DAVE")
    assert REFUSED_LOGS in said


async def test_privileged_groups_are_cached_briefly_then_asked_again(
    standin: SlackStandin, log_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A removal from an admin group that Slack never announced takes effect once the
    privileged groups' cache runs out (20 s here made 1 s; the unprivileged groups' much
    longer one must not apply), and not before: Slack is asked once per expiry, not at
    every request."""
    from bot.core import directory

    assert directory.PRIVILEGED_GROUPS_TTL_S <= 30 < directory.GROUPS_TTL_S  # the defaults' bound
    monkeypatch.setattr(directory, "PRIVILEGED_GROUPS_TTL_S", 1.0)
    asked: list[str] = []
    async with secure_bot(standin) as s:
        front = s.bot.core.front
        assert front is not None
        members = front.usergroup_members

        async def counted(group: str) -> list[str]:
            asked.append(group)
            return list(await members(group))

        monkeypatch.setattr(front, "usergroup_members", counted)
        launch = await seed(s.bot, log_path=log_file)
        assert REFUSED_LOGS not in await s.command("/logs", launch.id, user="U0DAVE")
        standin.usergroups["S0ADMINS"] = []  # no subteam event: only the expiry can tell
        cached = await s.command("/logs", launch.id, user="U0DAVE")
        admins_asked = asked.count("S0ADMINS")
        await asyncio.sleep(1.3)
        expired = await s.command("/logs", launch.id, user="U0DAVE")
    assert REFUSED_LOGS not in cached, cached  # still within the cache's life
    assert admins_asked == 1, asked
    assert REFUSED_LOGS in expired, expired  # asked again, and the removal took effect
    assert asked.count("S0ADMINS") == 2, asked
