"""What every section of the store shares: its client and settings, riding through a
failover, done-marks and WAIT, the consumer groups, and redacting what it writes.

Each section of :class:`bot.store.store.Store` is a :class:`Section` over one shared
:class:`StoreCore`; each public coroutine of theirs is declared with :func:`rides`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.settings.config import Retention
from bot.settings.env import Target
from bot.store import keys
from bot.store.connection import REDIS_SOCKET_TIMEOUT_S, error_text, failover_reason
from cluster.errors import TrainbotError

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")


class _HasCore(Protocol):
    core: StoreCore


S = TypeVar("S", bound=_HasCore)


def _fields(values: dict[str, str]) -> Any:
    """A stream entry's fields (redis-py's annotation wants a wider dict type)."""
    return values


@dataclass
class Change:
    """A launch this process wrote with ``store.launches.mutate``, for observers (metrics)."""

    launch: Launch
    events: list[Event]
    was_active: bool
    attempts_before: int


class StoreError(TrainbotError):
    """Redis is unreachable or answered with an error."""


# -- riding through a failover ----------------------------------------------
# Every public coroutine of the store's sections is declared with @rides: a dropped connection, a
# timeout, or a write refused by a demoted or lagging primary (READONLY, MASTERDOWN,
# LOADING, NOREPLICAS) is retried with bounded exponential back-off against whatever
# primary Redis (or Sentinel) names now; anything else, or a failover longer than the
# bound, leaves as StoreError. The writes a lost reply could double carry a done-mark
# (keys.store_op, written in the write's own MULTI and checked before a retry redoes it):
# create, create_sweep, mutate, requeue, hold, count, note_failure, dead_letter; the SET NX marks
# (mark_posted, mark_once, first_seen, mark_bad_channel) keep the call's op id as their
# value, so a retry recognises its own mark. The other writes are idempotent as they are.

RETRY_FIRST_S = 0.05
RETRY_MAX_S = 2.0
# No retry for this long (the longest back-off and the longest try): nothing rides through.
EPISODE_OVER_S = RETRY_MAX_S + REDIS_SOCKET_TIMEOUT_S + 1.0
OP_DONE_S = 86400  # how long a done-mark is kept (far longer than any retry)
# An event's fields as encoded when it says nothing in them (Event.decode reads them back).
EMPTY_FIELDS = {"text": "", "data": "{}"}


@dataclass
class _Op:
    """One public store call: its id (for done-marks) and how many tries it has had."""

    id: str = field(default_factory=lambda: secrets.token_hex(8))
    attempt: int = 0


_current_op: ContextVar[_Op | None] = ContextVar("store_op", default=None)


def rides(
    method: Callable[Concatenate[S, P], Awaitable[T]],
) -> Callable[Concatenate[S, P], Awaitable[T]]:
    """Declares a store call that rides through a failover: Redis and connection errors
    leave it as StoreError (the edge where they enter), after a failover has been ridden
    through where it can be. A call made by another store call is retried by that one."""

    @functools.wraps(method)
    async def wrapper(section: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if _current_op.get() is not None:  # called by another store method: it retries
            return await method(section, *args, **kwargs)
        op = _Op()
        token = _current_op.set(op)
        try:
            return await section.core.ride(lambda: method(section, *args, **kwargs), op)
        finally:
            _current_op.reset(token)

    return wrapper


@dataclass
class Failover:
    """The store's view of a failover in progress (while a call is retrying)."""

    since: float | None = None  # monotonic time of the first retry of this episode
    reason: str = ""
    retries: int = 0
    last_retry: float = 0.0  # monotonic time of the latest retry


