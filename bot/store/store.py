"""Redis: launch records, the launch queue, the outbox, leases and the rest, as one
:class:`Store` made of the sections of this package (each a :class:`StoreBase`).

Every change to a launch goes through :meth:`Store.mutate`, which writes the
record, its indexes and the outbox entries it produced in one transaction, so
a crash never leaves a state change without its message, or a message without
its state change.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from bot.settings.config import Retention
from bot.settings.env import Target
from bot.store.ask_lists import Asks
from bot.store.base import StoreBase, translated
from bot.store.budgets import Budgets
from bot.store.connection import open_redis
from bot.store.history import History
from bot.store.image_runs import ImageRuns
from bot.store.lanes import Lanes
from bot.store.launches import Launches
from bot.store.leases import Leases
from bot.store.marks import Marks
from bot.store.nodes import Nodes
from bot.store.people import People
from bot.store.streams import Streams
from bot.store.tokens import Tokens


class Store(
    Launches,
    Budgets,
    History,
    Streams,
    Marks,
    Leases,
    Asks,
    Lanes,
    People,
    Tokens,
    Nodes,
    ImageRuns,
    StoreBase,
):
    """Launch records, the queue, the outbox and leases. Every public coroutine
    raises StoreError, never a redis exception."""

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
            await store.migrate_job_index()
            yield store


for _name in dir(Store):
    _method = getattr(Store, _name)
    if (
        _name not in ("ping", "ride")
        and not _name.startswith("_")
        and asyncio.iscoroutinefunction(_method)
    ):
        setattr(Store, _name, translated(_method))
