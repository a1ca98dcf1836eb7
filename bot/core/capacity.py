"""Cluster capacity, asked cheaply: for the App Home at most once a minute for
everyone, and for /clusters one question at a time per cluster, its answer shared."""

from __future__ import annotations

import asyncio
import time

from bot.core import answers
from bot.core.rates import slow_down
from bot.gateway.asks import ClusterCalls
from bot.gateway.on_cluster import Clusters
from bot.store.store import Store
from bot.text.front import Reply
from cluster.preflight.discovery import ClusterCapacity
from commands.context import CommandContext, User
from commands.errors import CommandError

CAPACITY_TTL_S = 60.0  # cluster capacity shown on App Homes is at most this old


class CapacityCache:
    """Each cluster's capacity as last asked, for the App Home and /clusters."""

    def __init__(
        self, store: Store, clusters: Clusters, calls: ClusterCalls, context: CommandContext
    ) -> None:
        self.store = store
        self.clusters = clusters
        self.calls = calls
        self.context = context
        self._capacity_at: dict[str, tuple[float, ClusterCapacity | str]] = {}
        self._clusters_asked: dict[str, tuple[float, asyncio.Future[ClusterCapacity]]] = {}

    async def for_home(
        self, now: float, names: list[str] | None = None
    ) -> dict[str, ClusterCapacity | str]:
        """The capacity of ``names`` (default: every cluster), each asked again only when
        older than a minute."""
        names = list(self.clusters.profiles) if names is None else names
        stale = [
            name
            for name in names
            if now - self._capacity_at.get(name, (0.0, ""))[0] >= CAPACITY_TTL_S
        ]
        answers_ = await asyncio.gather(
            *(self.calls.capacity(name) for name in stale), return_exceptions=True
        )
        for name, answer in zip(stale, answers_, strict=True):
            value: ClusterCapacity | str = (
                f"{type(answer).__name__}: {answer}"
                if isinstance(answer, BaseException)
                else answer
            )
            self._capacity_at[name] = (now, value)
        return {name: self._capacity_at[name][1] for name in names}

    def visible(self, user: User) -> list[str]:
        """The clusters ``user`` may see: those they may launch on (admins: all). What
        /clusters shows, and the most /jobs all and the App Home show too."""
        policy = self.context.policy
        names = list(self.clusters.profiles)
        if policy.is_admin(user.id, user.groups):
            return names
        return [n for n in names if policy.rule_for(user.id, user.groups, n)]

    async def cluster_list(self, only: str | None, user: User) -> Reply:
        """/clusters: the clusters the person may launch on (admins: all), each answer
        shared for a few seconds."""
        visible = self.visible(user)
        names = [n for n in ([only] if only else list(self.clusters.profiles)) if n in visible]
        if not names:
            where = f"on {only}" if only else "on any cluster"
            raise CommandError(
                f"You may not launch {where}, so /clusters has nothing to show you. "
                "Ask a trainbot admin for access."
            )
        await slow_down(self.store, self.context, user.id, "commands")
        return await answers.cluster_list(self.clusters, names, ask=self.ask)

    async def ask(self, name: str) -> ClusterCapacity:
        """A cluster's capacity for /clusters: one question at a time per cluster, its
        answer (or error) reused for everyone for ``limits.clusters_cache_s``."""
        ttl_s = self.context.policy.limits.clusters_cache_s
        now = time.monotonic()
        asked = self._clusters_asked.get(name)
        if asked is None or (asked[1].done() and now - asked[0] >= ttl_s):
            asked = (now, asyncio.ensure_future(self.calls.capacity(name)))
            self._clusters_asked[name] = asked
        return await asyncio.shield(asked[1])
