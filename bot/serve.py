"""``trainbot serve``: the whole bot with Slack as its front end.

Socket Mode when ``SLACK_APP_TOKEN`` is set, otherwise HTTP on
``TRAINBOT_HTTP_HOST:TRAINBOT_HTTP_PORT``. Runs until SIGTERM or SIGINT, then
shuts down in order (see bot.service).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from bot.config import Config
from bot.http import SlackParams, run_slack
from bot.service import running
from bot.settings import Settings
from bot.slack_front import open_front
from cluster.errors import ConfigError

log = logging.getLogger(__name__)


async def run_serve(
    settings: Settings, config: Config, *, ready: asyncio.Event | None = None
) -> int:
    params = SlackParams.from_settings(settings, allowed_team_ids=config.policy.workspaces)
    if not params.bot_token:  # before connecting to anything
        raise ConfigError(
            "SLACK_BOT_TOKEN is not set: give your Slack app's bot token (xoxb-...), "
            "or run without Slack: trainbot console",
            source="environment",
        )
    if not params.app_token and not params.signing_secret:
        raise ConfigError(
            "HTTP mode needs SLACK_SIGNING_SECRET; or set SLACK_APP_TOKEN (xapp-...) for "
            "Socket Mode, which needs no public URL",
            source="environment",
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with (
            open_front(params.bot_token, api_url=params.api_url) as front,
            running(settings, config, front) as bot,
            run_slack(
                params,
                bot.core,
                health=bot.healthy,
                metrics=bot.metrics,
                front=front,
                replay_guard=bot.store.first_seen,
            ) as slack,
        ):
            log.warning(
                "trainbot serving Slack (%s mode, health on %s:%s)",
                slack.mode,
                params.http_host,
                slack.http_port,
            )
            if ready is not None:
                ready.set()
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return 0
