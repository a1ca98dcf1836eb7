"""Personal notifications end to end: signed slash commands and App Home clicks through
slack-bolt against the Slack stand-in, real Redis, launches on the dev cluster.

A DM comes for a completed launch to the person who asked for it, waits through their
quiet hours (then comes as one summary), comes at once for a failure when they said so;
a watcher gets DMs; someone who may not see a launch cannot watch it."""

from __future__ import annotations

import json
import time
import urllib.parse
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bot.console.chat import handle_line
from bot.text.actions import ACTION_PREFS
from commands.rules import ViewerRule
from support.slack_requests import block_action_payload, post_signed, slash_command_body
from support.slack_standin import SlackStandin
from tests.bot.botkit import (
    dev_config,
    in_dm,
    knobs,
    launch_id_in,
    wait_for_launch,
    wait_until,
)
from tests.bot.e2e.test_babysit_e2e import console_bot, train
from tests.bot.e2e.test_bot_slack_e2e import FAST, slack_bot

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]
PEOPLE = {"U0ALICE": "alice", "U0BOB": "bob", "U0CAROL": "carol"}


class Slack:
    """Signed requests as Slack sends them, from a given person."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def command(self, user: str, command: str, text: str) -> str:
        body = slash_command_body(command, text, user_id=user, user_name=PEOPLE[user])
        answer = await post_signed(self.url, body)
        assert answer.status == 200 and answer.elapsed_s < 3.0
        return str(answer.json()["text"])

    async def click(self, user: str, which: str, value: str) -> None:
        payload = block_action_payload(f"{ACTION_PREFS}_{which}", value, user_id=user)
        payload["container"] = {"type": "view", "view_id": "V0HOME"}  # the App Home tab
        del payload["channel"], payload["message"], payload["response_url"]
        answer = await post_signed(
            self.url, urllib.parse.urlencode({"payload": json.dumps(payload)})
        )
        assert answer.status == 200


def dms_to(standin: SlackStandin, user: str) -> list[Any]:
    return [
        c
        for c in standin.calls_to("chat.postMessage")
        if in_dm(c.params) and c.params["channel"] == f"D{user}"
    ]


def thread_line(standin: SlackStandin, needle: str) -> Any:
    found = [
        c
        for c in standin.calls_to("chat.postMessage")
        if c.params.get("thread_ts") and needle in str(c.params.get("text"))
    ]
    every = [c.params.get("text") for c in standin.calls_to("chat.postMessage")]
    assert len(found) == 1, (needle, every)
    return found[0]


def home_of(standin: SlackStandin, user: str) -> str:
    views = [c for c in standin.calls_to("views.publish") if c.params.get("user_id") == user]
    assert views, f"no App Home published for {user}"
    view = views[-1].params["view"]
    return json.dumps(view if isinstance(view, dict) else json.loads(view), ensure_ascii=False)


async def test_a_watcher_gets_dms_and_someone_who_may_not_see_a_launch_cannot_watch(
    standin: SlackStandin, unique: str
) -> None:
    config = dev_config()
    policy = config.policy.model_copy(update={"log_viewers": (ViewerRule(users=("U0BOB",)),)})
    config = config.model_copy(update={"policy": policy})
    async with knobs(unique, **FAST), slack_bot(standin, config=config) as (bot, slack):
        s = Slack(f"http://127.0.0.1:{slack.http_port}/slack/events")
        # Alice asks for no DMs about her own launches: the thread's mention is enough.
        for event in ("finish", "failure", "hang"):
            await s.click("U0ALICE", f"dm_{event}", f"dm:{event}:off")
        # Bob wants each checkpoint too.
        await s.click("U0BOB", "dm_checkpoint", "dm:checkpoint:on")
        await wait_until(
            lambda: _settled(bot, "U0BOB", "checkpoint"), "bob's setting to be kept", 10
        )
        await wait_until(  # the tab shows it at once
            lambda: _home_has(standin, "U0BOB", "✓ each checkpoint"), "bob's App Home", 10
        )
        ack = await s.command(
            "U0ALICE", "/train", f"sft llama3p1_8b nodes=1 cluster=a4 name={unique}"
        )
        launch_id = launch_id_in(ack)

        refused = await s.command("U0CAROL", "/watch", launch_id)
        assert "That launch belongs to someone else: its logs are for its owner" in refused
        assert await bot.store.people.watchers(launch_id) == []
        watching = await s.command("U0BOB", "/watch", launch_id)
        assert watching.startswith(f"Watching {launch_id} (sft llama3p1_8b on a4, <@U0ALICE>'s)")
        assert "each checkpoint, finish, failure and hang by DM" in watching, watching
        listed = await s.command("U0BOB", "/jobs", "watching")
        assert listed.startswith("Launches you watch (1):") and launch_id in listed, listed
        assert "You watch no launches" in await s.command("U0CAROL", "/jobs", "watching")

        launch = await wait_for_launch(bot.store, launch_id)
        assert launch.outcome == "COMPLETED"
        await wait_until(lambda: _dm_count(standin, "U0BOB", "COMPLETED"), "bob's last DM", 30)

    final = thread_line(standin, "✅ COMPLETED in")
    assert final.params["text"].startswith("<@U0ALICE> ✅ COMPLETED in")
    posts = standin.calls_to("chat.postMessage")
    saved = {
        str(c.params["text"]): c
        for c in posts
        if c.params.get("thread_ts") and "Checkpoint" in str(c.params["text"])
    }
    assert saved and all(t.startswith("💾 Checkpoint") for t in saved)  # they never ping
    bob = dms_to(standin, "U0BOB")
    texts = [str(c.params["text"]) for c in bob]
    # The checkpoints saved after Bob began watching (the first may have been before).
    ckpt_dms = [c for c in bob if "💾 Checkpoint" in str(c.params["text"])]
    assert ckpt_dms, texts
    for dm in ckpt_dms:
        line = str(dm.params["text"]).split(": ", 1)[1].split(" · <", 1)[0]
        assert saved[line].at < dm.at, (line, texts)
    done = [c for c in bob if "✅ COMPLETED in" in str(c.params["text"])]
    assert len(done) == 1 and done[0].at > final.at  # never ahead of the thread
    assert "|thread>" in str(done[0].params["text"]) and launch_id in str(done[0].params["text"])
    assert dms_to(standin, "U0ALICE") == []  # she asked for none
    assert dms_to(standin, "U0CAROL") == []


async def _home_has(standin: SlackStandin, user: str, text: str) -> bool:
    views = [c for c in standin.calls_to("views.publish") if c.params.get("user_id") == user]
    return bool(views) and text in home_of(standin, user)


async def _settled(bot: Any, user: str, event: str) -> bool:
    return event in (await bot.store.people.prefs(user)).dm


async def _dm_count(standin: SlackStandin, user: str, needle: str) -> int:
    return sum(needle in str(c.params["text"]) for c in dms_to(standin, user))


async def test_quiet_hours_hold_a_dm_but_a_failure_breaks_through(
    standin: SlackStandin, unique: str
) -> None:
    standin.timezones["U0ALICE"] = "Asia/Kolkata"
    hour = datetime.now(ZoneInfo("Asia/Kolkata")).hour
    ok, bad = f"{unique}ok", f"{unique}oom"
    async with (
        knobs(ok, **FAST),
        knobs(bad, **FAST, fault="oom", fault_at_step=1),
        slack_bot(standin) as (bot, slack),
    ):
        s = Slack(f"http://127.0.0.1:{slack.http_port}/slack/events")
        # Quiet hours from this hour for two hours, in her zone; failures break through.
        await s.click("U0ALICE", "start", f"start:{hour}")
        await s.click("U0ALICE", "end", f"end:{(hour + 2) % 24}")
        await s.click("U0ALICE", "quiet", "quiet:on")
        await wait_until(lambda: _quiet(bot), "the quiet hours to be kept", 10)
        prefs = await bot.store.people.prefs("U0ALICE")
        assert prefs.tz == "Asia/Kolkata" and prefs.break_through
        shown = f"Quiet hours {hour:02d}:00-"
        await wait_until(lambda: _home_has(standin, "U0ALICE", shown), "alice's App Home", 10)

        acks = [
            await s.command("U0ALICE", "/train", f"sft llama3p1_8b nodes=1 cluster=a4 name={n}")
            for n in (ok, bad)
        ]
        good_id, bad_id = (launch_id_in(a) for a in acks)
        good = await wait_for_launch(bot.store, good_id)
        failed = await wait_for_launch(bot.store, bad_id)
        assert (good.outcome, failed.outcome) == ("COMPLETED", "FAILED")
        # The failure's DM comes at once, in quiet hours; the completion's waits.
        await wait_until(lambda: _dm_count(standin, "U0ALICE", bad_id), "the failure's DM", 30)
        held = await wait_until(lambda: _held(bot), "the completion's DM to be held", 30)
        assert _at_end_of_quiet(held, hour)
        assert not any(good_id in str(c.params["text"]) for c in dms_to(standin, "U0ALICE"))
        [failure_dm] = dms_to(standin, "U0ALICE")
        assert "❌ FAILED" in failure_dm.params["text"] and "|thread>" in failure_dm.params["text"]
        assert failure_dm.at > thread_line(standin, "❌ FAILED").at

        # She turns quiet hours off: what waited arrives, once.
        await s.click("U0ALICE", "quiet", "quiet:off")
        await wait_until(lambda: _dm_count(standin, "U0ALICE", good_id), "the held DM", 30)
    later = [c for c in dms_to(standin, "U0ALICE") if good_id in str(c.params["text"])]
    assert len(later) == 1 and "✅ COMPLETED in" in later[0].params["text"]
    assert later[0].params["text"].startswith("sft llama3p1_8b on a4 (")


async def _quiet(bot: Any) -> bool:
    return bool((await bot.store.people.prefs("U0ALICE")).quiet)


async def _held(bot: Any) -> float:
    """When Alice's DM lane is next tried (0: not waiting)."""
    score = await bot.store.redis.zscore("trainbot:notify:lanes", "dm:U0ALICE")
    return float(score or 0)


