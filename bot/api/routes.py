"""``/api/v1/``: what the slash commands offer, over HTTP, for scripts and the CLI.

Each request presents a personal token (:mod:`bot.api.auth`); its person then asks the
core exactly as if they had typed the slash command in Slack: ``POST /launches`` is
``/train``, ``GET /launches`` is ``/jobs``, ``GET .../logs`` is ``/logs``, ``POST
.../cancel`` is ``/cancel`` and its confirm button, ``POST``/``DELETE .../watch`` are
``/watch``/``/unwatch``, ``GET /usage`` is ``/usage``, ``GET /clusters`` is
``/clusters``. So policy, budgets, identity, rate limits and redaction are the core's
own, and the answer's ``text`` is what Slack would show (Slack mrkdwn), with structured
fields beside it. A launch's thread goes to the person's DM with the bot, or to the
channel the request names.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from bot.api import shapes
from bot.api.auth import HttpRefused, caller
from bot.api.follow import follow_logs
from bot.api.openapi import spec
from bot.core.core import Core
from bot.core.rates import slow_down
from bot.store.base import StoreError
from bot.store.tokens import TokenRecord
from bot.text.actions import ACTION_CANCEL
from bot.text.front import Incoming, Reply
from bot.text.mrkdwn import escape
from cluster.errors import TrainbotError
from commands.errors import CommandError
from commands.job_commands import parse_job_ref

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
CHANNEL_RE = re.compile(r"^[CGD][A-Z0-9]{2,20}$")
TEXT_MAX = 4000
FAILED_TEXT = "Something went wrong on my side while answering that; it is logged. Try again."
DmChannel = Callable[[str], Awaitable[str]]


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers, dumps=_dumps)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def answer(reply: Reply, **fields: Any) -> web.Response:
    """The core's reply: 200, or 400 when it refused (``error``: the same text)."""
    body: dict[str, Any] = {"ok": not reply.error, "text": reply.text, **fields}
    if reply.error:
        body["error"] = "refused"
    return _json(400 if reply.error else 200, body)


def refused(status: int, text: str, code: str) -> web.Response:
    headers = {"WWW-Authenticate": f'Bearer realm="trainbot", error="{code}"'}
    return _json(
        status, {"ok": False, "error": code, "text": text}, headers if status == 401 else None
    )


@web.middleware
async def plain_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """A refused token, a bad body, Redis away or a bug: a JSON answer with a sentence,
    never a stack trace."""
    try:
        return await handler(request)
    except HttpRefused as exc:
        return refused(exc.status, exc.text, exc.code)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        text = exc.text or exc.reason
        return _json(exc.status, {"ok": False, "error": exc.reason, "text": text})
    except StoreError as exc:
        log.warning("API request %s %s: %s", request.method, request.path, exc)
        return _json(503, {"ok": False, "error": "unavailable", "text": f"Redis: {exc}"})
    except Exception:
        log.exception("API request %s %s failed", request.method, request.path)
        return _json(500, {"ok": False, "error": "internal", "text": FAILED_TEXT})