class StoreCore:
    """What every section of the store shares: the client, the settings, the observers
    and the failover being ridden through."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        redact: Callable[[str], str] | None = None,
        retention: Retention | None = None,
        target: Target | None = None,
    ) -> None:
        self.redis = client
        self.redact = redact or (lambda text: text)
        self.retention = retention or Retention()
        self.target = target or Target()
        self.observers: list[Callable[[Change], None]] = []  # told of each mutate, after it
        self.failover = Failover()
        self.retry_observers: list[Callable[[str, bool], None]] = []  # (reason, new episode)

    async def ping(self) -> None:
        """One round trip, not retried (a health probe must answer at once)."""
        try:
            await self.redis.ping()
        except (RedisError, OSError) as exc:
            where = self.target.describe()
            raise StoreError(f"Redis is unreachable ({where}): {error_text(exc)}") from exc

    def failing_over(self) -> str:
        """ "" while the store works; else what it is riding through, for ``/healthz``.
        An episode whose calls all gave up (none has retried for longer than the longest
        back-off) is over: a process that makes no other call since (an idle web role)
        must not stay unhealthy for it once Redis is back."""
        episode = self.failover
        if episode.since is None:
            return ""
        if time.monotonic() - episode.last_retry > EPISODE_OVER_S:
            self.failover = Failover()
            return ""
        for_s = time.monotonic() - episode.since
        return (
            f"store failing over for {for_s:.1f} s ({episode.reason}, "
            f"{episode.retries} retries so far)"
        )

    async def ride(self, call: Callable[[], Awaitable[T]], op: _Op) -> T:
        """``call``, tried again with exponential back-off while Redis fails over, for at
        most ``target.retry_for_s``; StoreError when it fails otherwise or for longer."""
        deadline = time.monotonic() + self.target.retry_for_s
        delay = RETRY_FIRST_S
        while True:
            try:
                result = await call()
            except (RedisError, OSError) as exc:
                reason = failover_reason(exc)
                if not reason:
                    raise StoreError(f"Redis is unreachable or failed: {error_text(exc)}") from exc
                if time.monotonic() + delay > deadline:
                    raise StoreError(
                        f"Redis is unreachable: not back within {self.target.retry_for_s:g} s "
                        f"({self.target.describe()}; last error: {error_text(exc)}); check that a "
                        "primary is up and, with Sentinel, that the sentinels agree on it"
                    ) from exc
                self._note_retry(reason)
                op.attempt += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
            else:
                if self.failover.since is not None:
                    took = time.monotonic() - self.failover.since
                    log.warning("redis: back after %.1f s (%s)", took, self.target.describe())
                    self.failover = Failover()
                return result

    def _note_retry(self, reason: str) -> None:
        episode = self.failover.since is None
        if episode:
            self.failover = Failover(since=time.monotonic())
            log.warning("redis: %s; retrying (%s)", reason, self.target.describe())
        self.failover.reason = reason
        self.failover.retries += 1
        self.failover.last_retry = time.monotonic()
        for observer in self.retry_observers:
            observer(reason, episode)


async def ensure_groups(redis_client: aioredis.Redis) -> None:
    """The queue's and the outbox's consumer groups, made where they are missing."""
    for stream, group in ((keys.QUEUE, keys.QUEUE_GROUP), (keys.OUTBOX, keys.OUTBOX_GROUP)):
        try:
            await redis_client.xgroup_create(stream, group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


class Section:
    """One section of the store (``store.launches``, ``store.queue``...): the shared
    :class:`StoreCore` and the helpers its writes use. Its public coroutines are declared
    with :func:`rides`."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core

    @property
    def redis(self) -> aioredis.Redis:
        return self.core.redis

    @property
    def retention(self) -> Retention:
        return self.core.retention

    @property
    def target(self) -> Target:
        return self.core.target

    # -- done-marks and WAIT (see the note above rides) -------------------

    @staticmethod
    def _op() -> _Op:
        return _current_op.get() or _Op()

    async def _redone(self, op: _Op, *, lost: bool = False) -> str | None:
        """The done-mark's value when this call's write was applied by an earlier try
        (looked up on a retry, or when the connection was ``lost`` mid-transaction:
        redis-py reports that as a WatchError)."""
        if op.attempt == 0 and not lost:
            return None
        found = await self.redis.get(keys.store_op(op.id))
        return None if found is None else str(found)

    @staticmethod
    def _mark_done(pipe: Any, op: _Op, value: str = "1") -> None:
        pipe.set(keys.store_op(op.id), value, ex=OP_DONE_S)

    async def _wait_replicas(self, op: _Op) -> None:
        """Ask Redis to hold the reply until ``wait_replicas`` replicas have every write so
        far. WAIT counts a connection's own writes, so the done-mark is written again on
        the connection that waits: its offset is past the write's."""
        wanted = self.target.wait_replicas
        if wanted <= 0:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(keys.store_op(op.id), "1", ex=OP_DONE_S)
            pipe.execute_command("WAIT", wanted, self.target.wait_timeout_ms)
            _, acked = await pipe.execute()
        if int(acked) < wanted:
            log.warning(
                "redis: a write reached %s of %s replicas within %s ms",
                acked,
                wanted,
                self.target.wait_timeout_ms,
            )

    async def _set_once(self, key: str, value: str | None, ex: int) -> bool:
        """SET NX that a retry recognises as its own: True for the call that set it.
        ``value`` None: the call's op id (a mark whose value nobody reads)."""
        op = self._op()
        mine = op.id if value is None else value
        if await self.redis.set(key, mine, nx=True, ex=ex):
            return True
        return op.attempt > 0 and await self.redis.get(key) == mine

    async def _regroup(self, exc: ResponseError) -> None:
        """A stream or its group vanished (Redis restarted without them): make them again."""
        if "NOGROUP" not in str(exc):
            raise exc
        log.warning("redis: %s; creating the consumer groups again", exc)
        await ensure_groups(self.redis)

    def _record(self, launch: Launch) -> str:
        return self.core.redact(launch.to_record())

    def _redacted(self, event: Event) -> dict[str, str]:
        """The event as stored (the outbox, a change's done-mark): every field redacted, and
        every text among its facts before they are JSON (where a secret's quote or
        backslash would be escaped out of the redactor's sight)."""
        facts = _redact_facts(event.data, self.core.redact)
        plain = Event(event.kind, event.launch_id, event.text, facts, event.id)
        return {k: self.core.redact(v) for k, v in plain.encode().items()}

    def _entry(self, event: Event) -> Any:
        return _fields(self._redacted(event))

    def _done_events(self, events: list[Event]) -> str:
        """A change's done-mark: its events as stored, in compact JSON and without the
        fields they leave empty (the mark is kept a day, and most events are bare updates)."""
        kept = [
            {k: v for k, v in self._redacted(event).items() if EMPTY_FIELDS.get(k) != v}
            for event in events
        ]
        return json.dumps(kept, separators=(",", ":"))


def _redact_facts(value: Any, redact: Callable[[str], str]) -> Any:
    """``value`` (an event's facts) with each string in it redacted, keys included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): _redact_facts(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_facts(v, redact) for v in value]
    return value
