"""Redis: launch records, the launch queue, the outbox, leases and the rest, as one
:class:`Store` made of sections (``store.launches``, ``store.queue``, ``store.outbox``,
``store.lanes``, ``store.budgets``...), each a :class:`~bot.store.base.Section` over one
shared :class:`~bot.store.base.StoreCore`. The Redis keys stay inside the sections.

Every change to a launch goes through :meth:`Launches.mutate` (``store.launches.mutate``),
which writes the record, its indexes and the outbox entries it produced in one
transaction, so a crash never leaves a state change without its message, or a message
without its state change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from bot.settings.config import Retention
from bot.settings.env import Target
from bot.store import keys
from bot.store.ask_lists import Asks
from bot.store.base import Change, Failover, StoreCore, ensure_groups, rides
from bot.store.budgets import Budgets
from bot.store.connection import open_redis
from bot.store.history import History
from bot.store.image_runs import ImageRuns
from bot.store.lanes import Lanes
from bot.store.launches import Launches
from bot.store.leases import Leases
from bot.store.marks import Marks
from bot.store.nodes import Nodes
from bot.store.people import PersonSettings
from bot.store.streams import Backlog, Outbox, Queue, read_backlog
from bot.store.tokens import Tokens


class Store:
    """Launch records, the queue, the outbox, leases and the rest, one section each.
    Every public coroutine of a section raises StoreError, never a redis exception, and
    rides through a failover where it is declared to (:func:`~bot.store.base.rides`)."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        redact: Callable[[str], str] | None = None,
        retention: Retention | None = None,
        target: Target | None = None,
    ) -> None:
        self.core = core = StoreCore(client, redact=redact, retention=retention, target=target)
        self.launches = Launches(core)  # launch records and sweeps; every change to one
        self.history = History(core)  # the indexes of launches, and the finished ones
        self.queue = Queue(core)  # the launch queue, its deferred entries, its dead letters
        self.outbox = Outbox(core)  # what is to be said, read by the notifiers
        self.lanes = Lanes(core)  # what a notifier holds back per thread, and its dead letters
        self.budgets = Budgets(core)  # GPU-hour charges, budgets and rate limits
        self.marks = Marks(core)  # done-marks, counters and once-only marks
        self.leases = Leases(core)  # named locks with an owner and an expiry
        self.asks = Asks(core)  # asks handed to the workers, and their answers
        self.people = PersonSettings(core)  # preferences and who watches which launch
        self.tokens = Tokens(core)  # API tokens
        self.nodes = Nodes(core)  # the node ledger
        self.image_runs = ImageRuns(core)  # /images import and fetch: their runs

    # -- what the whole store shares (the client, the settings, the observers) ---------

    @property
    def redis(self) -> aioredis.Redis:
        return self.core.redis

    @redis.setter
    def redis(self, client: aioredis.Redis) -> None:
        """Another client for every section (a test points the store at a dead port)."""
        self.core.redis = client

    @property
    def retention(self) -> Retention:
        return self.core.retention

    @property
    def target(self) -> Target:
        return self.core.target

    @property
    def observers(self) -> list[Callable[[Change], None]]:
        """Told of each ``launches.mutate``, after it (metrics)."""
        return self.core.observers

    @property
    def retry_observers(self) -> list[Callable[[str, bool], None]]:
        """Told of each retry while a failover is ridden through: (reason, new episode)."""
        return self.core.retry_observers

    @property
    def failover(self) -> Failover:
        return self.core.failover

    async def ping(self) -> None:
        """One round trip, not retried (a health probe must answer at once)."""
        await self.core.ping()

    def failing_over(self) -> str:
        """ "" while the store works; else what it is riding through, for ``/healthz``."""
        return self.core.failing_over()

    @rides
    async def replicas(self) -> int:
        """How many replicas the primary has connected now (``INFO replication``)."""
        info: Any = await self.redis.info("replication")
        return int(info.get("connected_slaves", 0))

    @rides
    async def groups_ok(self) -> bool:
        """Whether the queue's and the outbox's consumer groups exist."""
        for stream, group in ((keys.QUEUE, keys.QUEUE_GROUP), (keys.OUTBOX, keys.OUTBOX_GROUP)):
            try:
                groups: Any = await self.redis.xinfo_groups(stream)
            except ResponseError:
                return False
            if not any(g.get("name") == group for g in groups):
                return False
        return True

    @rides
    async def ensure_groups(self) -> None:
        """The queue's and the outbox's consumer groups, made where they are missing."""
        await ensure_groups(self.redis)

    @rides
    async def backlog(self) -> Backlog:
        """What waits in Redis, read in one round trip (for ``/metrics``)."""
        return await read_backlog(self.redis)

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        target: Target | str,
        *,
        redact: Callable[[str], str] | None = None,
        retention: Retention | None = None,
    ) -> AsyncIterator[Store]:
        """``redact`` is applied to every launch record and outbox entry before it is
        written, so a secret that reached a log tail or an error is never stored.
        ``retention`` says how long finished launches and their history are kept.
        ``target`` is a :class:`Target` or a plain ``redis://`` URL."""
        target = Target(url=target) if isinstance(target, str) else target
        async with open_redis(target) as client:
            store = cls(client, redact=redact, retention=retention, target=target)
            await store.ping()
            await store.ensure_groups()
            await store.history.migrate_job_index()
            yield store