class Api:
    """The API's handlers over one core."""

    def __init__(
        self, core: Core, *, dm_channel: DmChannel | None = None, follow_interval_s: float = 2.0
    ) -> None:
        self.core = core
        self.store = core.store
        self.dm_channel = dm_channel
        self.follow_interval_s = follow_interval_s
        self.stopping = asyncio.Event()  # set at shutdown: log followers end

    def app(self) -> web.Application:
        """The routes, to mount at ``/api/v1/`` of the web role's listener."""
        app = web.Application(middlewares=[plain_errors])
        app.on_shutdown.append(self._stop_following)
        app.router.add_get("/openapi.json", self.openapi)
        app.router.add_post("/launches", self.train)
        app.router.add_get("/launches", self.jobs)
        app.router.add_get("/launches/{job}", self.one)
        app.router.add_get("/launches/{job}/logs", self.logs)
        app.router.add_post("/launches/{job}/cancel", self.cancel)
        app.router.add_get("/launches/{job}/checkpoints", self.checkpoints)
        app.router.add_post("/launches/{job}/watch", self.watch)
        app.router.add_delete("/launches/{job}/watch", self.watch)
        app.router.add_get("/usage", self.usage)
        app.router.add_get("/clusters", self.clusters)
        return app

    async def _stop_following(self, _: web.Application) -> None:
        self.stopping.set()

    async def ask(self, who: TokenRecord, command: str, text: str, channel: str = "") -> Reply:
        """The core's answer to ``command text`` typed by the token's person."""
        log.info("API %s from %s (token %s)", command, who.user_id, who.id)
        return await self.core(
            Incoming(
                user_id=who.user_id,
                user_name=who.user_name,
                channel_id=channel,
                command=command,
                text=text,
            )
        )

    async def launches_named(
        self, reply: Reply, *, made_by: str = "", since: float = 0.0
    ) -> list[dict[str, Any]]:
        """The launches a reply names, as JSON (a sweep's id names no record of its own);
        with ``made_by``, only those that person made from ``since`` on (a /train's answer
        also names the launch it waits for or starts from)."""
        if reply.error:
            return []
        ids = [i for i in shapes.ids_in(reply.text) if i.startswith("L-")]
        found = [
            launch for launch in (await self.store.launches.get_many(ids) if ids else []) if launch
        ]
        if made_by:
            found = [i for i in found if i.user_id == made_by and i.created_at >= since]
        return [shapes.launch_json(launch) for launch in found]

    # -- handlers ----------------------------------------------------------
    async def openapi(self, request: web.Request) -> web.Response:
        return _json(200, spec())

    async def train(self, request: web.Request) -> web.Response:
        who = await caller(self.store, request.headers.get("Authorization", ""), "launch")
        if request.content_type == "text/plain":  # the body is what follows /train
            body = {"text": await request.text(), "channel": request.query.get("channel")}
        else:
            body = await _body(request)
        text, channel = body.get("text"), body.get("channel") or ""
        if not isinstance(text, str) or not text.strip() or len(text) > TEXT_MAX:
            raise web.HTTPBadRequest(
                text='The body needs "text": what follows /train, e.g. '
                '{"text": "sft llama3p1_8b nodes=2 cluster=a4"}'
                f" (at most {TEXT_MAX} characters)."
            )
        if not isinstance(channel, str) or (channel and not CHANNEL_RE.match(channel)):
            raise web.HTTPBadRequest(
                text=f'"channel" must be a Slack channel id such as C0123ABCD, not '
                f"{str(channel)[:40]!r}; leave it out for your DM with trainbot."
            )
        if not channel:
            channel = await self.dm_of(who)
        asked = time.time() - 1.0  # the launch's clock is this process's own
        reply = await self.ask(who, "/train", text.strip(), channel)
        ids = shapes.ids_in(reply.text) if not reply.error else []
        return answer(
            reply,
            launch_id=ids[0] if ids else "",
            launches=await self.launches_named(reply, made_by=who.user_id, since=asked),
            channel=channel,
        )

    async def dm_of(self, who: TokenRecord) -> str:
        """The person's DM with the bot, where an API launch's thread goes by default."""
        if self.dm_channel is None:
            raise web.HTTPBadRequest(
                text="This trainbot has no Slack front end to open your DM; name a channel: "
                '{"channel": "C0123ABCD"}.'
            )
        try:
            return await self.dm_channel(who.user_id)
        except TrainbotError as exc:
            log.warning("could not open the DM of %s: %s", who.user_id, exc)
            raise web.HTTPServiceUnavailable(
                text=f"Slack did not open your DM with trainbot ({exc}); try again, or name "
                'a channel: {"channel": "C0123ABCD"}.'
            ) from None

    async def jobs(self, request: web.Request) -> web.Response:
        who = await caller(self.store, request.headers.get("Authorization", ""), "read")
        reply = await self.ask(who, "/jobs", _args(request))
        return answer(reply, launches=await self.launches_named(reply))

    async def one(self, request: web.Request) -> web.Response:
        who = await caller(self.store, request.headers.get("Authorization", ""), "read")
        launch, reply = await self.readable(who, request)
        if launch is None:
            return answer(reply)
        found = shapes.launch_json(launch)
        text = f"`{launch.id}` {launch.title} · {launch.cluster} · {found['state']}"
        return answer(Reply(text), launch=found)

    async def readable(
        self, who: TokenRecord, request: web.Request, *, counted: bool = False
    ) -> tuple[Any, Reply]:
        """The launch the path names, when the person may read it (as /logs decides),
        ``counted`` against their rate of commands that ask a cluster (as /logs is); else
        None and the core's refusal."""
        try:
            user = await self.core.directory.user(_incoming(who))
            ref = parse_job_ref(request.match_info["job"], _cluster(request), self.core.context)
            launch = await self.core.lookup.readable(ref, user)
            if counted:
                await slow_down(self.store, self.core.context, user.id, "commands")
            return launch, Reply("")
        except CommandError as exc:  # worded as the core words it for Slack
            return None, Reply(escape(str(exc)), error=True)

    async def logs(self, request: web.Request) -> web.StreamResponse:
        who = await caller(self.store, request.headers.get("Authorization", ""), "read")
        lines = request.query.get("lines", "")
        text = _with(request.match_info["job"], lines=lines, cluster=_cluster(request) or "")
        if request.query.get("follow", "").lower() not in ("1", "true", "yes"):
            reply = await self.ask(who, "/logs", text)
            return answer(reply, log=reply.file_content.decode("utf-8", "replace"))
        # Following waits for a job and its log; who may read it and the rate are /logs's.
        launch, refusal = await self.readable(who, request, counted=True)
        if launch is None:
            return answer(refusal)
        return await follow_logs(
            request,
            self.core,
            launch,
            interval_s=self.follow_interval_s,
            stopping=self.stopping,
        )

    async def cancel(self, request: web.Request) -> web.Response:
        """/cancel, then its confirm button: the two steps a person takes in Slack."""
        who = await caller(self.store, request.headers.get("Authorization", ""), "launch")
        text = _with(request.match_info["job"], cluster=_cluster(request) or "")
        confirm = await self.ask(who, "/cancel", text)
        button = _button(confirm, ACTION_CANCEL)
        if confirm.error or button is None:
            return answer(confirm)
        done = await self.core(
            Incoming(
                user_id=who.user_id,
                user_name=who.user_name,
                channel_id="",
                action_id=ACTION_CANCEL,
                action_value=button,
            )
        )
        launch = await self.store.launches.get(button) if button.startswith("L-") else None
        return answer(done, launch=shapes.launch_json(launch) if launch else None)

    async def checkpoints(self, request: web.Request) -> web.Response:
        who = await caller(self.store, request.headers.get("Authorization", ""), "read")
        launch, reply = await self.readable(who, request)
        if launch is None:
            return answer(reply)
        found = shapes.checkpoints_json(launch)
        return answer(Reply(shapes.checkpoints_text(launch, found)), checkpoints=found)

    async def watch(self, request: web.Request) -> web.Response:
        """``/watch`` (POST) or ``/unwatch`` (DELETE): follow someone's launch by DM."""
        who = await caller(self.store, request.headers.get("Authorization", ""), "read")
        command = "/watch" if request.method == "POST" else "/unwatch"
        text = _with(request.match_info["job"], cluster=_cluster(request) or "")
        return answer(await self.ask(who, command, text))

    async def usage(self, request: web.Request) -> web.Response:
        who = await caller(self.store, request.headers.get("Authorization", ""), "read")
        reply = await self.ask(who, "/usage", _args(request))
        return answer(reply, csv=reply.file_content.decode("utf-8", "replace"))

    async def clusters(self, request: web.Request) -> web.Response:
        who = await caller(self.store, request.headers.get("Authorization", ""), "read")
        return answer(await self.ask(who, "/clusters", _args(request)))


def _incoming(who: TokenRecord) -> Incoming:
    return Incoming(user_id=who.user_id, user_name=who.user_name, channel_id="")


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(
            text='The body must be a JSON object, e.g. {"text": "sft llama3p1_8b nodes=2"}.'
        )
    return body


def _args(request: web.Request) -> str:
    """``?args=...``: what would follow the slash command (``all``, ``history days=7``)."""
    return request.query.get("args", "").strip()[:TEXT_MAX]


def _cluster(request: web.Request) -> str | None:
    return request.query.get("cluster") or None


def _with(job: str, **pairs: str) -> str:
    """A job and ``key=value`` pairs as typed after a slash command (empty ones left out);
    a value with a space could not have been typed, so it is not passed on."""
    words = [job] + [f"{k}={v}" for k, v in pairs.items() if v]
    return " ".join(w for w in words if w and not any(c.isspace() for c in w))


def _button(reply: Reply, action_id: str) -> str | None:
    """The value of the reply's button ``action_id`` (what clicking it sends), if any."""
    for block in reply.blocks:
        for element in block.get("elements", ()):
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return str(element.get("value", ""))
    return None
