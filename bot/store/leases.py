"""Leases: a name held by one process at a time (a cluster's poller, the notifier, a
worker's launch), kept while its holder renews it."""

from __future__ import annotations

from bot.store import keys
from bot.store.base import Section, rides

_RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)

_RENEW = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
)


class Leases(Section):
    """Leases."""

    @rides
    async def acquire(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take or keep the lease ``name``; True while ``owner`` holds it."""
        key = keys.lease(name)
        if await self.redis.set(key, owner, nx=True, px=ttl_ms):
            return True
        return bool(await self.redis.eval(_RENEW, 1, key, owner, str(ttl_ms)))

    @rides
    async def release(self, name: str, owner: str) -> None:
        await self.redis.eval(_RELEASE, 1, keys.lease(name), owner)

    @rides
    async def lease_holder(self, name: str) -> str:
        """Who holds the lease ``name`` now ("" when nobody)."""
        return str(await self.redis.get(keys.lease(name)) or "")
