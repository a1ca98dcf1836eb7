"""Modals: a reply shown in one (a new API token, the launch form), and what a submitted
modal becomes for the core.

The launch form comes from Edit & relaunch under a final line (``VIEW_RELAUNCH``: its
thread goes where the old launch's went) or from the global shortcut "Launch training"
(``VIEW_LAUNCH``: its thread goes to the person's DM with the bot, opened here, since a
shortcut has no channel).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from bot.slack.incoming import incoming_from_view
from bot.slack.webapi import SlackError, SlackFront
from bot.text.actions import VIEW_LAUNCH
from bot.text.front import Incoming, Reply
from bot.text.mrkdwn import MESSAGE_TEXT_MAX, cut_text

log = logging.getLogger(__name__)


async def show(front: SlackFront, incoming: Incoming, reply: Reply) -> None:
    """The reply in a modal (a refusal too), on the screen of the click that asked."""
    blocks, title = reply.blocks, reply.modal
    if reply.error or not title:
        blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": reply.text}}]
        title = "trainbot"
    if not (reply.text or reply.blocks) or not incoming.trigger_id:
        return
    try:
        await front.open_modal(incoming.trigger_id, title, blocks, submit_as=reply.modal_submit)
    except SlackError as error:  # a token never seen stays listed, to revoke
        log.error("could not open a modal for %s: %s", incoming.user_id, error)


async def submitted(front: SlackFront, body: dict[str, Any]) -> tuple[Incoming, str]:
    """A ``view_submission`` as ``Incoming`` for the core, and "" (or why it cannot go on:
    the launch form of the shortcut needs the person's DM, where its thread goes)."""
    incoming = incoming_from_view(body)
    if incoming.action_id != VIEW_LAUNCH:
        return incoming, ""
    try:
        return replace(incoming, channel_id=await front.open_dm(incoming.user_id)), ""
    except SlackError as error:
        log.warning("could not open the DM of %s: %s", incoming.user_id, error)
        return incoming, f"Slack did not open your DM with trainbot ({error.error}); try again."


async def tell(front: SlackFront, incoming: Incoming, reply: Reply) -> None:
    """The answer to a submitted modal that closed, by DM."""
    if not (reply.text or reply.blocks):
        return
    text = f":warning: {reply.text}" if reply.error else reply.text
    try:
        await front.post_to_user(incoming.user_id, cut_text(text, MESSAGE_TEXT_MAX))
    except SlackError as error:
        log.error("could not tell %s the answer: %s", incoming.user_id, error)


CHECK_BLOCK = "trainbot_check"


async def show_check(front: SlackFront, body: dict[str, Any], reply: Reply) -> None:
    """The launch form's check under its input, as the person types (``views.update``);
    a form typed on since (another hash) is left alone."""
    view = body.get("view") or {}
    if not view.get("id"):
        return
    blocks = [b for b in view.get("blocks") or [] if b.get("block_id") != CHECK_BLOCK]
    if reply.text:
        text = f":warning: {reply.text}" if reply.error else reply.text
        blocks.append(
            {"type": "context", "block_id": CHECK_BLOCK,
             "elements": [{"type": "mrkdwn", "text": cut_text(text, 2000)}]}
        )  # fmt: skip
    updated = {
        key: view[key]
        for key in ("type", "title", "close", "submit", "callback_id", "private_metadata")
        if key in view
    }
    updated["blocks"] = blocks
    try:
        await front.update_view(str(view["id"]), str(view.get("hash", "")), updated)
    except SlackError as error:  # hash_conflict: typed on meanwhile; the next check says it
        log.info("launch form not updated: %s", error.error)
