"""Fixtures for the Slack front end: the Web API stand-in, a Front on it, a running bot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from bot.slack.http import MetricsText, SlackParams, SlackService, run_slack
from bot.slack.webapi import SlackFront, open_front
from bot.store.store import Store
from bot.text.front import Incoming, Reply
from support.slack_standin import SlackStandin
from support.workspace import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET
from tests.bot import botkit


@dataclass
class FakeHandler:
    """Records what it is given; answers ``reply`` (or ``answer(incoming)``) after ``release``."""

    reply: Reply = field(default_factory=lambda: Reply(text="ok"))
    answer: Callable[[Incoming], Reply] | None = None
    release: asyncio.Event | None = None
    seen: list[Incoming] = field(default_factory=list)

    async def __call__(self, incoming: Incoming) -> Reply:
        self.seen.append(incoming)
        if self.release is not None:
            await self.release.wait()
        return self.answer(incoming) if self.answer else self.reply


async def healthy() -> tuple[bool, str]:
    return True, "ok"


async def some_metrics() -> str:
    return "# TYPE trainbot_queue_length gauge\ntrainbot_queue_length 3\n"


@pytest.fixture
async def clean_redis() -> None:
    """The test Redis database emptied before the test: a file whose tests all start from
    an empty store says ``pytestmark = pytest.mark.usefixtures("clean_redis")``."""
    await botkit.flush_test_redis()


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    """A store on the emptied test Redis database."""
    await botkit.flush_test_redis()
    async with botkit.open_test_store() as opened:
        yield opened


@pytest.fixture
async def standin() -> AsyncIterator[SlackStandin]:
    server = SlackStandin(usergroups={"S0ONCALL": ["U0BOB", "U0CAROL"]})
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def front(standin: SlackStandin) -> AsyncIterator[SlackFront]:
    async with open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as opened:
        yield opened


@pytest.fixture
def handler() -> FakeHandler:
    return FakeHandler()


Serve = Callable[..., AbstractAsyncContextManager[SlackService]]


def standin_params(
    standin: SlackStandin, *, socket_mode: bool = False, **overrides: Any
) -> SlackParams:
    """The Slack front end's settings against the stand-in: its tokens, fast retries."""
    params = SlackParams(
        bot_token=BOT_TOKEN,
        signing_secret="" if socket_mode else SIGNING_SECRET,
        app_token=APP_TOKEN if socket_mode else "",
        api_url=standin.api_url,
        http_port=0,
        backoff_base_s=0.01,
        drain_timeout_s=2.0,
    )
    return replace(params, **overrides)


@pytest.fixture
def serve(standin: SlackStandin, handler: FakeHandler) -> Serve:
    """``async with serve(socket_mode=False, **params) as service:`` the bot on the stand-in."""

    def start(
        *,
        socket_mode: bool = False,
        health: Callable[[], Awaitable[tuple[bool, str]]] = healthy,
        metrics: MetricsText = some_metrics,
        **overrides: Any,
    ) -> AbstractAsyncContextManager[SlackService]:
        params = standin_params(standin, socket_mode=socket_mode, **overrides)
        return run_slack(params, handler, health=health, metrics=metrics)

    return start


def events_url(service: SlackService) -> str:
    return f"http://127.0.0.1:{service.http_port}/slack/events"


@pytest.fixture
def cancel_jobs() -> Iterator[list[str]]:
    jobs: list[str] = []
    yield jobs
    if jobs:
        botkit.login_run("scancel " + " ".join(jobs), check=False)
