"""``SlackFront``: the core's ``Front`` on Slack's Web API.

Every call goes through one ``AsyncWebClient`` pointed at ``api_url`` (the
real Slack, or a local stand-in in tests), with the retry policy of
``bot.slack.web_client``. Messages for one thread (one channel + thread_ts) go
out in the order they were asked for, even while one of them waits out a rate
limit: each thread has its own FIFO lock.

``can_post`` tells whether the bot may post in a channel (``conversations.info``:
a member, or a public channel with the ``chat:write.public`` scope), within
``CHECK_TIMEOUT_S``, remembering a "yes" for ``CAN_POST_TTL_S``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.slack.web_client import DEFAULT_API_URL, make_web_client
from bot.text.front import Blocks, FrontError, MessageRef
from bot.text.mrkdwn import (
    BLOCKS_MAX,
    MESSAGE_TEXT_MAX,
    cannot_post_text,
    cut_text,
    fit_blocks,
)

log = logging.getLogger(__name__)

# Slack's answers that mean the channel itself refuses the bot.
CHANNEL_ERRORS = frozenset({"not_in_channel", "channel_not_found", "is_archived"})
CAN_POST_TTL_S = 60.0  # a channel the bot could post in is not asked about again this soon
CHECK_TIMEOUT_S = 1.0  # a /train does not wait longer than this for conversations.info


class SlackError(FrontError):
    """A Web API call failed for good (after retries). ``error`` is Slack's error code."""

    def __init__(self, *, method: str, error: str, status: int = 0) -> None:
        self.method = method
        self.error = error
        self.status = status
        super().__init__(str(self))

    def __str__(self) -> str:
        status = f" (HTTP {self.status})" if self.status else ""
        return f"Slack {self.method} failed: {self.error}{status}"

    @property
    def channel_problem(self) -> bool:
        return self.error in CHANNEL_ERRORS

    @property
    def reason(self) -> str:
        return self.error


