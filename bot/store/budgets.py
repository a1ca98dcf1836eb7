"""What a launch may use: budgets (an owner's week, a team's window), what ended
launches were charged, the active-launch limit and rate limits.

The ``read_*`` functions take a client or a watching pipeline: a new launch's checks
run inside its write's transaction (:meth:`bot.store.launches.Launches.create`).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict
from redis.exceptions import WatchError

from bot.lifecycle.launch import HistoryEntry, Launch
from bot.store import keys
from bot.store.base import Section, rides

# A sliding window: drop what is older than ARGV[2] seconds; when ARGV[3] remain, answer
# how long until the oldest leaves; else note ARGV[4] at ARGV[1] and answer 0.
_RATE = """
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local uses = tonumber(ARGV[5] or '1')
redis.call('zremrangebyscore', KEYS[1], '-inf', now - window)
local count = redis.call('zcard', KEYS[1])
if count + uses > limit then
  if uses > limit then return tostring(window) end
  local nth = count + uses - limit - 1
  local oldest = redis.call('zrange', KEYS[1], nth, nth, 'WITHSCORES')
  return tostring(tonumber(oldest[2]) + window - now)
end
for i = 1, uses do redis.call('zadd', KEYS[1], now, ARGV[4] .. ':' .. i) end
redis.call('pexpire', KEYS[1], math.ceil(window * 1000))
return '0'
"""


@dataclass(frozen=True)
class BudgetGuard:
    """A weekly GPU-hour budget a new launch must fit (see :mod:`commands.budget`)."""

    cluster: str
    week: str  # ISO week, e.g. 2026-W49
    limit: float


@dataclass(frozen=True)
class TeamGuard:
    """A team budget (a Slack user group's or a Slurm account's) a new launch must fit."""

    team: str  # group:S0ML or account:proj
    window: str  # 2026-W49 or 2026-12
    limit: float


class OverTeamBudget(Exception):
    """The new launch did not fit a team budget; what was used and held when checked."""

    def __init__(self, guard: TeamGuard, used: float, held: float) -> None:
        super().__init__(f"over {guard.team}'s budget: {used:g} used, {held:g} held")
        self.guard, self.used, self.held = guard, used, held


class Charge(BaseModel):
    """What one ended launch was charged (``sacct``'s GPU-hours), for ``/usage``."""

    model_config = ConfigDict(extra="ignore")

    launch_id: str
    user_id: str
    user_name: str = ""
    cluster: str
    gpu_hours: float
    ended_at: float
    outcome: str = ""
    cause: str = ""  # the failure catalog's key of its last attempt ("": none known)


class OverBudget(Exception):
    """The new launch did not fit its owner's budget; what was used and held when checked."""

    def __init__(self, charged: float, held: float) -> None:
        super().__init__(f"over budget: {charged:g} GPU-hours charged, {held:g} held")
        self.charged, self.held = charged, held


def guard_keys(budget: BudgetGuard | None, teams: tuple[TeamGuard, ...]) -> list[str]:
    """The keys a new launch's budget checks read (watched with the write)."""
    found = []
    if budget is not None:
        found += [keys.usage(budget.cluster, budget.week), keys.uncharged(budget.cluster)]
    for team in teams:
        found += [keys.team_used(team.team, team.window)]
        found += [keys.team_launches(team.team, team.window)]
    return found


async def has_room(pipe: Any, launch: Launch, max_active: int | None, members: Any = None) -> bool:
    """Whether the owner has fewer than ``max_active`` launches (or dry runs) in flight
    (``members``: their active launch ids, when already read); when not, the watch is
    let go."""
    if max_active is None:
        return True
    if members is None:
        real, dry = await read_active_counts(pipe, launch.user_id)
    else:
        real, dry = await count_active(pipe, members)
    if (dry if launch.request.dry_run else real) < max_active:
        return True
    await pipe.reset()
    return False


async def check_teams(pipe: Any, launch: Launch, teams: tuple[TeamGuard, ...]) -> None:
    """OverTeamBudget (the watch let go) for the first team budget without room."""
    for team in teams:
        used, held = await read_team_use(pipe, team.team, team.window)
        if used + held + (launch.estimate_gpu_hours or 0.0) > team.limit:
            await pipe.reset()
            raise OverTeamBudget(team, used, held)


def hold_teams(pipe: Any, launch_id: str, teams: tuple[TeamGuard, ...], keep_s: int) -> None:
    """The new launch counts against each team budget (in the write's transaction)."""
    for team in teams:
        held = keys.team_launches(team.team, team.window)
        pipe.sadd(held, launch_id)
        pipe.expire(held, keep_s)
        pipe.sadd(keys.launch_teams(launch_id), f"{team.team} {team.window}")
    if teams:
        pipe.expire(keys.launch_teams(launch_id), keep_s)


async def read_team_use(client: Any, team: str, window: str) -> tuple[float, float]:
    used = float(await client.get(keys.team_used(team, window)) or 0.0)
    ids = sorted(str(i) for i in await client.smembers(keys.team_launches(team, window)))
    held = 0.0
    for raw in await client.mget([keys.launch(i) for i in ids]) if ids else []:
        if raw:
            other = Launch.model_validate_json(raw)
            if not other.charged:
                held += other.estimate_gpu_hours or 0.0
    return used, held


async def read_budget_use(
    client: Any, user_id: str, cluster: str, week: str
) -> tuple[float, float]:
    charged = float(await client.hget(keys.usage(cluster, week), user_id) or 0.0)
    ids = sorted(str(i) for i in await client.smembers(keys.user_active(user_id)))
    ended = sorted(str(i) for i in await client.hkeys(keys.uncharged(cluster)))
    names = [keys.launch(i) for i in dict.fromkeys(ids + ended)]
    held = 0.0
    for raw in await client.mget(names) if names else []:
        if raw:
            other = Launch.model_validate_json(raw)
            waiting = not other.active and not other.charged and other.user_id == user_id
            if (other.active or waiting) and other.cluster == cluster:
                held += other.estimate_gpu_hours or 0.0
    return charged, held


def _rate_args(
    name: str, user_id: str, limit: int, window_s: float, now: float, uses: int = 1
) -> tuple[str, int, str, str, str, str, str, str]:
    """The rate script's call: ``uses`` uses of ``name`` by ``user_id`` at ``now`` (unique
    members), counted, all or none, when they fit under ``limit`` in the last ``window_s``."""
    member = f"{now:.6f}:{secrets.token_hex(4)}"
    return (
        _RATE, 1, keys.rate(name, user_id), str(now), str(window_s), str(limit), member, str(uses)
    )  # fmt: skip


async def read_active_counts(client: Any, user_id: str) -> tuple[int, int]:
    return await count_active(client, await client.smembers(keys.user_active(user_id)))


async def count_active(client: Any, members: Any) -> tuple[int, int]:
    """(launches, dry runs) active among ``members`` (launch ids)."""
    ids = sorted(str(i) for i in members)
    real = dry = 0
    for raw in await client.mget([keys.launch(i) for i in ids]) if ids else []:
        if raw:
            other = Launch.model_validate_json(raw)
            if other.active:
                dry, real = (dry + 1, real) if other.request.dry_run else (dry, real + 1)
    return real, dry


class Budgets(Section):
    """Budgets, charges and limits."""

    @rides
    async def team_use(self, team: str, window: str) -> tuple[float, float]:
        """(used, held) of a team budget: GPU-hours charged for the launches it holds in
        ``window``, and the estimates of those not charged yet."""
        return await read_team_use(self.redis, team, window)

    @rides
    async def uncharged(self, cluster: str) -> dict[str, float]:
        """The launches of ``cluster`` that ended and are not charged yet: id -> when they
        ended."""
        found = await self.redis.hgetall(keys.uncharged(cluster))
        return {str(k): float(str(v).split()[-1]) for k, v in found.items()}

    @rides
    async def charge(self, launch_id: str, cluster: str, gpu_hours: float) -> bool:
        """Charge the ended launch ``gpu_hours`` (what ``sacct`` recorded for all its jobs)
        to its owner's week on ``cluster``: its record says so and the budget's usage grows
        in one transaction, so a launch is charged once however often this is called (a
        restart, two pollers). False when it was not charged now (already charged, active
        again, or its record is gone); it then waits no more."""
        key, pending = keys.launch(launch_id), keys.uncharged(cluster)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key, pending, keys.launch_teams(launch_id))
                    raw, when = await pipe.get(key), await pipe.hget(pending, launch_id)
                    teams = [str(t) for t in await pipe.smembers(keys.launch_teams(launch_id))]
                    launch = Launch.model_validate_json(raw) if raw else None
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.hdel(pending, launch_id)
                    if launch is None or launch.charged or launch.active or when is None:
                        await pipe.execute()
                        return False
                    launch.charged, launch.gpu_hours = True, gpu_hours
                    pipe.set(key, self._record(launch), keepttl=True)
                    keep_s = self.retention.history_s
                    entry = HistoryEntry.of(launch).model_dump_json()
                    pipe.set(keys.summary(launch.id), entry, ex=keep_s)
                    usage = keys.usage(cluster, str(when).split()[0])
                    pipe.hincrbyfloat(usage, launch.user_id, gpu_hours)
                    pipe.expire(usage, keep_s)
                    ended = float(str(when).split()[-1])
                    record = Charge(
                        launch_id=launch.id,
                        user_id=launch.user_id,
                        user_name=launch.user_name,
                        cluster=cluster,
                        gpu_hours=gpu_hours,
                        ended_at=ended,
                        outcome=launch.outcome,
                        cause=launch.attempts[-1].cause_key if launch.attempts else "",
                    )
                    pipe.zadd(keys.CHARGES, {record.model_dump_json(): ended})
                    for team in teams:
                        name, window = team.split()
                        pipe.incrbyfloat(keys.team_used(name, window), gpu_hours)
                        pipe.expire(keys.team_used(name, window), keep_s)
                    pipe.zremrangebyscore(keys.CHARGES, "-inf", time.time() - keep_s)
                    await pipe.execute()
                    return True
                except WatchError:
                    continue

    @rides
    async def charges(self, since: float, until: float = float("inf")) -> list[Charge]:
        """The charges of launches that ended from ``since`` to ``until``, oldest first."""
        raw: Any = await self.redis.zrangebyscore(keys.CHARGES, since, until)
        return [Charge.model_validate_json(item) for item in raw]

    @rides
    async def usage(self, user_id: str, cluster: str, week: str) -> float:
        """GPU-hours charged to ``user_id`` on ``cluster`` in ISO week ``week``."""
        return float(await self.redis.hget(keys.usage(cluster, week), user_id) or 0.0)

    @rides
    async def budget_use(self, user_id: str, cluster: str, week: str) -> tuple[float, float]:
        """(charged, held): GPU-hours ``user_id`` was charged on ``cluster`` in ``week``, and
        the estimates of their launches there still active or ended but not charged yet."""
        return await read_budget_use(self.redis, user_id, cluster, week)

    @rides
    async def active_counts(self, user_id: str) -> tuple[int, int]:
        """(launches, dry runs) of ``user_id`` that are active."""
        return await read_active_counts(self.redis, user_id)

    @rides
    async def active_counts_taking_rate(
        self, user_id: str, name: str, *, limit: int | None, window_s: float
    ) -> tuple[int, int, float]:
        """:meth:`active_counts` and :meth:`take_rate` (unless ``limit`` is None: 0.0) in
        one round trip (a second only to read the active launches, when there are any)."""
        now = time.time()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.smembers(keys.user_active(user_id))
            if limit is not None:
                pipe.eval(*_rate_args(name, user_id, limit, window_s, now))
            found = await pipe.execute()
        real, dry = await count_active(self.redis, found[0])
        return real, dry, max(float(found[1]), 0.0) if limit is not None else 0.0

    @rides
    async def take_rate(
        self,
        name: str,
        user_id: str,
        *,
        limit: int,
        window_s: float,
        now: float | None = None,
        uses: int = 1,
    ) -> float:
        """Count ``uses`` uses of ``name`` by ``user_id`` when they fit under ``limit`` in the
        last ``window_s`` (one atomic step, shared by every process, all or none): 0.0; else
        nothing is counted and the answer is how many seconds until they would fit (the
        whole window when they never could: more than ``limit`` at once)."""
        now = time.time() if now is None else now
        wait = await self.redis.eval(*_rate_args(name, user_id, limit, window_s, now, uses))
        return max(float(wait), 0.0)
