"""Serving Slack: HTTP (``POST /slack/events``) or Socket Mode, plus health and metrics.

``run_slack`` is the one entry the core calls. With an app token (``xapp-...``)
it connects over Socket Mode (``apps.connections.open`` on the configured API
URL, so no public URL is needed); otherwise Slack posts to ``/slack/events``,
where each request passes ``bot.slack.signed``'s checks (signature, well-formed
body, not a replay: the record of seen requests is in Redis when the service
passes ``replay_guard``, so every bot process shares it) before bolt parses
anything. Either way ``GET /healthz`` and ``GET /metrics`` are served on
``http_host:http_port``, and the HTTP API (``/api/v1/``) when the web role hands it over.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError

from bot.slack.app import Listeners, build_app
from bot.slack.signed import ReplayGuard, request_check, to_bolt_request
from bot.slack.web_client import DEFAULT_API_URL
from bot.slack.webapi import SlackError, SlackFront, open_front
from bot.text.front import Handler
from cluster.errors import ConfigError

log = logging.getLogger(__name__)

HealthCheck = Callable[[], Awaitable[tuple[bool, str]]]
MetricsText = Callable[[], Awaitable[str] | str]  # async or plain
EVENTS_PATH = "/slack/events"
API_PATH = "/api/v1/"
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class SlackParams:
    """What the Slack front end needs, as plain values (secrets unwrapped)."""

    bot_token: str
    signing_secret: str = ""
    app_token: str = ""
    api_url: str = DEFAULT_API_URL
    http_host: str = "127.0.0.1"
    http_port: int = 3000
    ack_budget_s: float = 2.0
    backoff_base_s: float = 0.5
    drain_timeout_s: float = 10.0
    allowed_team_ids: tuple[str, ...] = ()  # policy.workspaces; empty: any workspace
    # /metrics on a listener of its own (port 0: any free one); None: on http_host:http_port
    metrics_host: str | None = None
    metrics_port: int | None = None

    def __repr__(self) -> str:  # never print the secrets
        mode = "socket" if self.app_token else "http"
        where = f"{self.http_host}:{self.http_port}"
        return f"SlackParams(mode={mode}, api_url={self.api_url!r}, http={where})"

    @classmethod
    def from_settings(cls, settings: object, **overrides: Any) -> SlackParams:
        """Read ``slack_bot_token``, ``slack_signing_secret``, ``slack_app_token``,
        ``slack_api_url``, ``http_host``, ``http_port`` from a settings object."""

        def value(name: str, default: Any) -> Any:
            found = getattr(settings, name, None)
            if found is not None and hasattr(found, "get_secret_value"):
                found = found.get_secret_value()
            return default if found is None else found

        params = cls(
            bot_token=str(value("slack_bot_token", "")),
            signing_secret=str(value("slack_signing_secret", "")),
            app_token=str(value("slack_app_token", "")),
            api_url=str(value("slack_api_url", DEFAULT_API_URL)),
            http_host=str(value("http_host", "127.0.0.1")),
            http_port=int(value("http_port", 3000)),
            metrics_host=getattr(settings, "metrics_host", None),
            metrics_port=getattr(settings, "metrics_port", None),
        )
        return replace(params, **overrides)

    @property
    def metrics_apart(self) -> tuple[str, int] | None:
        """Where ``/metrics`` listens when apart from the main listener."""
        if self.metrics_port is None:
            return None
        return self.metrics_host or self.http_host, self.metrics_port


def build_web_app(
    *,
    health: HealthCheck,
    metrics: MetricsText | None,
    app: AsyncApp | None = None,
    signing_secret: str = "",
    replay_guard: ReplayGuard | None = None,
    api: web.Application | None = None,
) -> web.Application:
    """``/healthz`` and ``/metrics`` (unless ``metrics`` is None: served apart);
    ``POST /slack/events`` when ``app`` is given (signature checked with
    ``signing_secret`` before bolt parses the body); ``api`` mounted at ``/api/v1/``."""

    async def healthz(_: web.Request) -> web.Response:
        try:
            ok, reason = await health()
        except Exception as error:
            log.exception("health check failed")
            ok, reason = False, f"health check failed: {type(error).__name__}"
        return web.Response(status=200 if ok else 503, text=reason or ("ok" if ok else "unhealthy"))

    web_app = web.Application()
    web_app.router.add_get("/healthz", healthz)
    if metrics is not None:
        web_app.router.add_get("/metrics", _metrics_handler(metrics))
    if app is not None:
        bolt_app = app
        check = request_check(signing_secret, replay_guard)

        async def events(request: web.Request) -> web.Response:
            try:
                raw = (await request.read()).decode("utf-8")
            except UnicodeDecodeError:
                return web.Response(status=400, text="malformed request: body is not UTF-8")
            refused = await check(request, raw)
            if refused is not None:
                return refused
            bolt_response = await bolt_app.async_dispatch(await to_bolt_request(request, raw))
            return await to_aiohttp_response(bolt_response)

        web_app.router.add_post(EVENTS_PATH, events)
    if api is not None:
        web_app.add_subapp(API_PATH, api)
    return web_app


def _metrics_handler(metrics: MetricsText) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def metrics_text(_: web.Request) -> web.Response:
        produced = metrics()
        body = await produced if inspect.isawaitable(produced) else produced
        return web.Response(body=body.encode(), headers={"Content-Type": METRICS_CONTENT_TYPE})

    return metrics_text


@asynccontextmanager
async def serve_metrics(host: str, port: int, metrics: MetricsText) -> AsyncIterator[int]:
    """Only ``GET /metrics``, on a listener of its own; yields the bound port."""
    web_app = web.Application()
    web_app.router.add_get("/metrics", _metrics_handler(metrics))
    async with _serve_http(web_app, host, port) as bound:
        yield bound


@dataclass(frozen=True)
class SlackService:
    """What ``run_slack`` yields: the ``Front`` for the core, and where it listens."""

    front: SlackFront
    app: AsyncApp
    mode: Literal["http", "socket"]
    http_port: int  # the bound port (useful when ``http_port=0``)
    metrics_port: int | None = None  # the bound port of /metrics when apart


@asynccontextmanager
async def _serve_http(web_app: web.Application, host: str, port: int) -> AsyncIterator[int]:
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        log.info("listening on http://%s:%d", host, bound)
        yield int(bound)
    finally:
        await runner.cleanup()


@asynccontextmanager
async def serve_health(
    host: str,
    port: int,
    *,
    health: HealthCheck,
    metrics: MetricsText,
    metrics_apart: tuple[str, int] | None = None,
) -> AsyncIterator[int]:
    """Only ``GET /healthz`` and ``GET /metrics`` (a process that takes no Slack traffic),
    ``/metrics`` on ``metrics_apart`` (host, port) when given; yields the bound port."""
    async with AsyncExitStack() as stack:
        web_app = build_web_app(health=health, metrics=None if metrics_apart else metrics)
        bound = await stack.enter_async_context(_serve_http(web_app, host, port))
        if metrics_apart is not None:
            await stack.enter_async_context(serve_metrics(*metrics_apart, metrics))
        yield bound


@asynccontextmanager
async def _socket_mode(app: AsyncApp, app_token: str) -> AsyncIterator[AsyncSocketModeHandler]:
    socket = AsyncSocketModeHandler(app, app_token=app_token)
    try:  # open the first connection here so that a refused app token fails at start-up
        opened = await app.client.apps_connections_open(app_token=app_token)
        socket.client.wss_uri = str(opened["url"])
    except SlackApiError as error:
        code = str(error.response.get("error", ""))
        if code in _REFUSED:
            raise ConfigError(
                f"Slack refused SLACK_APP_TOKEN ({code})", source="environment"
            ) from error
        log.warning("apps.connections.open failed (%s); the client will keep trying", code)
    except (aiohttp.ClientError, TimeoutError) as error:
        log.warning("Slack unreachable (%s); the client will keep trying", type(error).__name__)
    await socket.connect_async()  # type: ignore[no-untyped-call]
    log.info("connected to Slack over Socket Mode")
    try:
        yield socket
    finally:
        await socket.close_async()  # type: ignore[no-untyped-call]


async def _connected(socket: AsyncSocketModeHandler) -> bool:
    """Whether the Socket Mode connection is up (its client also checks ping-pong)."""
    return bool(await socket.client.is_connected())


_REFUSED = {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}


async def _check_token(front: SlackFront) -> None:
    """Fail at start-up on a refused bot token; only warn when Slack can't be reached."""
    try:
        team_id, user_id = await front.identity()
    except SlackError as error:
        if error.error in _REFUSED:
            raise ConfigError(
                f"Slack refused SLACK_BOT_TOKEN ({error.error})", source="environment"
            ) from error
        log.warning("could not check the bot token at start-up: %s", error)
        return
    log.info("Slack bot user %s in team %s", user_id, team_id)


