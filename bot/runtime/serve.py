"""``trainbot serve``: the bot with Slack as its front end, whole or by role.

``--role all`` (the default) runs every part in one process. ``web`` answers
Slack: Socket Mode when ``SLACK_APP_TOKEN`` is set, otherwise HTTP on
``TRAINBOT_HTTP_HOST:TRAINBOT_HTTP_PORT``. ``worker`` takes launches off the
queue and needs no Slack secret at all; ``poller`` polls the clusters and
delivers the outbox to Slack (so it needs the bot token, not the signing secret
or app token). The web role also serves the HTTP API (``/api/v1/``, bot.api) on that
address, in either mode. Every role serves ``GET /healthz`` and ``GET /metrics`` on that
HTTP address (``/metrics`` on ``TRAINBOT_METRICS_HOST:TRAINBOT_METRICS_PORT`` instead
when that port is set). Runs until SIGTERM or SIGINT, then shuts down in order (see
bot.runtime.assembly).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from bot.api.routes import Api
from bot.runtime.assembly import role_parts, running
from bot.settings.config import Config
from bot.settings.env import Settings
from bot.slack.http import SlackParams, run_slack, serve_health
from bot.slack.webapi import SlackFront, open_front
from bot.text.front import Blocks, Front, MessageRef
from cluster.errors import ConfigError

log = logging.getLogger(__name__)


class NoSlack:
    """The front of a process that never speaks to Slack (the worker role)."""

    async def post(
        self, channel: str, text: str, *, blocks: Blocks | None = None, thread_ts: str = ""
    ) -> MessageRef:
        raise RuntimeError("this process's role does not speak to Slack")

    async def update(self, ref: MessageRef, text: str, *, blocks: Blocks | None = None) -> None:
        raise RuntimeError("this process's role does not speak to Slack")

    async def post_ephemeral(
        self, channel: str, user: str, text: str, *, blocks: Blocks | None = None
    ) -> None:
        raise RuntimeError("this process's role does not speak to Slack")

    async def upload(
        self, channel: str, thread_ts: str, *, filename: str, content: bytes, title: str
    ) -> None:
        raise RuntimeError("this process's role does not speak to Slack")

    async def permalink(self, ref: MessageRef) -> str:
        raise RuntimeError("this process's role does not speak to Slack")

    async def usergroup_members(self, usergroup_id: str) -> list[str]:
        raise RuntimeError("this process's role does not speak to Slack")

    async def user_email(self, user_id: str) -> str | None:
        raise RuntimeError("this process's role does not speak to Slack")

    async def post_to_user(self, user: str, text: str) -> None:
        raise RuntimeError("this process's role does not speak to Slack")

    async def can_post(self, channel: str) -> str:
        raise RuntimeError("this process's role does not speak to Slack")


def check_slack_settings(params: SlackParams, parts: frozenset[str]) -> None:
    """What each role needs of Slack, checked before connecting to anything."""
    if ("web" in parts or "poller" in parts) and not params.bot_token:
        raise ConfigError(
            "SLACK_BOT_TOKEN is not set: give your Slack app's bot token (xoxb-...), "
            "or run without Slack: trainbot console",
            source="environment",
        )
    if "web" in parts and not params.app_token and not params.signing_secret:
        raise ConfigError(
            "HTTP mode needs SLACK_SIGNING_SECRET; or set SLACK_APP_TOKEN (xapp-...) for "
            "Socket Mode, which needs no public URL",
            source="environment",
        )


@asynccontextmanager
async def serving(
    settings: Settings, config: Config, role: str, params: SlackParams
) -> AsyncIterator[str]:
    """The parts of ``role`` running, with their HTTP endpoints; yields a line for the log."""
    parts = role_parts(role)
    async with AsyncExitStack() as stack:
        front: Front = NoSlack()
        slack_front: SlackFront | None = None
        if "web" in parts or "poller" in parts:
            slack_front = await stack.enter_async_context(
                open_front(params.bot_token, api_url=params.api_url)
            )
            front = slack_front
        bot = await stack.enter_async_context(running(settings, config, front, role=role))
        if "web" in parts:
            api = Api(bot.core, dm_channel=slack_front.open_dm if slack_front else None)
            slack = await stack.enter_async_context(
                run_slack(
                    params,
                    bot.core,
                    health=bot.healthy,
                    metrics=bot.metrics,
                    front=front,  # type: ignore[arg-type]
                    replay_guard=bot.store.marks.first_seen,
                    api=api.app(),
                )
            )
            yield (
                f"trainbot serving Slack as {role} ({slack.mode} mode, "
                f"health on {params.http_host}:{slack.http_port})"
            )
        else:
            port = await stack.enter_async_context(
                serve_health(
                    params.http_host,
                    params.http_port,
                    health=bot.healthy,
                    metrics=bot.metrics,
                    metrics_apart=params.metrics_apart,
                )
            )
            yield f"trainbot serving as {role} (health on {params.http_host}:{port})"


async def run_serve(
    settings: Settings,
    config: Config,
    *,
    role: str = "all",
    ready: asyncio.Event | None = None,
) -> int:
    params = SlackParams.from_settings(settings, allowed_team_ids=config.policy.workspaces)
    check_slack_settings(params, role_parts(role))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with serving(settings, config, role, params) as started:
            log.warning("%s", started)
            if ready is not None:
                ready.set()
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return 0
