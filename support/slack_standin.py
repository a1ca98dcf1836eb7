"""A local stand-in for Slack: the Web API methods trainbot uses, file uploads,
response URLs and a Socket Mode websocket, on 127.0.0.1 with a random port.

It records every call (method, params, headers without Authorization, time,
and which of its tokens the Authorization header presented, never the token
itself), checks the bearer token, and answers 429 or 500 on demand. Conversations are
described in ``channels`` (``conversations.info``: ``is_member`` and friends,
or an ``error`` such as ``channel_not_found``; an unlisted channel is a public
one the bot is in), ``refuse_posts`` makes posting in a channel fail as Slack
does when the bot is not in it, and every answer carries the bot's ``scopes``
in ``X-OAuth-Scopes``. Point a client at ``standin.api_url``.
:mod:`support.slack_requests` builds and signs requests exactly as Slack sends them
to an app's HTTP endpoint.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from support.slack_requests import block_action_payload, slash_command_fields
from support.workspace import APP_TOKEN, BOT_SCOPES, BOT_TOKEN, BOT_USER_ID, TEAM_ID

_POSTING = ("chat.postMessage", "chat.update", "chat.postEphemeral")


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    headers: dict[str, str]
    at: float  # time.monotonic()
    status: int = 200
    error: str = ""  # set when answered {"ok": false, "error": ...}
    auth: str = ""  # "Authorization: Bearer <token>" presented: "bot", "app", "other" or ""


@dataclass
class _Failure:
    status: int
    remaining: int
    retry_after_s: int
    error: str = ""


@dataclass
class SlackStandin:
    bot_token: str = BOT_TOKEN
    app_token: str = APP_TOKEN
    usergroups: dict[str, list[str]] = field(default_factory=dict)
    emails: dict[str, str] = field(default_factory=dict)  # user id -> profile email
    unconfirmed: set[str] = field(default_factory=set)  # user ids whose email is unconfirmed
    timezones: dict[str, str] = field(default_factory=dict)  # user id -> users.info tz
    calls: list[Call] = field(default_factory=list)
    uploads: dict[str, bytes] = field(default_factory=dict)
    acks: dict[str, dict[str, Any]] = field(default_factory=dict)
    channels: dict[str, dict[str, Any]] = field(default_factory=dict)
    scopes: tuple[str, ...] = BOT_SCOPES
    delays_s: dict[str, float] = field(default_factory=dict)  # method -> answer this late

    def __post_init__(self) -> None:
        self._failures: dict[str, _Failure] = {}
        self._refused: dict[str, str] = {}  # channel -> the error posting there gets
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self._connected = asyncio.Event()
        self._ack_waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._changed = asyncio.Condition()
        self.port = 0

    # -- lifecycle -------------------------------------------------------
    async def start(self) -> None:
        app = web.Application(client_max_size=200 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_post("/response/{hook}", self._response_url)
        app.router.add_get("/socket", self._socket)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def close(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/"

    def response_url(self, hook: str = "hook1") -> str:
        return f"{self.base_url}/response/{hook}"

    # -- test controls ---------------------------------------------------
    def fail_next(
        self,
        method: str,
        times: int = 1,
        *,
        status: int = 429,
        retry_after_s: int = 1,
        error: str = "",
    ) -> None:
        """Answer the next ``times`` calls of ``method`` with ``status`` (429 or 5xx),
        or, with ``status=200``, with ``{"ok": false, "error": error}``."""
        self._failures[method] = _Failure(status, times, retry_after_s, error)

    def refuse_posts(self, channel: str, error: str = "not_in_channel") -> None:
        """Posting in ``channel`` fails with ``error`` (``not_in_channel``,
        ``channel_not_found``, ``is_archived``) until :meth:`accept_posts`."""
        self._refused[channel] = error

    def accept_posts(self, channel: str) -> None:
        self._refused.pop(channel, None)

    def calls_to(self, method: str, *, ok_only: bool = True) -> list[Call]:
        return [
            c
            for c in self.calls
            if c.method == method and (not ok_only or (c.status == 200 and not c.error))
        ]

    async def wait_for(
        self,
        method: str,
        predicate: Callable[[Call], bool] = lambda _: True,
        timeout_s: float = 5,
        *,
        ok_only: bool = True,
    ) -> Call:
        """The first call of ``method`` (successful, unless not ``ok_only``) matching
        ``predicate``, waiting for it."""

        async def found() -> Call:
            async with self._changed:
                while True:
                    for call in self.calls_to(method, ok_only=ok_only):
                        if predicate(call):
                            return call
                    await self._changed.wait()

        return await asyncio.wait_for(found(), timeout_s)

    # -- Web API ---------------------------------------------------------
    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _params(request)
        headers = _headers(request)
        auth = request.headers.get("Authorization", "")
        presented = {f"Bearer {self.bot_token}": "bot", f"Bearer {self.app_token}": "app"}
        who = presented.get(auth, "other" if auth else "")
        if self.delays_s.get(method):
            await asyncio.sleep(self.delays_s[method])
        failure = self._failures.get(method)
        if failure is not None and failure.remaining > 0:
            failure.remaining -= 1
            call = Call(
                method, params, headers, time.monotonic(), failure.status, failure.error, who
            )
            await self._record(call)
            if failure.status == 429:
                return web.json_response(
                    {"ok": False, "error": "ratelimited"},
                    status=429,
                    headers={"Retry-After": str(failure.retry_after_s)},
                )
            error = failure.error or "internal_error"
            return web.json_response({"ok": False, "error": error}, status=failure.status)
        wanted = "app" if method == "apps.connections.open" else "bot"
        answer = getattr(self, "_m_" + method.replace(".", "_"), None)
        error = ""
        if not auth:
            error = "not_authed"
        elif who != wanted:
            error = "invalid_auth"
        elif answer is None:
            error = "unknown_method"
        elif method in _POSTING and str(params.get("channel", "")) in self._refused:
            error = self._refused[str(params["channel"])]
        elif method == "conversations.info":
            error = str(self.channels.get(str(params.get("channel", "")), {}).get("error", ""))
        await self._record(Call(method, params, headers, time.monotonic(), error=error, auth=who))
        scopes = {"X-OAuth-Scopes": ",".join(self.scopes)}
        if error or answer is None:
            return web.json_response({"ok": False, "error": error}, headers=scopes)
        return web.json_response({"ok": True, **answer(params)}, headers=scopes)

    async def _record(self, call: Call) -> None:
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()

    def _next_ts(self) -> str:
        return f"1700000000.{next(self._ts):06d}"

    def _m_auth_test(self, p: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://standin.slack.com/",
            "team": "Stand-in",
            "user": "trainbot",
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": "B0TRAINBOT",
        }

    def _m_chat_postMessage(self, p: dict[str, Any]) -> dict[str, Any]:
        ts = self._next_ts()
        message = {"text": p.get("text", ""), "ts": ts, "user": BOT_USER_ID}
        if p.get("thread_ts"):
            message["thread_ts"] = p["thread_ts"]
        return {"channel": p["channel"], "ts": ts, "message": message}

    def _m_chat_update(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"channel": p["channel"], "ts": p["ts"], "text": p.get("text", "")}

    def _m_chat_postEphemeral(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"message_ts": self._next_ts()}

    def _m_chat_getPermalink(self, p: dict[str, Any]) -> dict[str, Any]:
        ts = str(p["message_ts"]).replace(".", "")
        link = f"https://standin.slack.com/archives/{p['channel']}/p{ts}"
        return {"channel": p["channel"], "permalink": link}

    def _m_views_publish(self, p: dict[str, Any]) -> dict[str, Any]:
        view = p["view"] if isinstance(p["view"], dict) else json.loads(p["view"])
        return {"view": {"id": "V" + str(len(self.calls)), **view}}

    def _m_views_open(self, p: dict[str, Any]) -> dict[str, Any]:
        view = p["view"] if isinstance(p["view"], dict) else json.loads(p["view"])
        return {"view": {"id": "V" + str(len(self.calls)), **view}}

    def _m_views_update(self, p: dict[str, Any]) -> dict[str, Any]:
        view = p["view"] if isinstance(p["view"], dict) else json.loads(p["view"])
        return {"view": {"id": p.get("view_id", ""), **view}}

    def _m_conversations_open(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"channel": {"id": "D" + str(p["users"]).split(",")[0]}}

    def _m_conversations_info(self, p: dict[str, Any]) -> dict[str, Any]:
        channel_id = str(p["channel"])
        described = {k: v for k, v in self.channels.get(channel_id, {}).items() if k != "error"}
        kind = {"D": "im", "G": "private"}.get(channel_id[:1], "public")
        channel = {
            "id": channel_id,
            "name": channel_id.lower(),
            "is_channel": kind == "public",
            "is_group": False,
            "is_im": kind == "im",
            "is_private": kind != "public",
            "is_archived": False,
            "is_member": True,
            **described,
        }
        return {"channel": channel}

    def _m_usergroups_users_list(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"users": self.usergroups.get(str(p.get("usergroup")), [])}

    def _m_users_info(self, p: dict[str, Any]) -> dict[str, Any]:
        user = str(p.get("user"))
        return {
            "user": {
                "id": user,
                "deleted": False,
                "is_bot": False,
                "is_email_confirmed": user in self.emails and user not in self.unconfirmed,
                "profile": {"email": self.emails.get(user, "")},
                "tz": self.timezones.get(user, "America/Los_Angeles"),
            }
        }

    def _m_apps_connections_open(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"url": f"ws://127.0.0.1:{self.port}/socket"}

    def _m_files_getUploadURLExternal(self, p: dict[str, Any]) -> dict[str, Any]:
        file_id = f"F{next(self._ids):08d}"
        return {"upload_url": f"{self.base_url}/upload/{file_id}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, p: dict[str, Any]) -> dict[str, Any]:
        files = p["files"] if isinstance(p["files"], list) else json.loads(p["files"])
        return {
            "files": [
                {
                    "id": f["id"],
                    "title": f.get("title"),
                    "size": len(self.uploads.get(f["id"], b"")),
                }
                for f in files
            ]
        }

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        self.uploads[file_id] = await request.read()
        await self._record(
            Call(
                "upload",
                {"file_id": file_id, "size": len(self.uploads[file_id])},
                _headers(request),
                time.monotonic(),
            )
        )
        return web.Response(text=f"OK - {len(self.uploads[file_id])}")

    async def _response_url(self, request: web.Request) -> web.Response:
        body = await request.json()
        await self._record(Call("response_url", body, _headers(request), time.monotonic()))
        return web.Response(text="ok")

    # -- Socket Mode -----------------------------------------------------
    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_json({"type": "hello", "num_connections": len(self._sockets)})
        self._connected.set()
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                ack = json.loads(msg.data)
                envelope_id = str(ack.get("envelope_id", ""))
                self.acks[envelope_id] = ack
                waiter = self._ack_waiters.pop(envelope_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(ack)
        finally:
            self._sockets.remove(ws)
            if not self._sockets:
                self._connected.clear()
        return ws

    async def wait_connected(self, timeout_s: float = 5) -> None:
        await asyncio.wait_for(self._connected.wait(), timeout_s)

    async def push(
        self, envelope_type: str, payload: dict[str, Any], timeout_s: float = 5
    ) -> dict[str, Any]:
        """Send an envelope to the connected app; return its ack (envelope_id + payload)."""
        await self.wait_connected(timeout_s)
        envelope_id = f"env-{next(self._ids)}"
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._ack_waiters[envelope_id] = waiter
        await self._sockets[-1].send_json(
            {
                "envelope_id": envelope_id,
                "type": envelope_type,
                "payload": payload,
                "accepts_response_payload": envelope_type != "events_api",
            }
        )
        return await asyncio.wait_for(waiter, timeout_s)

    async def socket_slash_command(self, command: str, text: str, **fields: str) -> dict[str, Any]:
        return await self.push("slash_commands", slash_command_fields(command, text, **fields))

    async def socket_block_action(
        self, action_id: str, value: str, **fields: str
    ) -> dict[str, Any]:
        return await self.push("interactive", block_action_payload(action_id, value, **fields))


def _headers(request: web.Request) -> dict[str, str]:
    return {k: v for k, v in request.headers.items() if k.lower() != "authorization"}


async def _params(request: web.Request) -> dict[str, Any]:
    params: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        params.update(await request.json())
    elif request.can_read_body:
        params.update(await request.post())
    return params