@dataclass
class _ThreadLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class SlackFront:
    """``bot.text.front.Front`` on Slack. Texts passed in are already escaped mrkdwn."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        self._threads: dict[tuple[str, str], _ThreadLock] = {}
        self._can_post: dict[str, float] = {}  # channel -> when the bot last could post there
        self.error_observers: list[Callable[[str, str], None]] = []  # (method, error code)

    def _failed(self, method: str, code: str) -> None:
        for observer in self.error_observers:
            observer(method, code)

    @asynccontextmanager
    async def _in_order(self, channel: str, thread_ts: str) -> AsyncIterator[None]:
        key = (channel, thread_ts)
        entry = self._threads.setdefault(key, _ThreadLock())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._threads[key]

    async def _call(self, method: str, call: Awaitable[AsyncSlackResponse]) -> dict[str, Any]:
        try:
            response = await call
        except SlackApiError as error:
            status = int(getattr(error.response, "status_code", 0) or 0)
            code = _error_code(error.response)
            log.error("Slack %s failed: %s (HTTP %d)", method, code, status)
            self._failed(method, code)
            raise SlackError(method=method, error=code, status=status) from error
        except (aiohttp.ClientError, TimeoutError) as error:
            log.error("Slack %s unreachable: %s", method, type(error).__name__)
            self._failed(method, "unreachable")
            raise SlackError(method=method, error=f"unreachable: {error}") from error
        return dict(response.data) if isinstance(response.data, dict) else {}

    async def post(
        self, channel: str, text: str, *, blocks: Blocks | None = None, thread_ts: str = ""
    ) -> MessageRef:
        args = _message_args(text, blocks)
        if thread_ts:
            args["thread_ts"] = thread_ts
        async with self._in_order(channel, thread_ts):
            try:
                data = await self._call(
                    "chat.postMessage",
                    self.client.chat_postMessage(
                        channel=channel, unfurl_links=False, unfurl_media=False, **args
                    ),
                )
            except SlackError as error:
                if error.channel_problem:
                    self._can_post.pop(channel, None)
                raise
        return MessageRef(channel=str(data.get("channel", channel)), ts=str(data["ts"]))

    async def update(self, ref: MessageRef, text: str, *, blocks: Blocks | None = None) -> None:
        args = _message_args(text, blocks)
        if blocks is None:
            args["blocks"] = []  # a text-only update replaces the old blocks
        async with self._in_order(ref.channel, ref.ts):
            await self._call(
                "chat.update", self.client.chat_update(channel=ref.channel, ts=ref.ts, **args)
            )

    async def post_ephemeral(
        self, channel: str, user: str, text: str, *, blocks: Blocks | None = None
    ) -> None:
        async with self._in_order(channel, f"ephemeral:{user}"):
            args = _message_args(text, blocks)
            await self._call(
                "chat.postEphemeral",
                self.client.chat_postEphemeral(channel=channel, user=user, **args),
            )

    async def upload(
        self, channel: str, thread_ts: str, *, filename: str, content: bytes, title: str
    ) -> None:
        async with self._in_order(channel, thread_ts):
            try:
                await self.client.files_upload_v2(
                    channel=channel,
                    thread_ts=thread_ts or None,
                    filename=filename,
                    content=content,
                    title=title,
                )
            except SlackApiError as error:
                code = _error_code(error.response)
                log.error("Slack file upload %s to %s failed: %s", filename, channel, code)
                self._failed("files.upload_v2", code)
                raise SlackError(method="files.upload_v2", error=code) from error
            except (SlackClientError, aiohttp.ClientError, TimeoutError) as error:
                log.error("Slack file upload %s to %s failed: %s", filename, channel, error)
                self._failed("files.upload_v2", "unreachable")
                raise SlackError(method="files.upload_v2", error=str(error)[:200]) from error

    async def upload_to_user(self, user: str, *, filename: str, content: bytes, title: str) -> str:
        """Upload a file into the bot's DM with ``user``; returns the DM channel id."""
        data = await self._call("conversations.open", self.client.conversations_open(users=user))
        dm = str(data["channel"]["id"])
        await self.upload(dm, "", filename=filename, content=content, title=title)
        return dm

    async def post_to_user(self, user: str, text: str) -> None:
        """A direct message from the bot to ``user`` (``conversations.open``, then a post)."""
        await self.post(await self.open_dm(user), text)

    async def open_dm(self, user: str) -> str:
        """The id of the bot's direct message with ``user`` (``conversations.open``)."""
        data = await self._call("conversations.open", self.client.conversations_open(users=user))
        return str(data["channel"]["id"])

    async def can_post(self, channel: str) -> str:
        """ "" when the bot may post in ``channel``, else why not and what to do (mrkdwn).

        Asks ``conversations.info`` (a "yes" is remembered for ``CAN_POST_TTL_S``; a
        "no" is not, so an invitation counts at once). When Slack cannot say within
        ``CHECK_TIMEOUT_S`` or the app may not ask, the answer is "yes": the launch
        goes ahead, and should its channel refuse the bot, its owner hears of it.
        """
        checked = self._can_post.get(channel)
        if checked is not None and time.monotonic() - checked < CAN_POST_TTL_S:
            return ""
        try:
            info, scopes = await asyncio.wait_for(self._conversation(channel), CHECK_TIMEOUT_S)
        except TimeoutError:
            log.warning(
                "conversations.info on %s took over %.1f s; not checked", channel, CHECK_TIMEOUT_S
            )
            return ""
        except SlackError as error:
            if error.channel_problem:
                return cannot_post_text(channel, error.error)
            log.warning("could not check whether I may post in %s: %s", channel, error)
            self._can_post[channel] = time.monotonic()  # not asked again at once
            return ""
        problem = _posting_problem(info, scopes)
        if problem:
            log.info("refusing a launch in %s: %s", channel, problem)
            return cannot_post_text(channel, problem)
        self._can_post[channel] = time.monotonic()
        return ""

    async def _conversation(self, channel: str) -> tuple[dict[str, Any], frozenset[str]]:
        """``conversations.info``'s channel, and the app's scopes (from ``X-OAuth-Scopes``)."""
        method = "conversations.info"
        try:
            response = await self.client.conversations_info(channel=channel)
        except SlackApiError as error:
            status = int(getattr(error.response, "status_code", 0) or 0)
            raise SlackError(
                method=method, error=_error_code(error.response), status=status
            ) from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise SlackError(method=method, error=f"unreachable: {error}") from error
        scopes: set[str] = set()
        for name, value in (response.headers or {}).items():
            if name.lower() == "x-oauth-scopes":
                values = value if isinstance(value, list) else [value]
                scopes |= {s.strip() for v in values for s in str(v).split(",") if s.strip()}
        data = response.data if isinstance(response.data, dict) else {}
        return dict(data.get("channel") or {}), frozenset(scopes)

    async def identity(self) -> tuple[str, str]:
        """``(team_id, bot user_id)`` from ``auth.test``: checks the token works."""
        data = await self._call("auth.test", self.client.auth_test())
        return str(data.get("team_id", "")), str(data.get("user_id", ""))

    async def permalink(self, ref: MessageRef) -> str:
        call = self.client.chat_getPermalink(channel=ref.channel, message_ts=ref.ts)
        data = await self._call("chat.getPermalink", call)
        return str(data["permalink"])

    async def publish_home(self, user: str, blocks: Blocks) -> None:
        """The person's App Home tab (``views.publish``)."""
        view = {"type": "home", "blocks": blocks[:BLOCKS_MAX]}
        await self._call("views.publish", self.client.views_publish(user_id=user, view=view))

    async def open_modal(
        self, trigger_id: str, title: str, blocks: Blocks, *, submit_as: str = ""
    ) -> None:
        """A modal on the person's screen (``views.open``, within 3 s of their click);
        with ``submit_as`` (its callback id) it has a Submit button."""
        view: dict[str, Any] = {
            "type": "modal",
            "title": {"type": "plain_text", "text": title[:24]},
            "close": {"type": "plain_text", "text": "Cancel" if submit_as else "Done"},
            "blocks": blocks[:BLOCKS_MAX],
        }
        if submit_as:
            view["callback_id"] = submit_as
            view["submit"] = {"type": "plain_text", "text": "Launch"}
        await self._call("views.open", self.client.views_open(trigger_id=trigger_id, view=view))

    async def update_view(self, view_id: str, view_hash: str, view: dict[str, Any]) -> None:
        """An open modal changed (``views.update``; ``view_hash`` guards against a newer one)."""
        call = self.client.views_update(view_id=view_id, hash=view_hash, view=view)
        await self._call("views.update", call)

    async def usergroup_members(self, usergroup_id: str) -> list[str]:
        call = self.client.usergroups_users_list(usergroup=usergroup_id)
        data = await self._call("usergroups.users.list", call)
        return [str(user) for user in data.get("users", [])]

    async def user_email(self, user_id: str) -> str | None:
        """The profile's email, only when Slack says the person confirmed it
        (``is_email_confirmed`` on the user object of ``users.info``) and the account is
        a live person's (not ``deleted``, not a bot); None otherwise. The fields are the
        user object's (https://docs.slack.dev/reference/objects/user-object:
        ``is_email_confirmed``, ``deleted``, ``is_bot``, ``profile.email``)."""
        data = await self._call("users.info", self.client.users_info(user=user_id))
        found = data.get("user") or {}
        email = (found.get("profile") or {}).get("email")
        if not email or found.get("is_email_confirmed") is not True:
            return None
        if found.get("deleted") or found.get("is_bot"):
            return None
        return str(email)

    async def user_tz(self, user_id: str) -> str:
        """The person's time zone: ``tz`` of the user object of ``users.info``, an IANA
        name such as ``Europe/Amsterdam`` (https://docs.slack.dev/reference/objects/user-object)."""
        data = await self._call("users.info", self.client.users_info(user=user_id))
        return str((data.get("user") or {}).get("tz") or "")


