"""How an answer reaches the person who asked in Slack, after the ack: ephemeral in the
channel (else through the command's ``response_url``), and a file to their DM with a
note saying so, or why it could not be sent (``bot.slack.app`` acks and spawns these)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.slack.webapi import SlackError, SlackFront
from bot.text.front import Incoming, Reply
from bot.text.mrkdwn import MESSAGE_TEXT_MAX, cut_text, escape, fit_blocks

log = logging.getLogger(__name__)


def reply_args(reply: Reply, note: str = "") -> dict[str, Any]:
    """The message arguments of a reply (an error marked), with ``note`` below it."""
    text = f":warning: {reply.text}" if reply.error and reply.text else reply.text
    if note:
        text = f"{text}\n{note}" if text else note
    args: dict[str, Any] = {"text": cut_text(text, MESSAGE_TEXT_MAX)}
    if reply.blocks:
        args["blocks"] = fit_blocks(reply.blocks)
    return args


def file_note(reply: Reply) -> str:
    return f"_I sent {escape(reply.file_name or 'the file')} to you in a direct message._"


def file_failed_note(error: str) -> str:
    return f":warning: _I could not send you the file ({escape(error)})._"


def is_empty(reply: Reply) -> bool:
    return not (reply.text or reply.blocks or reply.file_content)


async def deliver_later(
    front: SlackFront, incoming: Incoming, answer: asyncio.Task[Reply], response_url: str
) -> None:
    """An answer after the ack: ephemeral in the channel, else via ``response_url``."""
    reply = await answer
    if is_empty(reply):
        return
    note = ""
    if reply.file_content:
        failure = await send_file(front, incoming, reply)
        note = file_failed_note(failure) if failure else file_note(reply)
    await say(front, incoming, reply_args(reply, note), response_url)


async def say(
    front: SlackFront, incoming: Incoming, args: dict[str, Any], response_url: str
) -> None:
    """Ephemeral in the channel; where Slack refuses that, via ``response_url``."""
    try:
        await front.post_ephemeral(incoming.channel_id, incoming.user_id, **args)
        return
    except SlackError as error:
        if not response_url:
            log.error("could not deliver a reply to %s: %s", incoming.user_id, error)
            return
        log.info("chat.postEphemeral failed (%s); answering via response_url", error.error)
    try:
        webhook = AsyncWebhookClient(response_url)
        sent = await webhook.send(response_type="ephemeral", replace_original=False, **args)
    except Exception as error:  # the last way to reach the asker; never crash here
        log.error("response_url failed for %s: %s", incoming.user_id, type(error).__name__)
        return
    if sent.status_code != 200:
        log.error("response_url answered %d for %s", sent.status_code, incoming.user_id)


async def send_file(front: SlackFront, incoming: Incoming, reply: Reply) -> str:
    """Upload the reply's file to the asker's DM; the error text, or "" when sent."""
    name = reply.file_name or "trainbot.txt"
    try:
        await front.upload_to_user(
            incoming.user_id, filename=name, content=reply.file_content, title=name
        )
    except SlackError as error:
        log.error("could not send %s to %s: %s", name, incoming.user_id, error)
        return error.error
    return ""


async def send_file_or_say_why(front: SlackFront, incoming: Incoming, reply: Reply) -> None:
    """Upload the reply's file; if that fails, tell the asker why."""
    failure = await send_file(front, incoming, reply)
    if failure:
        await say(front, incoming, {"text": file_failed_note(failure)}, "")
