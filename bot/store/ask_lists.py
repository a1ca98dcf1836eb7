"""Asks: cluster work the web role hands the workers (it holds no SSH key), and their
answers (see :mod:`bot.engine.asks`)."""

from __future__ import annotations

import json
from typing import Any

from bot.store import keys
from bot.store.base import StoreBase


class Asks(StoreBase):
    """Asks and answers."""

    async def push_ask(self, ask: dict[str, Any]) -> None:
        """Put an ask on the list every worker takes from (see bot.engine.asks)."""
        await self.redis.rpush(keys.ASKS, json.dumps(ask))

    async def take_ask(self, timeout_s: float) -> dict[str, Any] | None:
        """The oldest ask, waiting up to ``timeout_s`` for one (None: none came)."""
        found = await self.redis.blpop([keys.ASKS], timeout=timeout_s)
        return None if found is None else dict(json.loads(found[1]))

    async def put_answer(self, ask_id: str, answer: dict[str, Any], keep_s: int = 60) -> None:
        """A worker's answer, kept ``keep_s`` for the asker to take."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(keys.answer(ask_id), self._redact(json.dumps(answer)))
            pipe.expire(keys.answer(ask_id), keep_s)
            await pipe.execute()

    async def wait_answer(self, ask_id: str, timeout_s: float) -> dict[str, Any] | None:
        """The answer to ``ask_id``, waiting up to ``timeout_s`` (None: no worker answered)."""
        found = await self.redis.blpop([keys.answer(ask_id)], timeout=timeout_s)
        return None if found is None else dict(json.loads(found[1]))
