"""Asks: cluster work the web role hands the workers (it holds no SSH key), and their
answers (see :mod:`bot.gateway.asks`). An ask travels signed, as the text the asker
wrote (:mod:`bot.gateway.ask_wire`): the store neither reads nor changes it."""

from __future__ import annotations

import json
import math
from typing import Any

from bot.store import keys
from bot.store.base import Section, rides

MAX_TAKEN_BYTES = 65536  # anything longer on the list is cut here (and then refused)


class Asks(Section):
    """Asks and answers."""

    @rides
    async def push_ask(self, sealed: str) -> None:
        """Put a sealed ask on the list every worker takes from (see bot.gateway.asks)."""
        await self.redis.rpush(keys.ASKS, sealed)

    @rides
    async def take_ask(self, timeout_s: float) -> str | None:
        """The oldest ask as it was written, waiting up to ``timeout_s`` (None: none came)."""
        found = await self.redis.blpop([keys.ASKS], timeout=timeout_s)
        if found is None:
            return None
        raw = found[1]
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
        return text[:MAX_TAKEN_BYTES]

    @rides
    async def first_ask(self, ask_id: str, keep_s: float) -> bool:
        """Whether ``ask_id`` is taken for the first time (remembered ``keep_s``, at least 1 s)."""
        seen = await self.redis.set(
            keys.ask_seen(ask_id), "1", nx=True, ex=max(1, math.ceil(keep_s))
        )
        return bool(seen)

    @rides
    async def put_answer(self, ask_id: str, answer: dict[str, Any], keep_s: int = 60) -> None:
        """A worker's answer, kept ``keep_s`` for the asker to take."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(keys.answer(ask_id), self.core.redact(json.dumps(answer)))
            pipe.expire(keys.answer(ask_id), keep_s)
            await pipe.execute()

    @rides
    async def wait_answer(self, ask_id: str, timeout_s: float) -> dict[str, Any] | None:
        """The answer to ``ask_id``, waiting up to ``timeout_s`` (None: no worker answered)."""
        found = await self.redis.blpop([keys.answer(ask_id)], timeout=timeout_s)
        return None if found is None else dict(json.loads(found[1]))
