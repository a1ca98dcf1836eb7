"""People: their notification preferences and the launches they watch."""

from __future__ import annotations

from bot.lifecycle.prefs import Prefs
from bot.store import keys
from bot.store.base import Section, rides


class PersonSettings(Section):
    """A person's notification preferences and the launches they watch."""

    @rides
    async def prefs(self, user_id: str) -> Prefs:
        """A person's preferences (the defaults until they change one)."""
        raw = await self.redis.get(keys.prefs(user_id))
        return Prefs.model_validate_json(raw) if raw else Prefs()

    @rides
    async def set_prefs(self, user_id: str, prefs: Prefs) -> None:
        await self.redis.set(keys.prefs(user_id), prefs.model_dump_json())

    @rides
    async def watch(self, launch_id: str, user_id: str) -> bool:
        """``user_id`` follows ``launch_id``; False when they already did."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.sadd(keys.watchers(launch_id), user_id)
            pipe.sadd(keys.watching(user_id), launch_id)
            added, _ = await pipe.execute()
        return bool(added)

    @rides
    async def unwatch(self, launch_id: str, user_id: str) -> bool:
        """``user_id`` stops following ``launch_id``; False when they did not follow it."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.srem(keys.watchers(launch_id), user_id)
            pipe.srem(keys.watching(user_id), launch_id)
            removed, _ = await pipe.execute()
        return bool(removed)

    @rides
    async def watchers(self, launch_id: str) -> list[str]:
        return sorted(str(u) for u in await self.redis.smembers(keys.watchers(launch_id)))

    @rides
    async def watching(self, user_id: str) -> list[str]:
        return sorted(str(i) for i in await self.redis.smembers(keys.watching(user_id)))
