"""Who calls the API: ``Authorization: Bearer <token>``, a personal token checked against
its hash in Redis, its expiry and its scopes. Every refusal is a 401 (or 403 for a scope)
with a sentence saying what was wrong and what would be right."""

from __future__ import annotations

import time

from bot.store.store import Store
from bot.store.tokens import TOKEN_PREFIX, TokenRecord

MAKE_ONE = (
    "Make one in trainbot's App Home in Slack (Create an API token), or ask an operator "
    "(trainbot token create --user <your Slack user id>)."
)


class HttpRefused(Exception):
    """The request may not go on: its HTTP status and the sentence to answer with."""

    def __init__(self, status: int, text: str, *, code: str = "invalid_token") -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.code = code


def bearer(header: str) -> str:
    """The token of an ``Authorization`` header; HttpRefused (401) when there is none."""
    if not header.strip():
        raise HttpRefused(
            401,
            f"No API token: send the header `Authorization: Bearer <token>`. {MAKE_ONE}",
            code="missing_token",
        )
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HttpRefused(
            401,
            "The Authorization header must read `Bearer <token>` (a trainbot token starts "
            f"{TOKEN_PREFIX}). {MAKE_ONE}",
        )
    return token.strip()


async def caller(store: Store, header: str, scope: str, now: float | None = None) -> TokenRecord:
    """The record of the token the request presents, if it is known, unexpired and allows
    ``scope``; otherwise HttpRefused, saying why."""
    token = bearer(header)
    record = await store.tokens.token_record(token)
    if record is None:
        raise HttpRefused(
            401,
            "This API token is not known to trainbot: it was revoked, mistyped, or made by "
            f"another trainbot. {MAKE_ONE}",
        )
    if record.expired(now):
        day = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(record.expires_at))
        raise HttpRefused(401, f"API token {record.id} expired on {day}. {MAKE_ONE}")
    if not record.allows(scope):
        raise HttpRefused(
            403,
            f"API token {record.id} may {' and '.join(record.scopes)} only; this request needs "
            f"the {scope} scope. Make a token with it in the App Home.",
            code="insufficient_scope",
        )
    return record
