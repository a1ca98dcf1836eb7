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
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from pydantic import SecretStr

from bot.alerts import PagerDuty
from bot.config import Alerts
from bot.front import Front
from bot.launches import Launch
from bot.notifier import Notifier
from bot.paging import Pager
from bot.service import running
from bot.slack_front import SlackFront
from bot.store import Event, Store
from commands.requests import TrainRequest
from tests.bot.botkit import bot_settings, dev_config, flush_test_redis, open_test_store
from tests.slack_standin import Call, SlackStandin

OUT = "C0OUT"  # a channel the bot was never invited to
TRAIN = "C0TRAIN"
ONCALL = "C0ONCALL"


@pytest.fixture(autouse=True)
async def clean_redis() -> None:
    await flush_test_redis()


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with open_test_store() as opened:
        yield opened


def request() -> TrainRequest:
    return TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")


async def new_launch(
    store: Store, channel: str, *lines: str, user: str = "U0ALICE", parent_ts: str = ""
) -> Launch:
    """A launch in ``channel`` whose thread is to say ``lines`` (after its parent)."""
    launch = Launch(request=request(), user_id=user, channel=channel, parent_ts=parent_ts)
    events = [] if parent_ts else [Event("parent", launch.id)]
    events += [Event("thread", launch.id, line) for line in lines]
    await store.create(launch, events, enqueue=False)
    return launch


async def page(store: Store, launch: Launch, cause: str = "node dev1 failed") -> None:
    data = {"dedup_key": f"trainbot/a4/{launch.id}/node_fail", "cause_key": "node_fail"}
    data |= {"cause": cause, "action": "Retried."}
    await store.mutate(launch.id, lambda _: [Event("oncall", launch.id, data=data)])


@asynccontextmanager
async def notifying(notifier: Notifier) -> AsyncIterator[Notifier]:
    stop = asyncio.Event()
    task = asyncio.create_task(notifier.run(stop))
    try:
        yield notifier
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


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
    assert (await store.get(fine.id)).parent_ts  # type: ignore[union-attr]


async def test_what_keeps_failing_is_dead_lettered_logged_counted_and_its_owner_told(
    standin: SlackStandin, front: SlackFront, caplog: pytest.LogCaptureFixture
) -> None:
    from bot.doctor import delivery_text  # new here (as Retry): the other tests run on either
    from bot.notifier import Retry

    caplog.set_level(logging.INFO)
    standin.refuse_posts(OUT)
    async with running(bot_settings(), dev_config(), front) as bot:
        bot.notifier.retry = Retry(first_s=0.1, cap_s=0.3, max_tries=5)
        stuck = await new_launch(bot.store, OUT, "A: queued", "A: submitted")
        fine = await new_launch(bot.store, TRAIN, "B: queued")
        dm = await standin.wait_for(
            "chat.postMessage", lambda c: str(c.params["channel"]).startswith("D"), timeout_s=10
        )
        await wait_until(lambda: bot.notifier.dead_lettered == 3, "3 dead letters", 10)
        await asyncio.sleep(0.5)
        metrics = await bot.metrics()
    # The first event was tried max_tries times, waiting longer each time up to the cap.
    tries = [c.at for c in posted(standin, OUT, ok_only=False) if not c.params.get("thread_ts")]
    assert len(tries) >= 5
    gaps = [b - a for a, b in zip(tries[:5], tries[1:5], strict=False)]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2 and all(0.3 <= g < 1.0 for g in gaps[2:])
    assert gaps[1] > gaps[0] * 1.5
    # Later events of the same thread were not retried as long: the channel is known bad.
    assert len(posted(standin, OUT, ok_only=False)) <= 5 + 2 * 2
    assert thread(standin, TRAIN) == ["B: queued"]
    assert 'trainbot_dead_letters{source="notifier"} 3.0' in metrics
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
    assert len(dead) == 3 and all(stuck.id in m and "not_in_channel" in m for m in dead)
    assert not any(fine.id in m for m in dead)
    # The dead-letter list is in Redis: another process (an admin's) sees it.
    async with open_test_store() as other:
        letters = await other.dead_letters()
    assert [(d.event.kind, d.event.text) for d in letters] == [
        ("parent", ""),
        ("thread", "A: queued"),
        ("thread", "A: submitted"),
    ]
    assert all(d.launch_id == stuck.id and "not_in_channel" in d.reason for d in letters)
    assert letters[0].tries == 5 and letters[0].channel == OUT
    assert delivery_text(0, len(letters), letters) == (
        f"0 waiting; 3 dead letters in trainbot:notify:dead, newest: {stuck.id} thread "
        "in C0OUT: not_in_channel (1 try)"
    )


async def test_what_is_held_survives_a_restart_and_is_posted_once(
    store: Store, standin: SlackStandin, front: SlackFront
) -> None:
    standin.refuse_posts(OUT)
    stuck = await new_launch(store, OUT, "A: queued", "A: submitted")
    async with notifying(Notifier(store, front, {}, owner="first")) as first:
        await wait_until(lambda: posted(standin, OUT, ok_only=False), "a failed post", 5)
        await asyncio.sleep(0.2)
    assert not await first.drained()  # still owed, and kept in Redis, not in memory
    await store.mutate(stuck.id, lambda _: [Event("thread", stuck.id, "A: running")])
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
            if await notifier.drained() and await store.held_count() == 0:
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
