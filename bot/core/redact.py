"""Keeping secret values out of what trainbot posts, logs and stores.

One :class:`Redactor`, built from every secret value the process holds (job
secrets, the PagerDuty key, the Slack tokens and signing secret), replaces each
value and its common encodings (base64 with any alignment, URL-encoding, hex,
JSON-escaped) with ``[redacted]``. It sits at three chokepoints:

- what is posted: :class:`RedactingFront` wraps the front end given to the core,
  the notifier and the pager, and the core redacts its replies;
- what is logged: :class:`RedactingFilter` on the log handlers;
- what is stored: the store redacts launch records and outbox entries.

A job's stderr after a failed submit, a log tail or an exception text may echo
what the job was given; none of it gets further than the cluster.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

from bot.text.front import Blocks, Front, MessageRef

MASK = "[redacted]"
MIN_SECRET_CHARS = 6  # shorter values would mangle ordinary text; the config check warns


def _encodings(secret: str) -> set[str]:
    raw = secret.encode()
    forms = {
        secret,
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret, safe=""),
        binascii.hexlify(raw).decode(),
        binascii.hexlify(raw).decode().upper(),
        json.dumps(secret)[1:-1],
    }
    # base64 of a value inside a longer stream starts at any of three alignments;
    # keep the characters that depend only on the secret's own bytes.
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * shift + raw).decode().rstrip("=")
            start = (shift * 4 + 2) // 3  # chars touched by the padding bytes
            end = len(text) - (1 if (shift + len(raw)) % 3 else 0)
            core = text[start:end]
            if len(core) >= MIN_SECRET_CHARS:
                forms.add(core)
    return {f for f in forms if len(f) >= MIN_SECRET_CHARS}


class Redactor:
    """Replaces every configured secret value, in any of its encodings, with ``[redacted]``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret and len(secret) >= MIN_SECRET_CHARS:
                forms |= _encodings(secret)
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)

    def data(self, value: Any) -> Any:
        """Strings anywhere inside lists and dicts (Slack blocks) redacted."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, list):
            return [self.data(v) for v in value]
        if isinstance(value, dict):
            return {k: self.data(v) for k, v in value.items()}
        return value

    def blob(self, content: bytes) -> bytes:
        """A file's bytes: text files redacted, others (a PNG) left alone."""
        try:
            text = content.decode()
        except UnicodeDecodeError:
            return content
        return self(text).encode()


class RedactingFilter(logging.Filter):
    """A log handler filter: the formatted message and traceback, redacted."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = self.redactor(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        return True


def install_log_filter(redactor: Redactor) -> RedactingFilter:
    """Put the filter on every handler of the root logger; returns it for removal."""
    flt = RedactingFilter(redactor)
    for handler in logging.getLogger().handlers:
        handler.addFilter(flt)
    return flt


def remove_log_filter(flt: RedactingFilter) -> None:
    for handler in logging.getLogger().handlers:
        handler.removeFilter(flt)


class RedactingFront:
    """A :class:`~bot.text.front.Front` whose every text, block and text file is redacted."""

    def __init__(self, front: Front, redactor: Redactor) -> None:
        self.inner = front
        self.redactor = redactor

    def _blocks(self, blocks: Blocks | None) -> Blocks | None:
        return None if blocks is None else list(self.redactor.data(blocks))

    async def post(
        self, channel: str, text: str, *, blocks: Blocks | None = None, thread_ts: str = ""
    ) -> MessageRef:
        return await self.inner.post(
            channel, self.redactor(text), blocks=self._blocks(blocks), thread_ts=thread_ts
        )

    async def update(self, ref: MessageRef, text: str, *, blocks: Blocks | None = None) -> None:
        await self.inner.update(ref, self.redactor(text), blocks=self._blocks(blocks))

    async def post_ephemeral(
        self, channel: str, user: str, text: str, *, blocks: Blocks | None = None
    ) -> None:
        await self.inner.post_ephemeral(
            channel, user, self.redactor(text), blocks=self._blocks(blocks)
        )

    async def upload(
        self, channel: str, thread_ts: str, *, filename: str, content: bytes, title: str
    ) -> None:
        await self.inner.upload(
            channel,
            thread_ts,
            filename=filename,
            content=self.redactor.blob(content),
            title=self.redactor(title),
        )

    async def permalink(self, ref: MessageRef) -> str:
        return await self.inner.permalink(ref)

    async def usergroup_members(self, usergroup_id: str) -> list[str]:
        return await self.inner.usergroup_members(usergroup_id)

    async def user_email(self, user_id: str) -> str | None:
        return await self.inner.user_email(user_id)

    def __getattr__(self, name: str) -> Any:  # front-specific extras (the console's lines)
        return getattr(self.inner, name)
