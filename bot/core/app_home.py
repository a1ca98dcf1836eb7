"""The App Home as it is gathered for one person: their launches, their history, the
capacity of the clusters they may launch on (what /clusters would show them) and, for
admins, undelivered messages (:mod:`bot.core.home` lays
them out)."""

from __future__ import annotations

import asyncio
import time

from bot.core import api_tokens, home
from bot.core.capacity import CapacityCache
from bot.core.directory import Directory
from bot.store.store import Store
from bot.text.front import Reply
from commands.context import CommandContext, User

HOME_MIN_INTERVAL_S = 5.0  # an App Home opened again sooner is left as it is


class AppHome:
    """Builds App Homes, at most one per person every few seconds."""

    def __init__(
        self, store: Store, context: CommandContext, capacity: CapacityCache, directory: Directory
    ) -> None:
        self.store = store
        self.context = context
        self.capacity = capacity
        self.directory = directory
        self._shown: dict[str, float] = {}  # user -> when their App Home was last built

    def forget(self, user_id: str) -> None:
        """The person's App Home is built again when next asked (their settings changed)."""
        self._shown.pop(user_id, None)

    async def home(self, user_id: str) -> Reply:
        """The person's App Home: their active and recent launches, and the clusters.
        Cheap when many open it: cluster capacity is asked at most once a minute for
        everyone, and a person opening it again within seconds gets nothing new."""
        now = time.time()
        if now - self._shown.get(user_id, 0.0) < HOME_MIN_INTERVAL_S:
            return Reply("")
        self._shown[user_id] = now
        ids = await self.store.history.active_ids(user_id)
        found = await asyncio.gather(*(self.store.launches.get(i) for i in ids))
        active = sorted(
            (launch for launch in found if launch), key=lambda launch: launch.created_at
        )
        recent = await self.store.history.entries(user_id=user_id, limit=home.RECENT_SHOWN)
        links = {launch.id: launch.permalink for launch in active}
        links |= {entry.id: entry.permalink for entry in recent}
        groups = await self.directory.groups_of(user_id)
        person = User(id=user_id, groups=frozenset(groups))
        capacity = await self.capacity.for_home(now, self.capacity.visible(person))
        sweep_ids = sorted({launch.sweep for launch in active if launch.sweep})
        found_sweeps = await asyncio.gather(*(self.store.launches.get_sweep(i) for i in sweep_ids))
        in_sweeps = {sweep.id: sweep for sweep in found_sweeps if sweep}
        blocks = home.home_blocks(active, recent, capacity, links, sweeps=in_sweeps, now=now)
        blocks += home.prefs_blocks(await self.store.people.prefs(user_id))
        blocks += api_tokens.home_blocks(await self.store.tokens.tokens_of(user_id), now)
        if self.context.policy.is_admin(user_id, groups):
            retrying = await self.store.lanes.retrying_letters()
            owed = home.dead_letter_text(retrying, await self.store.lanes.given_up_count())
            blocks += home.dead_letter_blocks(owed)
        return Reply("App Home", blocks=blocks)
