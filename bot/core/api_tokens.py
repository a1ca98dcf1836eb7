"""API tokens in the App Home: the person's tokens with a Revoke button each, buttons to
make one, and the new token shown once, in a modal (never in a channel, never stored)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bot.store.store import Store
from bot.store.tokens import SCOPES, TokenRecord
from bot.text.actions import ACTION_TOKEN_CREATE, ACTION_TOKEN_REVOKE
from bot.text.front import Reply
from bot.text.mrkdwn import actions, button, context, escape, section
from commands.context import User
from commands.errors import CommandError

MAX_TOKENS = 10  # a person's live tokens at once
MODAL_TITLE = "Your API token"


def _day(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at))


def home_blocks(records: Sequence[TokenRecord], now: float | None = None) -> list[dict[str, Any]]:
    """The App Home's "API tokens" part."""
    now = time.time() if now is None else now
    blocks: list[dict[str, Any]] = [section("*API tokens* (for `trainbot train`, scripts, CI)")]
    for record in records:
        state = "expired" if record.expired(now) else f"until {_day(record.expires_at)}"
        text = f"`{record.id}` · {', '.join(record.scopes)} · {state}"
        block = section(text)
        block["accessory"] = button("Revoke", ACTION_TOKEN_REVOKE, record.id, style="danger")
        blocks.append(block)
    if not records:
        blocks.append(context("No tokens. A token acts as you, by the same rules as here."))
    blocks.append(
        actions(
            button("Create an API token", ACTION_TOKEN_CREATE, ",".join(SCOPES)),
            button("Create a read-only token", ACTION_TOKEN_CREATE, "read"),
        )
    )
    return blocks


async def create(store: Store, user: User, value: str) -> Reply:
    """A new token for the person who clicked, shown once in a modal."""
    scopes = tuple(s for s in value.split(",") if s)
    if not scopes or any(s not in SCOPES for s in scopes):  # the value came back from outside
        raise CommandError(f"Unknown token scopes {value[:40]!r}; known: {', '.join(SCOPES)}.")
    live = [r for r in await store.tokens.tokens_of(user.id) if not r.expired()]
    if len(live) >= MAX_TOKENS:
        raise CommandError(
            f"You have {len(live)} API tokens already (at most {MAX_TOKENS}); revoke one first."
        )
    record, token = await store.tokens.mint_token(
        user.id, user_name=user.name, scopes=scopes, by="app-home"
    )
    text = (
        f"Your API token {record.id} ({', '.join(record.scopes)}), valid until "
        f"{_day(record.expires_at)}. It is shown only now: copy it, then close this."
    )
    blocks = [
        section(escape(text)),
        section(f"```{token}```"),
        context("export TRAINBOT_TOKEN=<it> for the trainbot CLI; revoke it here when done."),
    ]
    return Reply(text, blocks=blocks, modal=MODAL_TITLE)


async def revoke(store: Store, user: User, token_id: str) -> Reply:
    """Revoke one of the person's own tokens."""
    record = await store.tokens.revoke_token(token_id[:20], user_id=user.id)
    if record is None:
        raise CommandError(f"You have no API token {escape(token_id[:20])} (revoked already?).")
    return Reply(f"Revoked API token {record.id}.")
