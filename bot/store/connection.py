"""Reaching Redis: the client (a plain URL's pool, or the primary through Sentinel),
and which errors mean a failover worth riding through (:mod:`bot.store.base`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool
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


def tls_options(ca_file: str) -> dict[str, Any]:
    """redis-py's options for a TLS connection whose certificate ``ca_file`` (or, when "",
    the system's CAs) verifies, host name included."""
    return {"ssl": True, "ssl_cert_reqs": "required", "ssl_ca_certs": ca_file or None}


def sentinel_options(target: Target) -> dict[str, Any]:
    """How each sentinel is reached: short timeouts, its password, TLS."""
    options: dict[str, Any] = {
        "socket_timeout": SENTINEL_TIMEOUT_S,
        "socket_connect_timeout": SENTINEL_TIMEOUT_S,
    }
    if target.sentinel_password is not None:
        options["password"] = target.sentinel_password.get_secret_value()
    if target.sentinel_username:
        options["username"] = target.sentinel_username
    if target.sentinel_tls:
        options |= tls_options(target.tls_ca_file)
    return options


@asynccontextmanager
async def open_redis(
    target: Target, *, decode_responses: bool = True
) -> AsyncIterator[aioredis.Redis]:
    """A client of ``target``'s Redis, closed (with its sentinels) when the block ends.
    ``decode_responses=False`` gives bytes (a backup's ``DUMP`` payloads). Through
    Sentinel, each hop has its own secrets: the sentinels' password and TLS
    (:func:`sentinel_options`), the data nodes' password and TLS."""
    password = target.password.get_secret_value() if target.password else None
    user = {"username": target.username} if target.username else {}  # a role's ACL user
    sentinel: Sentinel | None = None
    if target.sentinels:
        data_tls = tls_options(target.tls_ca_file) if target.tls else {}
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            list(target.sentinels),
            sentinel_kwargs=sentinel_options(target),
            socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
            socket_timeout=REDIS_SOCKET_TIMEOUT_S,
            **data_tls,
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
        extra: dict[str, Any] = {"password": password} if password else {}
        if target.url.startswith("rediss://") and target.tls_ca_file:
            extra["ssl_ca_certs"] = target.tls_ca_file
        pool = aioredis.BlockingConnectionPool.from_url(
            target.url,
            decode_responses=decode_responses,
            health_check_interval=30,
            max_connections=REDIS_MAX_CONNECTIONS,
            timeout=REDIS_POOL_WAIT_S,
            socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
            socket_timeout=REDIS_SOCKET_TIMEOUT_S,
            **extra,
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


def error_text(exc: BaseException) -> str:
    """What a Redis error says, in one line and never a password. No primary named by
    the sentinels (redis-py's text would be a page of client reprs) says what to check."""
    if isinstance(exc, MasterNotFoundError):
        text = str(exc)
        why = next(
            (why for code, why in _SENTINEL_REFUSALS if code in text),
            "none of them answered, or none monitors that name",
        )
        return (
            f"no sentinel named a primary: {why}; check REDIS_SENTINELS, "
            "REDIS_SENTINEL_SERVICE, REDIS_SENTINEL_PASSWORD and REDIS_SENTINEL_TLS"
        )
    return str(exc)


_SENTINEL_REFUSALS = (
    ("AuthenticationError", "a sentinel refused the password (REDIS_SENTINEL_PASSWORD)"),
    ("AuthenticationWrongNumberOfArgsError", "a sentinel takes no password"),
    ("SSLError", "TLS to a sentinel failed (its certificate, REDIS_TLS_CA_CERT)"),
)


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
