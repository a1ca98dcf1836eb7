"""The notifier against real Redis and slack_sdk at the Web API stand-in: one bad
thread never holds back the others, what keeps failing is dead-lettered (and
its owner told), pages reach PagerDuty and Slack as separate steps, and what
is held survives a restart."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields
from typing import Any

import pytest
from aiohttp import web
from pydantic import SecretStr

from bot.lifecycle import phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.notify.alerts import PagerDuty
from bot.notify.lane_rules import Retry
from bot.notify.notifier import Notifier
from bot.notify.paging import Pager
from bot.runtime.assembly import running
from bot.settings.sections import Alerts
from bot.slack.webapi import SlackFront
from bot.store import keys
from bot.store.store import Store
from bot.text.front import Front
from support.slack_standin import Call, SlackStandin
from tests.bot.botkit import (
    bot_settings,
    dev_config,
    launch_in,
    notifying,
    open_test_store,
    request,
    stream_entries,
)

OUT = "C0OUT"  # a channel the bot was never invited to
TRAIN = "C0TRAIN"
ONCALL = "C0ONCALL"


pytestmark = pytest.mark.usefixtures("clean_redis")


async def new_launch(
    store: Store, channel: str, *lines: str, user: str = "U0ALICE", parent_ts: str = ""
) -> Launch:
    """A launch in ``channel`` whose thread is to say ``lines`` (after its parent)."""
    launch = Launch(request=request(), user_id=user, channel=channel, parent_ts=parent_ts)
    events = [] if parent_ts else [Event("parent", launch.id)]
    events += [Event("thread", launch.id, line) for line in lines]
    await store.launches.create(launch, events, enqueue=False)
    return launch


async def page(store: Store, launch: Launch, cause: str = "node dev1 failed") -> None:
    data = {"dedup_key": f"trainbot/a4/{launch.id}/node_fail", "cause_key": "node_fail"}
    data |= {"cause": cause, "action": "Retried."}
    await store.launches.mutate(launch.id, lambda _: [Event("oncall", launch.id, data=data)])


def posted(standin: SlackStandin, channel: str, *, ok_only: bool = True) -> list[Call]:
    return [
        c
        for c in standin.calls_to("chat.postMessage", ok_only=ok_only)
        if c.params.get("channel") == channel
    ]


def thread(standin: SlackStandin, channel: str) -> list[str]:
    return [str(c.params["text"]) for c in posted(standin, channel) if c.params.get("thread_ts")]


async def wait_until(check: Any, what: str, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.05)


async def test_a_thread_that_cannot_be_posted_holds_back_only_its_own_launch(
    store: Store, standin: SlackStandin, front: SlackFront
) -> None:
    standin.refuse_posts(OUT)
    stuck = await new_launch(store, OUT, "A: queued", "A: pre-flight ok")
    await page(store, stuck)
    fine = await new_launch(store, TRAIN, "B: queued", "B: pre-flight ok", "B: submitted")
    pager = Pager(front, Alerts(oncall_channel=ONCALL))
    async with notifying(Notifier(store, front, {}, owner="n1", pager=pager)):
        last = await standin.wait_for(
            "chat.postMessage", lambda c: c.params["text"] == "B: submitted"
        )
        paged = await standin.wait_for("chat.postMessage", lambda c: c.params["channel"] == ONCALL)
        # Neither waited for the stuck thread's retry (2 s after its first try).
        first_try = posted(standin, OUT, ok_only=False)[0]
        assert max(last.at, paged.at) < first_try.at + 2.0
        assert thread(standin, TRAIN) == ["B: queued", "B: pre-flight ok", "B: submitted"]
        assert posted(standin, OUT) == [] and posted(standin, OUT, ok_only=False)
        assert stuck.id in str(posted(standin, ONCALL)[0].params["text"])

        standin.accept_posts(OUT)  # someone invited the bot: the stuck thread goes on, in order
        await standin.wait_for(
            "chat.postMessage", lambda c: c.params["text"] == "A: pre-flight ok", timeout_s=15
        )
    assert thread(standin, OUT)[:2] == ["A: queued", "A: pre-flight ok"]  # then: paged
    assert len([c for c in posted(standin, OUT) if not c.params.get("thread_ts")]) == 1
    assert len(posted(standin, ONCALL)) == 1
    assert (await launch_in(store, fine.id)).parent_ts


async def test_what_keeps_failing_is_dead_lettered_logged_counted_and_its_owner_told(
    standin: SlackStandin, front: SlackFront, caplog: pytest.LogCaptureFixture
) -> None:
    from bot.runtime.doctor import (
        delivery_text,
    )  # new here (as Retry): the other tests run on either

    caplog.set_level(logging.INFO)
    standin.refuse_posts(OUT)
    async with running(bot_settings(), dev_config(), front) as bot:
        bot.notifier.retry = Retry(first_s=0.1, cap_s=0.3, max_tries=5, dead_cap_s=0.6)
        stuck = await new_launch(bot.store, OUT, "A: queued", "A: submitted")
        fine = await new_launch(bot.store, TRAIN, "B: queued")
        dm = await standin.wait_for(
            "chat.postMessage", lambda c: str(c.params["channel"]).startswith("D"), timeout_s=10
        )
        await wait_until(lambda: bot.notifier.dead_lettered == 1, "a dead letter", 10)
        await asyncio.sleep(2.0)
        metrics = await bot.metrics()
        healthy, detail = await bot.healthy()
    # The first event was tried max_tries times, waiting longer each time up to the cap,
    # then (a dead letter) on, less often, up to dead_cap_s.
    tries = [c.at for c in posted(standin, OUT, ok_only=False) if not c.params.get("thread_ts")]
    assert len(tries) >= 7
    gaps = [b - a for a, b in zip(tries, tries[1:], strict=False)]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2 and all(0.3 <= g < 1.0 for g in gaps[2:4])
    assert gaps[1] > gaps[0] * 1.5
    assert all(0.6 <= g < 2.0 for g in gaps[5:])
    # The later events of the thread wait behind it, in order: none was tried yet.
    assert all(not c.params.get("thread_ts") for c in posted(standin, OUT, ok_only=False))
    assert bot.notifier.dead_lettered == 1 and bot.notifier.given_up == 0
    assert thread(standin, TRAIN) == ["B: queued"]
    assert 'trainbot_dead_letters{source="notifier"} 1.0' in metrics
    assert 'trainbot_dead_letters{source="notifier_retrying"} 1.0' in metrics
    assert 'trainbot_dead_letters{source="notifier_given_up"} 0.0' in metrics
    assert healthy and "1 dead letter retried" in detail and stuck.id in detail
    # One DM to the owner (conversations.open + chat.postMessage), saying what to do.
    assert [c.params["users"] for c in standin.calls_to("conversations.open")] == ["U0ALICE"]
    assert (
        len([c for c in standin.calls_to("chat.postMessage") if c.params["channel"][0] == "D"]) == 1
    )
    text = str(dm.params["text"])
    assert f"<#{OUT}>" in text and stuck.id in text and "/invite" in text
    assert "not_in_channel" in text
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    dead = [r.getMessage() for r in warnings if "dead letter" in r.getMessage()]
    assert len(dead) == 1 and all(stuck.id in m and "not_in_channel" in m for m in dead)
    assert not any(fine.id in m for m in dead)
    # The dead-letter list is in Redis: another process (an admin's) sees it.
    async with open_test_store() as other:
        letters = await other.lanes.dead_letters()
        retrying = await other.lanes.retrying_letters()
    assert [(d.event.kind, d.event.text) for d in letters] == [("parent", "")]
    assert [d.event.id for d in retrying] == [letters[0].event.id]
    assert all(d.launch_id == stuck.id and "not_in_channel" in d.reason for d in letters)
    assert letters[0].tries == 5 and letters[0].channel == OUT
    assert delivery_text(3, len(letters), letters) == (
        f"3 waiting; 1 dead letter in trainbot:notify:dead, newest: {stuck.id} parent "
        "in C0OUT: not_in_channel (5 tries)"
    )


async def test_a_dead_letter_is_given_up_only_after_its_time_with_the_rest_of_its_lane(
    store: Store, standin: SlackStandin, front: SlackFront
) -> None:
    standin.refuse_posts(OUT)
    stuck = await new_launch(store, OUT, "A: queued", "A: submitted")
    notifier = Notifier(store, front, {}, owner="n1")
    notifier.retry = Retry(first_s=0.05, cap_s=0.1, max_tries=3, dead_cap_s=0.2, give_up_after_s=2)
    async with notifying(notifier):
        await wait_until(lambda: notifier.dead_lettered == 1, "a dead letter", 5)
        assert await store.lanes.retrying_count() == 1 and await store.lanes.given_up_count() == 0
        started = asyncio.get_running_loop().time()
        await wait_until(lambda: notifier.given_up == 3, "given up", 10)
        assert asyncio.get_running_loop().time() - started > 1.0
        await asyncio.sleep(0.3)
        assert await notifier.drained()
    given = await store.lanes.given_up()
    assert [(d.event.kind, d.event.text) for d in given] == [
        ("parent", ""),
        ("thread", "A: queued"),
        ("thread", "A: submitted"),
    ]
    assert all(d.launch_id == stuck.id and d.reason == "not_in_channel" for d in given)
    assert await store.lanes.retrying_count() == 0 and posted(standin, OUT) == []


async def test_what_is_held_survives_a_restart_and_is_posted_once(
    store: Store, standin: SlackStandin, front: SlackFront
) -> None:
    standin.refuse_posts(OUT)
    stuck = await new_launch(store, OUT, "A: queued", "A: submitted")
    async with notifying(Notifier(store, front, {}, owner="first")) as first:
        await wait_until(lambda: posted(standin, OUT, ok_only=False), "a failed post", 5)
        await asyncio.sleep(0.2)
    assert not await first.drained()  # still owed, and kept in Redis, not in memory
    await store.launches.mutate(stuck.id, lambda _: [Event("thread", stuck.id, "A: running")])
    standin.accept_posts(OUT)
    async with open_test_store() as restarted:
        second = Notifier(restarted, front, {}, owner="second")
        async with notifying(second):
            await standin.wait_for(
                "chat.postMessage", lambda c: c.params["text"] == "A: running", timeout_s=10
            )
            await asyncio.sleep(0.3)
        assert await second.drained()
    assert thread(standin, OUT) == ["A: queued", "A: submitted", "A: running"]
    assert len(posted(standin, OUT)) == 4  # the parent once, then its thread


# -- pages: Slack and PagerDuty are separate steps ---------------------------


@dataclass
class Receiver:
    """A PagerDuty Events API v2 endpoint answering ``statuses`` in turn, then 202."""

    statuses: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    async def enqueue(self, request: web.Request) -> web.Response:
        self.events.append(json.loads(await request.text()))
        status = self.statuses.pop(0) if self.statuses else 202
        return web.json_response({"status": "x", "message": "x"}, status=status)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    state = Receiver()
    app = web.Application()
    app.router.add_post("/v2/enqueue", state.enqueue)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v2/enqueue"
    try:
        yield state
    finally:
        await runner.cleanup()


@asynccontextmanager
async def paging_notifier(
    store: Store, front: Front, receiver: Receiver
) -> AsyncIterator[Notifier]:
    async with PagerDuty(receiver.url, SecretStr("routing-key"), max_attempts=1) as pagerduty:
        pager = Pager(front, Alerts(oncall_channel=ONCALL), pagerduty)
        async with notifying(Notifier(store, front, {}, owner="n1", pager=pager)) as notifier:
            yield notifier


async def test_pagerduty_is_paged_while_slack_is_down(
    store: Store, standin: SlackStandin, front: SlackFront, receiver: Receiver
) -> None:
    launch = await new_launch(store, TRAIN, parent_ts="1700000000.000001")
    standin.fail_next("chat.postMessage", 1000, status=503)
    standin.fail_next("chat.getPermalink", 1000, status=503)
    await page(store, launch)
    async with paging_notifier(store, front, receiver):
        await wait_until(lambda: receiver.events, "a PagerDuty trigger", 5)
        standin.fail_next("chat.postMessage", 0)  # Slack is back
        await standin.wait_for(
            "chat.postMessage", lambda c: c.params["channel"] == ONCALL, timeout_s=15
        )
        await asyncio.sleep(0.5)
    assert [e["event_action"] for e in receiver.events] == ["trigger"]  # not paged twice
    assert receiver.events[0]["dedup_key"] == f"trainbot/a4/{launch.id}/node_fail"
    assert len(posted(standin, ONCALL)) == 1


async def test_a_pagerduty_failure_does_not_repeat_the_slack_page(
    store: Store, standin: SlackStandin, front: SlackFront, receiver: Receiver
) -> None:
    launch = await new_launch(store, TRAIN, parent_ts="1700000000.000001")
    receiver.statuses = [500, 500]
    await page(store, launch)
    async with paging_notifier(store, front, receiver) as notifier:
        await wait_until(lambda: len(receiver.events) == 3, "PagerDuty tried 3 times", 15)
        await asyncio.sleep(0.5)
        assert await notifier.drained()
    assert len(posted(standin, ONCALL)) == 1
    text = str(posted(standin, ONCALL)[0].params["text"])
    assert launch.id in text and "https://standin.slack.com/archives/C0TRAIN/" in text


@pytest.mark.parametrize("configured", [True, False])
async def test_the_thread_says_on_call_was_paged_only_when_a_page_went_out(
    store: Store, standin: SlackStandin, front: SlackFront, configured: bool
) -> None:
    launch = await new_launch(store, TRAIN, "⚠️ Job 7 failed.", parent_ts="1700000000.000001")
    await page(store, launch)
    pager = Pager(front, Alerts(oncall_channel=ONCALL if configured else None))
    async with notifying(Notifier(store, front, {}, owner="n1", pager=pager)) as notifier:
        if configured:
            await standin.wait_for(
                "chat.postMessage", lambda c: "On-call was paged" in str(c.params.get("text"))
            )
        for _ in range(100):  # everything delivered: the outbox and every lane empty
            if await notifier.drained() and await store.lanes.held_count() == 0:
                break
            await asyncio.sleep(0.05)
    said = thread(standin, TRAIN)
    told = [line for line in said if line.startswith("📟 On-call was paged")]
    if configured:
        assert told == ["📟 On-call was paged in the on-call channel."], said
        assert said.index(told[0]) > said.index("⚠️ Job 7 failed.")  # after its cause
        assert len(posted(standin, ONCALL)) == 1
    else:
        assert told == [] and posted(standin, ONCALL) == []


# -- an outage of hours, time compressed -----------------------------------------

HOUR_S = 3600.0
COMPRESSION = 1000.0  # every wait of the retry schedule, and the outage, this much shorter


def compressed(retry: Retry) -> Retry:
    """The default schedule with every duration (a ``*_s`` field) divided by COMPRESSION."""
    values = {
        f.name: getattr(retry, f.name) / COMPRESSION
        if f.name.endswith("_s")
        else getattr(retry, f.name)
        for f in fields(retry)
    }
    return Retry(**values)


async def test_pages_and_final_messages_survive_an_hour_of_slack_and_pagerduty_down(
    store: Store, standin: SlackStandin, front: SlackFront, receiver: Receiver
) -> None:
    launch = await new_launch(store, TRAIN, parent_ts="1700000000.000001")
    for method in ("chat.postMessage", "chat.getPermalink"):
        standin.fail_next(method, 10**6, status=503)
    receiver.statuses = [500] * 10**6
    lines = ["1: running", "2: node dev1 failed; retrying", "3: COMPLETED in 2 h"]
    await store.launches.mutate(launch.id, lambda _: [Event("thread", launch.id, lines[0])])
    await page(store, launch)
    await store.launches.mutate(launch.id, lambda _: [Event("thread", launch.id, lines[1])])
    resolve = {"dedup_key": f"trainbot/a4/{launch.id}/node_fail", "outcome": "COMPLETED"}
    await store.launches.mutate(
        launch.id,
        lambda _: [Event("resolve", launch.id, data=resolve), Event("thread", launch.id, lines[2])],
    )
    async with PagerDuty(receiver.url, SecretStr("routing-key"), max_attempts=1) as pagerduty:
        pager = Pager(front, Alerts(oncall_channel=ONCALL), pagerduty)
        notifier = Notifier(store, front, {}, owner="n1", pager=pager)
        notifier.retry = compressed(Retry())
        async with notifying(notifier):
            await asyncio.sleep(HOUR_S / COMPRESSION)  # an hour of nothing getting through
            assert thread(standin, TRAIN) == [] and len(receiver.events) > 3
            assert notifier.dead_lettered >= 1  # and surfaced as such, still retried
            assert (
                await store.lanes.retrying_count() >= 1 and await store.lanes.given_up_count() == 0
            )
            for method in ("chat.postMessage", "chat.getPermalink"):
                standin.fail_next(method, 0)  # both are back
            tried = len(receiver.events)
            receiver.statuses.clear()
            await wait_until(lambda: len(thread(standin, TRAIN)) >= 4, "the thread", 30)
            await wait_until(lambda: len(receiver.events) >= tried + 2, "PagerDuty", 30)
            await asyncio.sleep(0.5)
            assert await notifier.drained()
    said = thread(standin, TRAIN)
    assert said[:3] == lines and len(said) == 4 and said[3].startswith("📟 On-call was paged")
    assert [e["event_action"] for e in receiver.events[tried:]] == ["trigger", "resolve"]
    oncall = [str(c.params["text"]) for c in posted(standin, ONCALL)]
    assert len(oncall) == 2 and all(launch.id in text for text in oncall)
    assert "node dev1 failed" in oncall[0] and oncall[1].startswith("✅ Resolved")
    assert await store.lanes.retrying_count() == 0 and await store.lanes.given_up_count() == 0


async def test_a_watcher_who_may_no_longer_see_the_launch_gets_no_dm(store: Store) -> None:
    """/watch is asked again when it acts: the owner and a watcher who may still see the
    launch get their DM; one who may not any more (left the log viewers' group) none."""
    launch = Launch(request=request(), user_id="U0BOB", channel="C1", permalink="https://p/1")
    await store.launches.create(launch, [], enqueue=False)
    for watcher in ("U0TESS", "U0GONE"):
        await store.people.watch(launch.id, watcher)
    notifier = Notifier(store, SlackFront.__new__(SlackFront), {}, owner="n1")
    asked: list[str] = []

    async def may_see(user_id: str, seen: Launch) -> bool:
        asked.append(user_id)
        return user_id != "U0GONE"

    notifier.may_see = may_see
    line = Event("thread", launch.id, "❌ FAILED", data={"notices": ["failed"]})
    await notifier._write_dms(line)
    entries = await stream_entries(store.redis)
    dms = [Event.decode(i, f) for i, f in entries]
    to = sorted(str(e.data["user"]) for e in dms if e.kind == "dm")
    assert to == ["U0BOB", "U0TESS"], to
    assert sorted(asked) == ["U0GONE", "U0TESS"]  # the owner is not asked


# -- entries of both ages: text written before events carried facts, and facts ------------


async def test_an_old_entry_with_text_and_a_new_one_with_facts_both_post_in_order(
    store: Store, standin: SlackStandin, front: SlackFront
) -> None:
    """An outbox entry written by a version whose moves worded their lines (its text, the
    move in its data) is posted as it is; a line written now holds only the move's facts
    and is posted in bot.wording's words, mention and DM included, after it in order."""
    launch = await new_launch(store, TRAIN)
    old = {"move": "running", "job": "41"}
    await store.redis.xadd(  # as an older trainbot wrote it, straight into the outbox
        keys.OUTBOX,
        {
            "kind": "thread",
            "launch": launch.id,
            "text": "Running on dev[9].",
            "data": json.dumps(old),
        },
    )

    def requeued_then_cancelled(stored: Launch) -> list[Event]:
        _, said = phases.cancel(stored, phases.Facts(now=3.0, by="U0BOB"))
        return [Event("thread", stored.id, data={"move": "requeued", "job": "41"}), *said]

    _, events = await store.launches.mutate(launch.id, requeued_then_cancelled)
    lines = [e for e in events if e.kind == "thread"]
    assert [e.text for e in lines] == ["", ""]  # facts, no words
    assert lines[1].data == {
        "move": "cancel", "by": "U0BOB", "notices": ["cancelled"], "mention": True
    }  # fmt: skip
    async with notifying(Notifier(store, front, {}, owner="n1")) as notifier:
        await standin.wait_for(
            "chat.postMessage", lambda c: "Cancelled by" in str(c.params["text"]), timeout_s=10
        )
        await wait_until(lambda: notifier.delivered >= 4, "the DM after the last line", 10)
    assert thread(standin, TRAIN) == [
        "Running on dev[9].",
        "Job 41 is pending again (requeued).",
        "<@U0ALICE> 🚫 Cancelled by <@U0BOB>.",  # cancelled by someone else: the owner is told
    ]
    dms = [str(c.params["text"]) for c in posted(standin, "DU0ALICE")]
    assert len(dms) == 1 and f"(`{launch.id}`): 🚫 Cancelled by <@U0BOB>." in dms[0], dms
