"""The slack-bolt app: slash commands and button clicks in, ``Incoming`` out.

Listeners only acknowledge and hand off. Each request starts the ``Handler``
and waits at most ``ack_budget_s`` (default 2 s, inside Slack's 3 s): an answer
in time becomes the ack (shown only to the asker); otherwise the ack says
"Working on it…" and the answer follows with ``chat.postEphemeral`` (or the
request's ``response_url`` when the bot may not post in that channel).

A ``Reply`` with ``modal`` set opens a modal instead (a new API token, shown once; the
launch form of Edit & relaunch and of the shortcut "Launch training", whose submission
comes back through ``on_view``: refused in time, the modal stays open with the reason
under its input). A ``Reply`` carrying a file is sent to the asker in a direct message
with the bot (files cannot be ephemeral, and a log file is nobody else's business); the
ephemeral text says so. Events are acknowledged and ignored, except a polite hint on
``app_mention``, a help card with buttons when the app itself joins a channel
(``member_joined_channel``), and user group changes (``subteam_members_changed``), which
make the core ask for that group's members again; Events API retries of an event already
seen are dropped. With ``allowed_team_ids`` (the config's ``policy.workspaces``),
requests from any other workspace are refused first.

The Slack app needs what slack-manifest.yml declares (tests/test_manifest.py sends
its every command, event and button to the app ``build_app`` makes); optionally
``chat:write.public``. Socket Mode also needs an app-level token with
``connections:write``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack import modals, replies
from bot.slack.incoming import (
    incoming_from_action,
    incoming_from_command,
    incoming_from_shortcut,
    team_of,
)
from bot.slack.webapi import SlackError, SlackFront
from bot.text.actions import (
    ACTION_CKPT_NEW_RUN,
    ACTION_EDIT_RELAUNCH,
    ACTION_EVALUATE,
    ACTION_FORM_CHECK,
    ACTION_NODE_DRAIN,
    ACTION_PREFIX,
    ACTION_PREFS,
    ACTION_RECORD,
    ACTION_TOKEN,
    SHORTCUT_LAUNCH,
    VIEW_PREFIX,
)
from bot.text.front import GROUP_EVENTS, HOME_EVENT, Handler, Incoming, Reply
from bot.text.mrkdwn import HELP_CARD_TEXT, escape, help_card, unescape
from commands.registry import COMMAND_NAMES

log = logging.getLogger(__name__)

JOINED_EVENT = "member_joined_channel"  # the app's own join: the help card

COMMANDS = COMMAND_NAMES  # the slash commands the app listens to (commands.registry)
WORKING_TEXT = "Working on it…"
FAILED_TEXT = (
    "Something went wrong on my side while answering that; it is logged. Please try again."
)
MENTION_HINT = "I answer slash commands: " + ", ".join(f"`{c}`" for c in COMMANDS) + "."
_SEEN_EVENTS_MAX = 1000
T = TypeVar("T")


class Listeners:
    """The listener bodies, and the work still running after its ack (see ``drain``)."""

    def __init__(
        self,
        handler: Handler,
        front: SlackFront,
        *,
        ack_budget_s: float = 2.0,
        allowed_team_ids: tuple[str, ...] = (),
    ) -> None:
        self.handler = handler
        self.front = front
        self.ack_budget_s = ack_budget_s
        self.allowed_team_ids = frozenset(allowed_team_ids)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._seen_events: OrderedDict[str, None] = OrderedDict()

    def _spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _answer(self, incoming: Incoming) -> Reply:
        try:
            return await self.handler(incoming)
        except Exception:
            log.exception(
                "handler failed on %s%s from %s",
                incoming.command,
                incoming.action_id,
                incoming.user_id,
            )
            return Reply(text=FAILED_TEXT, error=True)

    async def on_command(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        incoming = incoming_from_command(body)
        log.info("%s from %s in %s", incoming.command, incoming.user_id, incoming.channel_id)
        task = self._spawn(self._answer(incoming))
        done, _ = await asyncio.wait({task}, timeout=self.ack_budget_s)
        if not done:
            await ack(text=WORKING_TEXT, response_type="ephemeral")
            self._spawn(
                replies.deliver_later(self.front, incoming, task, str(body.get("response_url", "")))
            )
            return
        reply = task.result()
        if reply.file_content:
            await ack(
                response_type="ephemeral", **replies.reply_args(reply, replies.file_note(reply))
            )
            self._spawn(replies.send_file_or_say_why(self.front, incoming, reply))
        else:
            await ack(response_type="ephemeral", **replies.reply_args(reply))

    async def on_action(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        incoming = incoming_from_action(body)
        log.info("%s from %s in %s", incoming.action_id, incoming.user_id, incoming.channel_id)
        answer = self._spawn(self._answer(incoming))
        if incoming.action_id.startswith(ACTION_PREFS):  # a setting in the App Home
            self._spawn(self._home_after(incoming, answer))
            return
        if incoming.action_id.startswith(ACTION_TOKEN):  # API tokens in the App Home
            self._spawn(self._modal_after(incoming, answer, home=True))
            return
        if incoming.action_id in (
            ACTION_CKPT_NEW_RUN,
            ACTION_EDIT_RELAUNCH,
            ACTION_EVALUATE,
            ACTION_NODE_DRAIN,
            ACTION_RECORD,
        ):  # a modal
            self._spawn(self._modal_after(incoming, answer, home=False))
            return
        if incoming.action_id == ACTION_FORM_CHECK:  # typed in the launch form
            self._spawn(self._checked(body, answer))
            return
        self._spawn(
            replies.deliver_later(self.front, incoming, answer, str(body.get("response_url", "")))
        )

    async def _home_after(self, incoming: Incoming, answer: asyncio.Task[Reply]) -> None:
        """A setting changed in the App Home: the tab shows it (or why it did not work)."""
        reply = await answer
        if reply.error:
            log.info("App Home setting of %s refused: %s", incoming.user_id, reply.text)
        await self._publish_home(incoming.user_id)

    async def _modal_after(
        self, incoming: Incoming, answer: asyncio.Task[Reply], *, home: bool
    ) -> None:
        """A click answered with a modal (a new API token shown once, the launch form);
        a refusal is said in a modal too. ``home``: the App Home is built again."""
        await modals.show(self.front, incoming, await answer)
        if home:
            await self._publish_home(incoming.user_id)

    async def on_shortcut(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """The global shortcut "Launch training": the launch form."""
        await ack()
        incoming = incoming_from_shortcut(body)
        log.info("%s from %s", incoming.action_id, incoming.user_id)
        self._spawn(self._modal_after(incoming, self._spawn(self._answer(incoming)), home=False))

    async def on_view(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """A launch form submitted: its input goes to the core; a refusal in time keeps
        the modal open, showing why under the input; otherwise it closes and the answer
        comes by DM."""
        incoming, problem = await modals.submitted(self.front, body)
        log.info("%s from %s", incoming.action_id, incoming.user_id)
        if problem:
            await ack(response_action="errors", errors={incoming.action_value: problem})
            return
        task = self._spawn(self._answer(incoming))
        done, _ = await asyncio.wait({task}, timeout=self.ack_budget_s)
        if done and task.result().error and incoming.action_value:
            why = unescape(task.result().text)[:1900]
            await ack(response_action="errors", errors={incoming.action_value: why})
            return
        await ack()
        self._spawn(self._tell_later(incoming, task))

    async def _checked(self, body: dict[str, Any], answer: asyncio.Task[Reply]) -> None:
        await modals.show_check(self.front, body, await answer)

    async def _tell_later(self, incoming: Incoming, answer: asyncio.Task[Reply]) -> None:
        await modals.tell(self.front, incoming, await answer)

    async def on_unknown_command(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        command = escape(str(body.get("command", "")))
        await ack(text=f"I don't know {command}. {MENTION_HINT}", response_type="ephemeral")

    async def on_mention(self, ack: AsyncAck, event: dict[str, Any]) -> None:
        await ack()
        channel, user = str(event.get("channel", "")), str(event.get("user", ""))
        if channel and user:
            try:
                await self.front.post_ephemeral(channel, user, MENTION_HINT)
            except SlackError as error:
                log.info("could not answer a mention in %s: %s", channel, error)

    async def on_other_event(
        self, ack: AsyncAck, event: dict[str, Any], context: dict[str, Any]
    ) -> None:
        await ack()
        kind = str(event.get("type", ""))
        if kind == HOME_EVENT and event.get("tab", "home") == "home":
            await self._publish_home(str(event.get("user", "")))
            return
        if kind == JOINED_EVENT:
            await self._welcome(event, str(context.get("bot_user_id") or ""))
            return
        if kind in GROUP_EVENTS:
            subteam = event.get("subteam") or {}
            group = str(event.get("subteam_id") or subteam.get("id", ""))
            await self._answer(Incoming(user_id="", channel_id="", event=kind, action_value=group))

    async def _welcome(self, event: dict[str, Any], bot_user: str) -> None:
        """The app itself joined a channel: post the help card there, once. Anyone else
        joining is no business of the bot's."""
        channel = str(event.get("channel", ""))
        if not bot_user or str(event.get("user", "")) != bot_user or not channel:
            return
        try:
            await self.front.post(channel, HELP_CARD_TEXT, blocks=help_card())
        except SlackError as error:
            log.info("could not post the help card in %s: %s", channel, error)

    async def _publish_home(self, user: str) -> None:
        """The person opened the App Home tab: their launches and the clusters, fresh."""
        if not user:
            return
        reply = await self._answer(Incoming(user_id=user, channel_id="", event=HOME_EVENT))
        if reply.error or not reply.blocks:
            return  # nothing new (opened again within seconds), or it failed (logged)
        try:
            await self.front.publish_home(user, reply.blocks)
        except SlackError as error:
            log.info("could not publish the App Home of %s: %s", user, error)

    async def only_allowed_teams(
        self, body: dict[str, Any], next: Callable[[], Awaitable[None]]
    ) -> BoltResponse | None:
        """Requests from a Slack workspace not in ``policy.workspaces`` are refused."""
        if self.allowed_team_ids:
            team = team_of(body)
            if team not in self.allowed_team_ids:
                log.warning("refused a request from workspace %r", team[:32])
                text = "This trainbot serves another Slack workspace; ask your own admins."
                if body.get("command"):
                    return BoltResponse(
                        status=200,
                        body=json.dumps({"response_type": "ephemeral", "text": text}),
                        headers={"content-type": "application/json"},
                    )
                return BoltResponse(status=200, body="")
        await next()
        return None

    async def drop_event_retries(
        self, body: dict[str, Any], next: Callable[[], Awaitable[None]]
    ) -> BoltResponse | None:
        """Events API retries carry the same ``event_id``: acknowledge and drop them."""
        event_id = str(body.get("event_id", "")) if body.get("type") == "event_callback" else ""
        if event_id:
            if event_id in self._seen_events:
                log.info("dropping a retried delivery of event %s", event_id)
                return BoltResponse(status=200, body="")
            self._seen_events[event_id] = None
            while len(self._seen_events) > _SEEN_EVENTS_MAX:
                self._seen_events.popitem(last=False)
        await next()
        return None

    async def drain(self, timeout_s: float) -> None:
        """Let answers in flight finish for up to ``timeout_s``, then cancel the rest."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        pending: set[asyncio.Task[Any]] = set()
        while self._tasks:  # finishing one answer may start its delivery
            left = deadline - asyncio.get_running_loop().time()
            _, pending = await asyncio.wait(set(self._tasks), timeout=max(left, 0))
            if pending:
                break
        for task in pending:
            task.cancel()
        if pending:
            log.warning("cancelled %d unfinished request(s) at shutdown", len(pending))


def build_app(
    client: AsyncWebClient,
    listeners: Listeners,
    *,
    signing_secret: str = "",
) -> AsyncApp:
    """The bolt app. Without ``signing_secret`` (Socket Mode) requests are not verified."""
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        request_verification_enabled=bool(signing_secret),
        ssl_check_enabled=bool(signing_secret),
        url_verification_enabled=bool(signing_secret),
        logger=logging.getLogger("slack_bolt"),
    )
    app.middleware(listeners.only_allowed_teams)
    app.middleware(listeners.drop_event_retries)
    known = "|".join(re.escape(c) for c in COMMANDS)
    app.command(re.compile(f"^({known})$"))(listeners.on_command)
    app.command(re.compile(".*"))(listeners.on_unknown_command)
    app.action(re.compile("^" + re.escape(ACTION_PREFIX)))(listeners.on_action)
    app.view(re.compile("^" + re.escape(VIEW_PREFIX)))(listeners.on_view)
    app.shortcut(SHORTCUT_LAUNCH)(listeners.on_shortcut)
    app.event("app_mention")(listeners.on_mention)
    app.event(re.compile(".*"))(listeners.on_other_event)
    return app