def _message_args(text: str, blocks: Blocks | None) -> dict[str, Any]:
    args: dict[str, Any] = {"text": cut_text(text, MESSAGE_TEXT_MAX)}
    if blocks is not None:
        args["blocks"] = fit_blocks(blocks)
    return args


def _posting_problem(info: dict[str, Any], scopes: frozenset[str]) -> str:
    """Why the bot may not post in the channel ``conversations.info`` described ("" if it may)."""
    if info.get("is_archived"):
        return "is_archived"
    if info.get("is_member") or info.get("is_im"):
        return ""
    if not info.get("is_private") and "chat:write.public" in scopes:
        return ""
    return "not_in_channel"


def _error_code(response: Any) -> str:
    data = getattr(response, "data", None)
    if isinstance(data, dict):
        return str(data.get("error") or "unknown_error")
    return str(data)[:200] if data else "unknown_error"


@asynccontextmanager
async def open_front(
    bot_token: str, *, api_url: str = DEFAULT_API_URL, backoff_base_s: float = 0.5
) -> AsyncIterator[SlackFront]:
    """A ``SlackFront`` with its own HTTP connection pool, closed on exit."""
    async with aiohttp.ClientSession() as session:
        client = make_web_client(
            bot_token, api_url=api_url, session=session, backoff_base_s=backoff_base_s
        )
        yield SlackFront(client)


def observe_slack_errors(front: object, observer: Callable[[str, str], None]) -> bool:
    """Tell ``observer`` of each failed Web API call (method, error code) when ``front``
    is, or wraps, a :class:`SlackFront`; False when it is another front end."""
    inner = front
    while not isinstance(inner, SlackFront) and hasattr(inner, "inner"):
        inner = inner.inner
    if isinstance(inner, SlackFront):
        inner.error_observers.append(observer)
        return True
    return False