@asynccontextmanager
async def run_slack(
    params: SlackParams,
    handler: Handler,
    *,
    health: HealthCheck,
    metrics: MetricsText,
    front: SlackFront | None = None,
    replay_guard: ReplayGuard | None = None,
    api: web.Application | None = None,
) -> AsyncIterator[SlackService]:
    """Serve Slack until the block exits; Socket Mode when ``params.app_token`` is set.

    Pass ``front`` (from ``bot.slack.webapi.open_front``) when the core needs the
    Front before requests can arrive; otherwise one is opened here. ``api`` (the HTTP
    API's routes) is served on the same listener, under ``/api/v1/``. On exit the
    listener stops, running handlers get ``drain_timeout_s`` to finish, then the
    HTTP connections close.
    """
    if not params.bot_token:
        raise ConfigError("SLACK_BOT_TOKEN is not set", source="environment")
    if not params.app_token and not params.signing_secret:
        raise ConfigError(
            "HTTP mode needs SLACK_SIGNING_SECRET (or set SLACK_APP_TOKEN for Socket Mode)",
            source="environment",
        )
    async with AsyncExitStack() as stack:
        if front is None:
            front = await stack.enter_async_context(
                open_front(
                    params.bot_token, api_url=params.api_url, backoff_base_s=params.backoff_base_s
                )
            )
        await _check_token(front)
        listeners = Listeners(
            handler,
            front,
            ack_budget_s=params.ack_budget_s,
            allowed_team_ids=params.allowed_team_ids,
        )
        stack.push_async_callback(listeners.drain, params.drain_timeout_s)
        socket_mode = bool(params.app_token)
        secret = "" if socket_mode else params.signing_secret
        app = build_app(front.client, listeners, signing_secret=secret)
        sockets: list[AsyncSocketModeHandler] = []

        async def checked_health() -> tuple[bool, str]:
            ok, reason = await health()
            if ok and socket_mode and not (sockets and await _connected(sockets[0])):
                return False, "socket mode: not connected to Slack"
            return ok, reason

        apart = params.metrics_apart
        web_app = build_web_app(
            health=checked_health,
            metrics=None if apart else metrics,
            app=None if socket_mode else app,
            signing_secret=secret,
            replay_guard=replay_guard,
            api=api,
        )
        port = await stack.enter_async_context(
            _serve_http(web_app, params.http_host, params.http_port)
        )
        metrics_port = None
        if apart is not None:
            metrics_port = await stack.enter_async_context(serve_metrics(*apart, metrics))
        if socket_mode:
            sockets.append(await stack.enter_async_context(_socket_mode(app, params.app_token)))
        yield SlackService(
            front=front,
            app=app,
            mode="socket" if socket_mode else "http",
            http_port=port,
            metrics_port=metrics_port,
        )
