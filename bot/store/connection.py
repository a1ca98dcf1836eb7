"""Reaching Redis: the client (a plain URL's pool, or the primary through Sentinel),
and which errors mean a failover worth riding through (:mod:`bot.store.base`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bot.settings.env import Target

REDIS_MAX_CONNECTIONS = 100
REDIS_POOL_WAIT_S = 10.0
REDIS_CONNECT_TIMEOUT_S = 5.0
REDIS_SOCKET_TIMEOUT_S = 10.0  # longer than any blocking read (1 s) the bot does
SENTINEL_TIMEOUT_S = 1.0

FAILOVER_CODES = ("READONLY", "MASTERDOWN", "LOADING", "NOREPLICAS")


class _BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """The primary's connections through Sentinel, bounded like a plain URL's: a burst
    waits for a connection instead of opening one per caller (each new connection asks
    the sentinels where the primary is first)."""


@asynccontextmanager
async def open_redis(
    target: Target, *, decode_responses: bool = True
) -> AsyncIterator[aioredis.Redis]:
    """A client of ``target``'s Redis, closed (with its sentinels) when the block ends.
    ``decode_responses=False`` gives bytes (a backup's ``DUMP`` payloads)."""
    password = target.password.get_secret_value() if target.password else None
    user = {"username": target.username} if target.username else {}  # a role's ACL user
    sentinel: Sentinel | None = None
    if target.sentinels:
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            list(target.sentinels),
            sentinel_kwargs={
                "socket_timeout": SENTINEL_TIMEOUT_S,
                "socket_connect_timeout": SENTINEL_TIMEOUT_S,
            },
            socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
            socket_timeout=REDIS_SOCKET_TIMEOUT_S,
        )
        client: aioredis.Redis = sentinel.master_for(
            target.service,
            redis_class=aioredis.Redis,
            connection_pool_class=_BlockingSentinelPool,
            max_connections=REDIS_MAX_CONNECTIONS,
            timeout=REDIS_POOL_WAIT_S,
            decode_responses=decode_responses,
            health_check_interval=30,
            password=password,
            db=target.db,
            **user,
        )
    else:
        # A blocking pool: when every connection is busy (a burst of slash commands), a
        # caller waits for one instead of failing with "Too many connections".
        pool = aioredis.BlockingConnectionPool.from_url(
            target.url,
            decode_responses=decode_responses,
            health_check_interval=30,
            max_connections=REDIS_MAX_CONNECTIONS,
            timeout=REDIS_POOL_WAIT_S,
            socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
            socket_timeout=REDIS_SOCKET_TIMEOUT_S,
            **({"password": password} if password else {}),
            **user,
        )
        client = aioredis.Redis.from_pool(pool)
    try:
        yield client
    finally:
        await client.aclose()
        await client.connection_pool.disconnect()
        for each in sentinel.sentinels if sentinel else []:
            await each.aclose()


def failover_reason(exc: BaseException) -> str:
    """Why ``exc`` is worth a retry against the next primary ("" when it is not)."""
    if isinstance(exc, ReadOnlyError):
        return "readonly"
    if isinstance(exc, ResponseError):
        text = str(exc)
        for code in FAILOVER_CODES:
            if text.startswith(code) or f"caused error: {code}" in text:
                return code.lower()
        return ""
    if isinstance(exc, RedisTimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, RedisConnectionError | OSError):
        return "connection"
    return ""