def _at_end_of_quiet(when: float, start_hour: int) -> bool:
    local = datetime.fromtimestamp(when, ZoneInfo("Asia/Kolkata"))
    return (local.hour, local.minute) == ((start_hour + 2) % 24, 0) and when > time.time()


async def test_the_console_has_the_same_commands_and_prints_the_dm(unique: str) -> None:
    async with knobs(unique, **FAST), console_bot() as (bot, front):
        launch_id = await train(bot, front, f"sft llama3p1_8b nodes=1 cluster=a4 name={unique}")
        own = await handle_line(f"/watch {launch_id}", bot.core, front, user="alice")
        assert own is not None and own.text.startswith(f"{launch_id} is your own launch")
        other = await handle_line(f"/watch {launch_id}", bot.core, front, user="bob")
        assert other is not None and other.error
        assert "That launch belongs to someone else" in other.text
        none = await handle_line("/jobs watching", bot.core, front, user="bob")
        assert none is not None and none.text.startswith("You watch no launches")
        await wait_for_launch(bot.store, launch_id)
        await wait_until(lambda: _said(front, "(to @alice)"), "alice's DM in the console", 30)
    lines = front.lines
    final = next(i for i, line in enumerate(lines) if "@alice ✅ COMPLETED in" in line)
    dm = next(i for i, line in enumerate(lines) if line.startswith("(to @alice)"))
    assert final < dm and launch_id in lines[dm] and "COMPLETED" in lines[dm], lines[final:]


async def _said(front: Any, start: str) -> bool:
    return any(line.startswith(start) for line in front.lines)
