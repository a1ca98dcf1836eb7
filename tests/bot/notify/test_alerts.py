"""On-call messages (table tests) and the PagerDuty client against a local receiver."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from pydantic import SecretStr

from bot.lifecycle.events import dedup_key
from bot.notify.alerts import AlertError, PagerDuty, oncall_text, resolved_text

ROUTING_KEY = "R0UTINGKEYSECRET0123456789abcdef"
LINK = "https://example.slack.com/archives/C0ONCALL/p1700000000000100?thread_ts=1.2&cid=C1"


# ---------------------------------------------------------------------------
# Message builders

BASE: dict[str, str] = {
    "usergroup_id": "S0ONCALL",
    "job_id": "4187",
    "launch_id": "L-7f3a",
    "title": "sft llama3p1_8b",
    "user_id": "U123",
    "cluster": "a4",
    "cause": "node dev1 failed (NODE_FAIL)",
    "action": "Retried without it as job 4192",
    "permalink": "https://example.slack.com/archives/C1/p1",
}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {},
            "<!subteam^S0ONCALL> job 4187 (L-7f3a: sft llama3p1_8b, <@U123>) on a4: node dev1 "
            "failed (NODE_FAIL). Retried without it as job 4192. "
            "Thread: <https://example.slack.com/archives/C1/p1|thread>",
        ),
        (
            {"usergroup_id": "", "action": "", "permalink": ""},
            "job 4187 (L-7f3a: sft llama3p1_8b, <@U123>) on a4: node dev1 failed (NODE_FAIL).",
        ),
        (
            {"job_id": "", "user_id": "", "cause": "pre-flight failed."},
            "<!subteam^S0ONCALL> launch L-7f3a (sft llama3p1_8b) on a4: pre-flight failed. "
            "Retried without it as job 4192. "
            "Thread: <https://example.slack.com/archives/C1/p1|thread>",
        ),
        (
            {"title": "<!channel> & co", "usergroup_id": "", "action": "", "permalink": ""},
            "job 4187 (L-7f3a: &lt;!channel&gt; &amp; co, <@U123>) on a4: node dev1 failed "
            "(NODE_FAIL).",
        ),
        (  # ids that are not Slack ids are shown, not turned into mentions
            {"usergroup_id": "S1> <!channel", "user_id": "U1> <!here", "permalink": ""},
            "job 4187 (L-7f3a: sft llama3p1_8b, U1&gt; &lt;!here) on a4: node dev1 failed "
            "(NODE_FAIL). Retried without it as job 4192.",
        ),
        (  # a permalink that would break out of the link is left out
            {"permalink": "https://x/y|<!channel>", "action": ""},
            "<!subteam^S0ONCALL> job 4187 (L-7f3a: sft llama3p1_8b, <@U123>) on a4: node dev1 "
            "failed (NODE_FAIL).",
        ),
        (
            {"cluster": "<!everyone>", "cause": "", "action": "", "permalink": ""},
            "<!subteam^S0ONCALL> job 4187 (L-7f3a: sft llama3p1_8b, <@U123>) on "
            "&lt;!everyone&gt;: needs attention.",
        ),
    ],
)
def test_oncall_text(changes: dict[str, str], expected: str) -> None:
    assert oncall_text(**{**BASE, **changes}) == expected


def test_oncall_text_escapes_ampersand_in_permalink() -> None:
    text = oncall_text(**{**BASE, "permalink": LINK})
    assert text.endswith("?thread_ts=1.2&amp;cid=C1|thread>")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {"outcome": "recovered as job 4192"},
            "✅ Resolved: job 4187 (L-7f3a: sft llama3p1_8b) on a4: recovered as job 4192. "
            "Thread: <https://example.slack.com/archives/C1/p1|thread>",
        ),
        (
            {"outcome": "completed", "permalink": ""},
            "✅ Resolved: job 4187 (L-7f3a: sft llama3p1_8b) on a4: completed.",
        ),
        (
            {"title": "<!channel>", "outcome": "", "permalink": ""},
            "✅ Resolved: job 4187 (L-7f3a: &lt;!channel&gt;) on a4: resolved.",
        ),
    ],
)
def test_resolved_text(kwargs: dict[str, str], expected: str) -> None:
    base = {k: BASE[k] for k in ("job_id", "launch_id", "title", "cluster", "permalink")}
    assert resolved_text(**{**base, **kwargs}) == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("a4", "L-7f3a", "node_fail"), "trainbot/a4/L-7f3a/node_fail"),
        (("a4", "L-7f3a", "NODE_FAIL"), "trainbot/a4/L-7f3a/node_fail"),
        (("a4", "L-7f3a", "oom: rank 3"), "trainbot/a4/L-7f3a/oom_rank_3"),
        (("a/4", "L 7f3a", ""), "trainbot/a_4/L_7f3a/-"),
    ],
)
def test_dedup_key(args: tuple[str, str, str], expected: str) -> None:
    assert dedup_key(*args) == expected


def test_dedup_key_is_bounded_and_distinct() -> None:
    long_a = dedup_key("a4", "L-1", "x" * 400)
    long_b = dedup_key("a4", "L-1", "x" * 399 + "y")
    assert len(long_a) <= 255 and len(long_b) <= 255
    assert long_a != long_b
    assert dedup_key("a4", "L-1", "nf") != dedup_key("a4", "L-2", "nf")


# ---------------------------------------------------------------------------
# PagerDuty client against a local Events API v2 receiver


@dataclass
class Receiver:
    """Answers the queued (status, headers, body) replies in turn, then 202."""

    replies: list[tuple[int, dict[str, str], str]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)
    url: str = ""

    async def enqueue(self, request: web.Request) -> web.Response:
        self.content_types.append(request.content_type)
        self.events.append(json.loads(await request.text()))
        if self.replies:
            status, headers, body = self.replies.pop(0)
            return web.Response(status=status, headers=headers, text=body)
        answer = {"status": "success", "message": "Event processed"}
        answer["dedup_key"] = self.events[-1].get("dedup_key", "")
        return web.json_response(answer, status=202)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    state = Receiver()
    app = web.Application()
    app.router.add_post("/v2/enqueue", state.enqueue)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.url = f"http://127.0.0.1:{port}/v2/enqueue"
    try:
        yield state
    finally:
        await runner.cleanup()


@dataclass
class Sleeps:
    waits: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def client(receiver: Receiver, sleeps: Sleeps, **kwargs: Any) -> PagerDuty:
    return PagerDuty(receiver.url, SecretStr(ROUTING_KEY), sleep=sleeps, **kwargs)


LINKS = [{"href": "https://example.slack.com/archives/C1/p1", "text": "Slack thread"}]


async def test_trigger_and_resolve_share_the_dedup_key(receiver: Receiver) -> None:
    key = dedup_key("a4", "L-7f3a", "node_fail")
    async with client(receiver, Sleeps()) as pager:
        await pager.trigger(
            key,
            "job 4187 on a4: node a4-1 failed (NODE_FAIL)",
            source="a4",
            custom_details={"job_id": "4187", "launch": "L-7f3a"},
            links=LINKS,
        )
        await pager.resolve(key)
    trigger, resolve = receiver.events
    assert receiver.content_types == ["application/json", "application/json"]
    assert set(trigger) == {
        "routing_key",
        "event_action",
        "dedup_key",
        "payload",
        "links",
        "client",
    }
    assert trigger["routing_key"] == ROUTING_KEY
    assert trigger["event_action"] == "trigger"
    assert trigger["dedup_key"] == key
    assert trigger["links"] == LINKS
    payload = trigger["payload"]
    assert payload["summary"] == "job 4187 on a4: node a4-1 failed (NODE_FAIL)"
    assert payload["source"] == "a4"
    assert payload["severity"] == "error"
    assert payload["custom_details"] == {"job_id": "4187", "launch": "L-7f3a"}
    assert payload["timestamp"].endswith("+00:00")
    assert resolve == {"routing_key": ROUTING_KEY, "event_action": "resolve", "dedup_key": key}


async def test_summary_is_cut_to_the_limit_and_severity_checked(receiver: Receiver) -> None:
    async with client(receiver, Sleeps()) as pager:
        await pager.trigger("k", "x" * 5000, source="a4", severity="critical")
        with pytest.raises(ValueError, match="severity must be one of"):
            await pager.trigger("k", "s", source="a4", severity="fatal")  # type: ignore[arg-type]
    payload = receiver.events[0]["payload"]
    assert len(payload["summary"]) == 1024 and payload["severity"] == "critical"
    assert len(receiver.events) == 1


async def test_429_is_retried_after_retry_after(receiver: Receiver) -> None:
    receiver.replies.append((429, {"Retry-After": "7"}, ""))
    sleeps = Sleeps()
    async with client(receiver, sleeps) as pager:
        await pager.trigger("k", "summary", source="a4")
    assert len(receiver.events) == 2
    assert receiver.events[0] == receiver.events[1]
    assert sleeps.waits == [7.0]


async def test_500_is_retried_then_raises(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    body = json.dumps({"status": "error", "message": f"internal error near {ROUTING_KEY}"})
    receiver.replies.extend([(500, {}, body)] * 3)
    sleeps = Sleeps()
    async with client(receiver, sleeps, max_attempts=3, backoff_base_s=0.5) as pager:
        with pytest.raises(AlertError) as caught:
            await pager.trigger("trainbot/a4/L-1/oom", "summary", source="a4")
    assert len(receiver.events) == 3
    assert len(sleeps.waits) == 2 and 0.5 <= sleeps.waits[0] < sleeps.waits[1] <= 1.1
    error = caught.value
    assert error.status == 500 and error.dedup_key == "trainbot/a4/L-1/oom"
    assert str(error).startswith("PagerDuty trigger for trainbot/a4/L-1/oom failed:")
    assert "3 attempts" in str(error)
    assert ROUTING_KEY not in str(error) and ROUTING_KEY not in repr(error.args)
    assert "**********" in str(error)
    assert "retrying" in caplog.text
    assert ROUTING_KEY not in caplog.text


async def test_400_is_not_retried(receiver: Receiver) -> None:
    body = json.dumps(
        {"status": "invalid event", "message": "Event object is invalid", "errors": ["bad"]}
    )
    receiver.replies.append((400, {}, body))
    sleeps = Sleeps()
    async with client(receiver, sleeps) as pager:
        with pytest.raises(AlertError, match="Event object is invalid: bad") as caught:
            await pager.resolve("k")
    assert caught.value.status == 400 and sleeps.waits == [] and len(receiver.events) == 1


async def test_connection_errors_are_retried_then_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sleeps = Sleeps()
    url = f"http://127.0.0.1:{port}/v2/enqueue"
    async with PagerDuty(url, SecretStr(ROUTING_KEY), sleep=sleeps, max_attempts=2) as pager:
        with pytest.raises(AlertError, match="gave up after 2 attempts") as caught:
            await pager.trigger("k", "summary", source="a4")
    assert caught.value.status == 0 and len(sleeps.waits) == 1
    assert ROUTING_KEY not in caplog.text and ROUTING_KEY not in str(caught.value)


async def test_shared_session_is_left_open(receiver: Receiver) -> None:
    async with aiohttp.ClientSession() as session:
        pager = PagerDuty(receiver.url, SecretStr(ROUTING_KEY), session=session)
        await pager.resolve("k")
        await pager.close()
        assert not session.closed
    assert ROUTING_KEY not in repr(pager)
