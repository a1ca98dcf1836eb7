"""Marks and counters every process shares: an outbox entry posted, a report posted
once, a name first seen, a counter, a launch's thread not posted yet, a channel that
refuses the bot.

The SET NX marks keep the call's op id (or a value of the caller's) so that a retry
recognises its own mark (see the note above :func:`bot.store.base.rides`).
"""

from __future__ import annotations

from bot.store import keys
from bot.store.base import OP_DONE_S, Section, rides

# Write the done-mark KEYS[2] holding KEYS[1]'s value (a counter just incremented), kept ARGV[1] s.
_MARK_WITH = "redis.call('set', KEYS[2], redis.call('get', KEYS[1]), 'EX', ARGV[1]) return 1"


class Marks(Section):
    """Marks set once, and counters."""

    @rides
    async def mark_posted(self, event_id: str) -> bool:
        """True the first time; False when this outbox entry was already posted."""
        return await self._set_once(keys.posted(event_id), None, 7 * 86400)

    @rides
    async def was_posted(self, event_id: str) -> bool:
        return bool(await self.redis.exists(keys.posted(event_id)))

    @rides
    async def mark_once(self, name: str, owner: str, ttl_s: int) -> bool:
        """True for the one caller (of any process) that set the report mark ``name``."""
        return await self._set_once(keys.report_posted(name), owner, ttl_s)

    @rides
    async def unmark(self, name: str, owner: str) -> None:
        """Let go of the report mark ``name`` when ``owner`` set it (its post failed)."""
        key = keys.report_posted(name)
        if await self.redis.get(key) == owner:
            await self.redis.delete(key)

    @rides
    async def first_seen(self, name: str, ttl_s: int) -> bool:
        """True the first time ``name`` is seen within ``ttl_s`` (shared by every process)."""
        return await self._set_once(keys.seen(name), None, ttl_s)

    @rides
    async def count(self, name: str, ttl_s: int = 86400) -> int:
        """Increment and return the counter ``name`` (kept ``ttl_s``)."""
        op = self._op()
        done = await self._redone(op)
        if done is not None:
            return int(done)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.incr(keys.dedupe(name))
            pipe.expire(keys.dedupe(name), ttl_s)
            pipe.eval(_MARK_WITH, 2, keys.dedupe(name), keys.store_op(op.id), str(OP_DONE_S))
            value, _, _ = await pipe.execute()
        return int(value)

    @rides
    async def count_thread_wait(self, launch_id: str) -> int:
        """Count one more look at a launch whose thread was not posted yet; how many so far."""
        return await self.count(f"thread-wait:{launch_id}", ttl_s=7 * 86400)

    @rides
    async def thread_waits(self, launch_id: str) -> int:
        """How many times a worker found this launch's thread not posted yet."""
        return int(await self.redis.get(keys.dedupe(f"thread-wait:{launch_id}")) or 0)

    @rides
    async def mark_bad_channel(self, launch_id: str, reason: str) -> bool:
        """Note that a launch's channel refuses the bot; True the first time."""
        return await self._set_once(keys.bad_channel(launch_id), reason, 7 * 86400)

    @rides
    async def bad_channel(self, launch_id: str) -> str:
        """Why a launch's channel refuses the bot, or "" while it is not known to."""
        return str(await self.redis.get(keys.bad_channel(launch_id)) or "")

    @rides
    async def clear_bad_channel(self, launch_id: str) -> None:
        await self.redis.delete(keys.bad_channel(launch_id))
