"""Redis: launch records, the launch queue, the outbox, leases. The only module that imports redis.

Every change to a launch goes through :meth:`Store.mutate`, which writes the
record, its indexes and the outbox entries it produced in one transaction, so
a crash never leaves a state change without its message, or a message without
its state change.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisError, ResponseError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bot.lifecycle import notices
from bot.lifecycle.events import Event
from bot.lifecycle.launch import TRACKED_PHASES, HistoryEntry, Launch, StepRun, Sweep, new_launch_id
from bot.lifecycle.prefs import Prefs
from bot.settings.config import DAY_S, Retention
from bot.settings.env import Target
from bot.store import keys
from cluster.errors import TrainbotError
from commands.budget import iso_week

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")

_RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)
_PROMOTE = (  # due deferred launches back onto the queue, atomically
    "local due = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100) "
    "for _, id in ipairs(due) do redis.call('zrem', KEYS[1], id) "
    "redis.call('xadd', KEYS[2], '*', 'launch', id) end return #due"
)
_RENEW = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
)

# A sliding window: drop what is older than ARGV[2] seconds; when ARGV[3] remain, answer
# how long until the oldest leaves; else note ARGV[4] at ARGV[1] and answer 0.
_RATE = """
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('zremrangebyscore', KEYS[1], '-inf', now - window)
if redis.call('zcard', KEYS[1]) >= limit then
  local oldest = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')
  return tostring(tonumber(oldest[2]) + window - now)
end
redis.call('zadd', KEYS[1], now, ARGV[4])
redis.call('pexpire', KEYS[1], math.ceil(window * 1000))
return '0'
"""

# A new launch's keys (KEYS[1], KEYS[2]): how many exist; and its owner's active launch
# ids (the set KEYS[3]). Read under the create's WATCH, in one round trip.
_TAKEN_AND_ACTIVE = """
return {redis.call('exists', KEYS[1], KEYS[2]), redis.call('smembers', KEYS[3])}
"""

# Write the done-mark KEYS[2] holding KEYS[1]'s value (a counter just incremented), kept ARGV[1] s.
_MARK_WITH = "redis.call('set', KEYS[2], redis.call('get', KEYS[1]), 'EX', ARGV[1]) return 1"

# Queue dead letters that are due (ARGV[1]) go back on the queue with the fields that
# count their replays; their dead-letter entries are removed (they are queued again).
_REPLAY = """
local due = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, id in ipairs(due) do
  redis.call('zrem', KEYS[1], id)
  local found = redis.call('xrange', KEYS[2], id, id)
  if #found > 0 then
    local f = found[1][2]
    local entry = {}
    for i = 1, #f, 2 do
      if f[i] == 'launch' or f[i] == 'replays' or f[i] == 'first_dead' then
        table.insert(entry, f[i])
        table.insert(entry, f[i + 1])
      end
    end
    redis.call('xadd', KEYS[3], '*', unpack(entry))
    redis.call('xdel', KEYS[2], id)
  end
end
return #due
"""


# A queue entry set aside as a dead letter, with its done-mark, in one step: the dead
# letter's id is the mark's value. KEYS: dead letters, due, queue, done-mark. ARGV:
# the entry's id, the queue's group, when to replay ("" never), the mark's seconds,
# then the dead letter's fields and values.
_DEAD_ENTRY = """
local id = redis.call('xadd', KEYS[1], 'MAXLEN', '~', '10000', '*', unpack(ARGV, 5))
redis.call('set', KEYS[4], id, 'EX', ARGV[4])
if ARGV[3] ~= '' then
  redis.call('zadd', KEYS[2], ARGV[3], id)
end
redis.call('xack', KEYS[3], ARGV[2], ARGV[1])
redis.call('xdel', KEYS[3], ARGV[1])
return id
"""


def _fields(values: dict[str, str]) -> Any:
    """A stream entry's fields (redis-py's annotation wants a wider dict type)."""
    return values


STEP_RUNS_KEPT = 20  # earlier runs per (cluster, recipe, nodes) the GPU-hour estimate uses


@dataclass(frozen=True)
class Backlog:
    """What waits in Redis, read in one round trip (for ``/metrics``). Times are epoch seconds."""

    queue: int = 0
    queue_oldest: float | None = None  # when the oldest queue entry was written
    deferred: int = 0
    deferred_due: int = 0
    outbox: int = 0
    outbox_oldest: float | None = None


@dataclass
class Change:
    """A launch this process wrote with :meth:`Store.mutate`, for observers (metrics)."""

    launch: Launch
    events: list[Event]
    was_active: bool
    attempts_before: int


def _stream_time(entries: Any) -> float | None:
    """When the first entry of an XRANGE reply was written (its id's milliseconds)."""
    if not entries:
        return None
    return int(str(entries[0][0]).split("-", 1)[0]) / 1000


class StoreError(TrainbotError):
    """Redis is unreachable or answered with an error."""


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


# -- riding through a failover ----------------------------------------------
# Every public coroutine of Store goes through _translated: a dropped connection, a
# timeout, or a write refused by a demoted or lagging primary (READONLY, MASTERDOWN,
# LOADING, NOREPLICAS) is retried with bounded exponential back-off against whatever
# primary Redis (or Sentinel) names now; anything else, or a failover longer than the
# bound, leaves as StoreError. The writes a lost reply could double carry a done-mark
# (keys.store_op, written in the write's own MULTI and checked before a retry redoes it):
# create, create_sweep, mutate, requeue, hold, count, note_failure, dead_letter; the SET NX marks
# (mark_posted, mark_once, first_seen, mark_bad_channel) keep the call's op id as their
# value, so a retry recognises its own mark. The other writes are idempotent as they are.

FAILOVER_CODES = ("READONLY", "MASTERDOWN", "LOADING", "NOREPLICAS")
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 2.0
OP_DONE_S = 86400  # how long a done-mark is kept (far longer than any retry)


@dataclass
class _Op:
    """One public store call: its id (for done-marks) and how many tries it has had."""

    id: str = field(default_factory=lambda: secrets.token_hex(8))
    attempt: int = 0


_current_op: ContextVar[_Op | None] = ContextVar("store_op", default=None)


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


def _translated(
    method: Callable[Concatenate[Store, P], Awaitable[T]],
) -> Callable[Concatenate[Store, P], Awaitable[T]]:
    """Redis and connection errors leave the store as StoreError (the edge where they
    enter), after a failover has been ridden through where it can be."""

    @functools.wraps(method)
    async def wrapper(store: Store, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if _current_op.get() is not None:  # called by another store method: it retries
            return await method(store, *args, **kwargs)
        op = _Op()
        token = _current_op.set(op)
        try:
            return await store.ride(lambda: method(store, *args, **kwargs), op)
        finally:
            _current_op.reset(token)

    return wrapper


# Take a lane's first entry off it (when it is ``ARGV[1]``), with its body, try count and
# dead-letter state, recording ``ARGV[3]`` among those given up for good when given; then
# drop leading ids whose body is gone (an entry held twice) and the lane itself once it is
# empty. Returns the entries left.
_LANE_DONE = """
if redis.call('lindex', KEYS[1], 0) == ARGV[1] then
  redis.call('lpop', KEYS[1])
  redis.call('hdel', KEYS[2], ARGV[1])
  redis.call('hdel', KEYS[3], ARGV[1])
  redis.call('hdel', KEYS[6], ARGV[1])
  redis.call('hdel', KEYS[7], ARGV[1])
  if ARGV[3] ~= '' then
    redis.call('rpush', KEYS[5], ARGV[3])
    redis.call('ltrim', KEYS[5], -tonumber(ARGV[4]), -1)
  end
end
while true do
  local head = redis.call('lindex', KEYS[1], 0)
  if not head then
    redis.call('zrem', KEYS[4], ARGV[2])
    return 0
  end
  if redis.call('hexists', KEYS[2], head) == 1 then
    return redis.call('llen', KEYS[1])
  end
  redis.call('lpop', KEYS[1])
end
"""
DEAD_LETTERS_KEPT = 1000
ID_DRAWS = 20  # fresh ids tried for a new launch whose id is taken, before giving up


@dataclass
class DeadLetter:
    """An outbox entry the notifier gave up on, kept in Redis for an admin to see."""

    event: Event
    lane: str
    reason: str  # the last error, e.g. "not_in_channel"
    tries: int
    channel: str = ""  # where it was to be posted, when known
    at: float = 0.0

    @property
    def launch_id(self) -> str:
        return self.event.launch_id

    def encode(self) -> str:
        fields = {"id": self.event.id, **self.event.encode()}
        return json.dumps(
            {
                "event": fields,
                "lane": self.lane,
                "reason": self.reason,
                "tries": self.tries,
                "channel": self.channel,
                "at": self.at,
            }
        )

    @classmethod
    def decode(cls, raw: str) -> DeadLetter:
        data = json.loads(raw)
        fields = {str(k): str(v) for k, v in data["event"].items()}
        return cls(
            event=Event.decode(fields.pop("id", ""), fields),
            lane=str(data.get("lane", "")),
            reason=str(data.get("reason", "")),
            tries=int(data.get("tries", 0)),
            channel=str(data.get("channel", "")),
            at=float(data.get("at", 0.0)),
        )


REDIS_MAX_CONNECTIONS = 100
REDIS_POOL_WAIT_S = 10.0
REDIS_CONNECT_TIMEOUT_S = 5.0
REDIS_SOCKET_TIMEOUT_S = 10.0  # longer than any blocking read (1 s) the bot does
SENTINEL_TIMEOUT_S = 1.0


class _BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """The primary's connections through Sentinel, bounded like a plain URL's: a burst
    waits for a connection instead of opening one per caller (each new connection asks
    the sentinels where the primary is first)."""


@dataclass
class Failover:
    """The store's view of a failover in progress (while a call is retrying)."""

    since: float | None = None  # monotonic time of the first retry of this episode
    reason: str = ""
    retries: int = 0


class Store:
    """Launch records, the queue, the outbox and leases. Every public coroutine
    raises StoreError, never a redis exception."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        redact: Callable[[str], str] | None = None,
        retention: Retention | None = None,
        target: Target | None = None,
    ) -> None:
        self.redis = client
        self._redact = redact or (lambda text: text)
        self.retention = retention or Retention()
        self.target = target or Target()
        self.observers: list[Callable[[Change], None]] = []  # told of each mutate, after it
        self.failover = Failover()
        self.retry_observers: list[Callable[[str, bool], None]] = []  # (reason, new episode)

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
        password = target.password.get_secret_value() if target.password else None
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
                decode_responses=True,
                health_check_interval=30,
                password=password,
                db=target.db,
            )
        else:
            # A blocking pool: when every connection is busy (a burst of slash commands), a
            # caller waits for one instead of failing with "Too many connections".
            pool = aioredis.BlockingConnectionPool.from_url(
                target.url,
                decode_responses=True,
                health_check_interval=30,
                max_connections=REDIS_MAX_CONNECTIONS,
                timeout=REDIS_POOL_WAIT_S,
                socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
                socket_timeout=REDIS_SOCKET_TIMEOUT_S,
                **({"password": password} if password else {}),
            )
            client = aioredis.Redis.from_pool(pool)
        store = cls(client, redact=redact, retention=retention, target=target)
        try:
            await store.ping()
            await store.ensure_groups()
            await store.migrate_job_index()
            yield store
        finally:
            await client.aclose()
            await client.connection_pool.disconnect()
            for each in sentinel.sentinels if sentinel else []:
                await each.aclose()

    async def ping(self) -> None:
        """One round trip, not retried (a health probe must answer at once)."""
        try:
            await self.redis.ping()
        except (RedisError, OSError) as exc:
            raise StoreError(f"Redis is unreachable: {exc}") from exc

    def failing_over(self) -> str:
        """ "" while the store works; else what it is riding through, for ``/healthz``."""
        if self.failover.since is None:
            return ""
        for_s = time.monotonic() - self.failover.since
        return (
            f"store failing over for {for_s:.1f} s ({self.failover.reason}, "
            f"{self.failover.retries} retries so far)"
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
                    raise StoreError(f"Redis is unreachable or failed: {exc}") from exc
                if time.monotonic() + delay > deadline:
                    raise StoreError(
                        f"Redis is unreachable: not back within {self.target.retry_for_s:g} s "
                        f"({self.target.describe()}; last error: {exc}); check that a "
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
        for observer in self.retry_observers:
            observer(reason, episode)

    # -- done-marks and WAIT (see the note above _translated) ------------------

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

    async def _replayed(self, launch_id: str, op: _Op) -> tuple[Launch, list[Event]]:
        """What a change whose reply was lost wrote: the launch now, and its events (kept
        in the done-mark)."""
        done = await self.redis.get(keys.store_op(op.id))
        stored = await self.get(launch_id)
        if stored is None or done is None:
            raise StoreError(f"launch {launch_id} does not exist")
        return stored, [Event.decode("", fields) for fields in json.loads(done)]

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

    async def replicas(self) -> int:
        """How many replicas the primary has connected now (``INFO replication``)."""
        info: Any = await self.redis.info("replication")
        return int(info.get("connected_slaves", 0))

    async def _regroup(self, exc: ResponseError) -> None:
        """A stream or its group vanished (Redis restarted without them): make them again."""
        if "NOGROUP" not in str(exc):
            raise exc
        log.warning("redis: %s; creating the consumer groups again", exc)
        await self.ensure_groups()

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

    async def ensure_groups(self) -> None:
        for stream, group in ((keys.QUEUE, keys.QUEUE_GROUP), (keys.OUTBOX, keys.OUTBOX_GROUP)):
            try:
                await self.redis.xgroup_create(stream, group, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    # -- launches ---------------------------------------------------------

    async def get(self, launch_id: str) -> Launch | None:
        raw = await self.redis.get(keys.launch(launch_id))
        return Launch.model_validate_json(raw) if raw else None

    async def get_many(self, launch_ids: list[str], chunk: int = 500) -> list[Launch | None]:
        """The launches, in order (None for one that is gone): one MGET per ``chunk``."""
        found: list[Launch | None] = []
        for start in range(0, len(launch_ids), chunk):
            names = [keys.launch(i) for i in launch_ids[start : start + chunk]]
            for raw in await self.redis.mget(names):
                found.append(Launch.model_validate_json(raw) if raw else None)
        return found

    async def create(
        self,
        launch: Launch,
        events: list[Event],
        *,
        enqueue: bool = True,
        max_active: int | None = None,
        budget: BudgetGuard | None = None,
        teams: tuple[TeamGuard, ...] = (),
        new_id: Callable[[], str] = new_launch_id,
    ) -> bool:
        """Store a new launch, queue it for a worker and write its first messages.

        The launch's id must be free: when a stored launch or history entry has it
        already, the launch and its events get a fresh id from ``new_id`` (checked
        again, in the same transaction as the write), so a new launch never writes
        into another's record or thread.

        With ``max_active``, only while its owner has fewer active launches (of a
        dry run: fewer dry runs in flight; of a launch: fewer launches, dry runs not
        counted): the count and the write are one transaction (WATCH on the owner's active set),
        so simultaneous requests, from any number of bot processes, cannot both
        pass the limit. False when the limit was reached and nothing was written.
        With ``budget``, likewise only while the launch's estimate fits what is left
        of its owner's week there (WATCH on the usage too); OverBudget when not.
        With ``teams``, likewise for each team budget (WATCH on its usage and launches):
        OverTeamBudget for the first that has no room; the launch is then held by each.
        """
        active_key = keys.user_active(launch.user_id)
        draws = 0
        op = self._op()
        if await self._redone(op) is not None:  # a lost reply: it was written
            return True
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    usage = self._guard_keys(budget, teams)
                    taken = [keys.launch(launch.id), keys.summary(launch.id)]
                    await pipe.watch(active_key, *usage, *taken)
                    # one round trip: whether the id is taken, and the owner's active ids
                    found, members = await pipe.eval(_TAKEN_AND_ACTIVE, 3, *taken, active_key)
                    if int(found):  # the id is another launch's: draw again
                        await pipe.reset()  # type: ignore[no-untyped-call]
                        draws += 1
                        if draws > ID_DRAWS:
                            raise StoreError(f"no free launch id after {ID_DRAWS} draws")
                        self._renumber(launch, events, new_id())
                        continue
                    if not await self._has_room(pipe, launch, max_active, members):
                        return False
                    if budget is not None:
                        charged, held = await self._budget_use(
                            pipe, launch.user_id, budget.cluster, budget.week
                        )
                        if charged + held + (launch.estimate_gpu_hours or 0.0) > budget.limit:
                            await pipe.reset()  # type: ignore[no-untyped-call]
                            raise OverBudget(charged, held)
                    await self._check_teams(pipe, launch, teams)
                    notices.tag(events, *notices.classify(None, launch))
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.set(keys.launch(launch.id), self._record(launch))
                    self._hold_teams(pipe, launch.id, teams)
                    self._index(pipe, launch)
                    for event in events:
                        pipe.xadd(keys.OUTBOX, self._entry(event))
                    if enqueue:
                        pipe.xadd(keys.QUEUE, {"launch": launch.id})
                    self._mark_done(pipe, op)
                    await pipe.execute()
                    await self._wait_replicas(op)  # a queued launch must survive a failover
                    return True
                except WatchError:  # another writer, or a connection lost mid-transaction
                    if await self._redone(op, lost=True) is not None:
                        return True
                    continue

    async def create_sweep(
        self,
        sweep: Sweep,
        launches: list[Launch],
        events: list[Event],
        *,
        enqueue: bool = True,
        budget: BudgetGuard | None = None,
        teams: tuple[TeamGuard, ...] = (),
    ) -> None:
        """Store a sweep and all its members at once, queue them, write ``events``.

        With ``budget`` (and ``teams``), only while the members' estimates together fit
        what is left: one transaction, watched like :meth:`create`, so the sweep is
        refused whole (OverBudget, OverTeamBudget) before any member exists."""
        total = sum(launch.estimate_gpu_hours or 0.0 for launch in launches)
        whole = launches[0].model_copy(update={"estimate_gpu_hours": total})
        op = self._op()
        if await self._redone(op) is not None:  # a lost reply: it was written
            return
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    usage = self._guard_keys(budget, teams)
                    taken = [keys.sweep(sweep.id)]
                    taken += [keys.launch(launch.id) for launch in launches]
                    taken += [keys.summary(launch.id) for launch in launches]
                    await pipe.watch(keys.user_active(sweep.user_id), *usage, *taken)
                    if await pipe.exists(*taken):
                        await pipe.reset()  # type: ignore[no-untyped-call]
                        raise StoreError(f"sweep {sweep.id} or one of its launch ids is taken")
                    if budget is not None:
                        charged, held = await self._budget_use(
                            pipe, sweep.user_id, budget.cluster, budget.week
                        )
                        if charged + held + total > budget.limit:
                            await pipe.reset()  # type: ignore[no-untyped-call]
                            raise OverBudget(charged, held)
                    await self._check_teams(pipe, whole, teams)
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.set(
                        keys.sweep(sweep.id), sweep.model_dump_json(), ex=self.retention.launch_s
                    )
                    for launch in launches:
                        pipe.set(keys.launch(launch.id), self._record(launch))
                        self._hold_teams(pipe, launch.id, teams)
                        self._index(pipe, launch)
                    for event in events:
                        pipe.xadd(keys.OUTBOX, self._entry(event))
                    for launch in launches if enqueue else []:
                        pipe.xadd(keys.QUEUE, {"launch": launch.id})
                    self._mark_done(pipe, op)
                    await pipe.execute()
                    await self._wait_replicas(op)  # queued launches must survive a failover
                    return
                except WatchError:  # another writer, or a connection lost mid-transaction
                    if await self._redone(op, lost=True) is not None:
                        return
                    continue

    async def get_sweep(self, sweep_id: str) -> Sweep | None:
        raw = await self.redis.get(keys.sweep(sweep_id))
        return Sweep.model_validate_json(raw) if raw else None

    async def save_sweep(self, sweep: Sweep) -> None:
        """Write the sweep's record back (its parent message, once posted); it is kept as
        long as a finished launch's record."""
        await self.redis.set(
            keys.sweep(sweep.id), sweep.model_dump_json(), ex=self.retention.launch_s
        )

    async def _has_room(
        self, pipe: Any, launch: Launch, max_active: int | None, members: Any = None
    ) -> bool:
        """Whether the owner has fewer than ``max_active`` launches (or dry runs) in flight
        (``members``: their active launch ids, when already read); when not, the watch
        is let go."""
        if max_active is None:
            return True
        if members is None:
            real, dry = await self._active_counts(pipe, launch.user_id)
        else:
            real, dry = await self._count_active(pipe, members)
        if (dry if launch.request.dry_run else real) < max_active:
            return True
        await pipe.reset()
        return False

    @staticmethod
    def _guard_keys(budget: BudgetGuard | None, teams: tuple[TeamGuard, ...]) -> list[str]:
        """The keys a new launch's budget checks read (watched with the write)."""
        found = []
        if budget is not None:
            found += [keys.usage(budget.cluster, budget.week), keys.uncharged(budget.cluster)]
        for team in teams:
            found += [keys.team_used(team.team, team.window)]
            found += [keys.team_launches(team.team, team.window)]
        return found

    async def _check_teams(self, pipe: Any, launch: Launch, teams: tuple[TeamGuard, ...]) -> None:
        """OverTeamBudget (the watch let go) for the first team budget without room."""
        for team in teams:
            used, held = await self._team_use(pipe, team.team, team.window)
            if used + held + (launch.estimate_gpu_hours or 0.0) > team.limit:
                await pipe.reset()
                raise OverTeamBudget(team, used, held)

    def _hold_teams(self, pipe: Any, launch_id: str, teams: tuple[TeamGuard, ...]) -> None:
        keep_s = self.retention.history_s
        for team in teams:
            held = keys.team_launches(team.team, team.window)
            pipe.sadd(held, launch_id)
            pipe.expire(held, keep_s)
            pipe.sadd(keys.launch_teams(launch_id), f"{team.team} {team.window}")
        if teams:
            pipe.expire(keys.launch_teams(launch_id), keep_s)

    async def team_use(self, team: str, window: str) -> tuple[float, float]:
        """(used, held) of a team budget: GPU-hours charged for the launches it holds in
        ``window``, and the estimates of those not charged yet."""
        return await self._team_use(self.redis, team, window)

    @staticmethod
    async def _team_use(client: Any, team: str, window: str) -> tuple[float, float]:
        used = float(await client.get(keys.team_used(team, window)) or 0.0)
        ids = sorted(str(i) for i in await client.smembers(keys.team_launches(team, window)))
        held = 0.0
        for raw in await client.mget([keys.launch(i) for i in ids]) if ids else []:
            if raw:
                other = Launch.model_validate_json(raw)
                if not other.charged:
                    held += other.estimate_gpu_hours or 0.0
        return used, held

    @staticmethod
    def _renumber(launch: Launch, events: list[Event], launch_id: str) -> None:
        """Give a new launch (not stored yet) and its first events another id."""
        old = launch.id
        launch.id = launch_id
        for event in events:
            if event.launch_id == old:
                event.launch_id = launch_id

    def _record(self, launch: Launch) -> str:
        return self._redact(launch.model_dump_json())

    def _redacted(self, event: Event) -> dict[str, str]:
        """The event as stored (the outbox, a change's done-mark): every field redacted."""
        return {k: self._redact(v) for k, v in event.encode().items()}

    def _entry(self, event: Event) -> Any:
        return _fields(self._redacted(event))

    async def mutate(
        self, launch_id: str, change: Callable[[Launch], list[Event]]
    ) -> tuple[Launch, list[Event]]:
        """Apply ``change`` to the stored launch and write it with the events it returns.

        ``change`` edits the launch in place and may run more than once (when
        another process writes the same launch meanwhile); it must not do I/O.
        """
        key = keys.launch(launch_id)
        op = self._op()
        if await self._redone(op) is not None:  # a lost reply: the change was written
            return await self._replayed(launch_id, op)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    raw = await pipe.get(key)
                    if raw is None:
                        raise StoreError(f"launch {launch_id} does not exist")
                    launch = Launch.model_validate_json(raw)
                    was_active, attempts_before = launch.active, len(launch.attempts)
                    job_before, cancelled_before = launch.job_id, launch.cancelled_at
                    before = notices.Before.of(launch)
                    events = change(launch)
                    notices.tag(events, *notices.classify(before, launch))
                    launch.updated_at = time.time()
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.set(key, self._record(launch))
                    self._index(pipe, launch)
                    if was_active and not launch.active:
                        self._ran(pipe, launch)
                    for event in events:
                        if event.kind == "enqueue":  # back to the workers (a retry)
                            due = float(event.data.get("due", 0) or 0)
                            if due > time.time():  # backoff: a deferred entry, not a sleep
                                pipe.zadd(keys.DEFERRED, {launch.id: due})
                            else:
                                pipe.xadd(keys.QUEUE, {"launch": launch.id})
                        else:
                            pipe.xadd(keys.OUTBOX, self._entry(event))
                    self._mark_done(pipe, op, json.dumps([self._redacted(e) for e in events]))
                    await pipe.execute()
                    if launch.job_id != job_before or launch.cancelled_at != cancelled_before:
                        await self._wait_replicas(op)  # a job id or a cancel must survive
                    self._tell(Change(launch, events, was_active, attempts_before))
                    return launch, events
                except WatchError:  # another writer, or a connection lost mid-transaction
                    if await self._redone(op, lost=True) is not None:
                        return await self._replayed(launch_id, op)
                    continue

    def _tell(self, change: Change) -> None:
        for observer in self.observers:
            try:
                observer(change)
            except Exception:  # an observer's bug never undoes a write
                log.exception("store observer failed")

    def _index(self, pipe: Any, launch: Launch) -> None:
        if launch.active:
            pipe.sadd(keys.ACTIVE, launch.id)
            pipe.sadd(keys.user_active(launch.user_id), launch.id)
        else:
            pipe.srem(keys.ACTIVE, launch.id)
            pipe.srem(keys.user_active(launch.user_id), launch.id)
        if launch.phase in TRACKED_PHASES:
            pipe.sadd(keys.tracked(launch.cluster), launch.id)
        else:
            pipe.srem(keys.tracked(launch.cluster), launch.id)
        for attempt in launch.attempts:
            if attempt.job_id:
                index = keys.job_index(attempt.job_id)
                pipe.hset(index, attempt.cluster or launch.cluster, launch.id)
                if launch.active:
                    pipe.persist(index)
                else:
                    pipe.expire(index, self.retention.launch_s)
        if not launch.active:
            self._finished(pipe, launch)

    def _finished(self, pipe: Any, launch: Launch) -> None:
        """A finished launch: its record expires; its history entry is kept longer."""
        keep_s = self.retention.history_s
        pipe.expire(keys.launch(launch.id), self.retention.launch_s)
        pipe.expire(keys.watchers(launch.id), self.retention.launch_s)  # goes with the record
        pipe.set(keys.summary(launch.id), HistoryEntry.of(launch).model_dump_json(), ex=keep_s)
        oldest = time.time() - keep_s
        for index in (
            keys.history(),
            keys.history(user_id=launch.user_id),
            keys.history(cluster=launch.cluster),
        ):
            pipe.zadd(index, {launch.id: launch.updated_at})
            pipe.zremrangebyscore(index, "-inf", oldest)

    def _ran(self, pipe: Any, launch: Launch) -> None:
        """A launch just ended (in the transaction that ended it, whichever way it ended):
        it waits to be charged what Slurm recorded for its jobs (:meth:`charge`, once its
        jobs have ended), in its owner's ISO week of now; keep its step time for later
        estimates."""
        now, keep_s = time.time(), self.retention.history_s
        if not launch.charged:
            pipe.hset(keys.uncharged(launch.cluster), launch.id, f"{iso_week(now)} {now:.3f}")
        step_time = launch.progress.median_step_time_s
        if launch.recipe_key and step_time and launch.progress.total:
            run = StepRun(step_time_s=step_time, steps=launch.progress.total, ended_at=now)
            runs = keys.step_runs(launch.cluster, launch.recipe_key, launch.request.nodes)
            pipe.lpush(runs, run.model_dump_json())
            pipe.ltrim(runs, 0, STEP_RUNS_KEPT - 1)
            pipe.expire(runs, keep_s)

    async def uncharged(self, cluster: str) -> dict[str, float]:
        """The launches of ``cluster`` that ended and are not charged yet: id -> when they
        ended."""
        found = await self.redis.hgetall(keys.uncharged(cluster))
        return {str(k): float(str(v).split()[-1]) for k, v in found.items()}

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

    async def charges(self, since: float, until: float = float("inf")) -> list[Charge]:
        """The charges of launches that ended from ``since`` to ``until``, oldest first."""
        raw: Any = await self.redis.zrangebyscore(keys.CHARGES, since, until)
        return [Charge.model_validate_json(item) for item in raw]

    async def usage(self, user_id: str, cluster: str, week: str) -> float:
        """GPU-hours charged to ``user_id`` on ``cluster`` in ISO week ``week``."""
        return float(await self.redis.hget(keys.usage(cluster, week), user_id) or 0.0)

    async def budget_use(self, user_id: str, cluster: str, week: str) -> tuple[float, float]:
        """(charged, held): GPU-hours ``user_id`` was charged on ``cluster`` in ``week``, and
        the estimates of their launches there still active or ended but not charged yet."""
        return await self._budget_use(self.redis, user_id, cluster, week)

    @staticmethod
    async def _budget_use(
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

    async def step_runs(self, cluster: str, recipe: str, nodes: int) -> list[StepRun]:
        """The newest finished runs of ``recipe`` on ``nodes`` nodes of ``cluster`` that
        recorded step times, newest first."""
        raw = await self.redis.lrange(keys.step_runs(cluster, recipe, nodes), 0, -1)
        return [StepRun.model_validate_json(item) for item in raw]

    async def launcher_options(self, cluster: str, name: str) -> str | None:
        """What a launcher's ``--help`` listed on ``cluster`` (``name``: framework@user)."""
        raw = await self.redis.get(keys.launcher_options(cluster, name))
        return None if raw is None else str(raw)

    async def save_launcher_options(self, cluster: str, name: str, text: str, ttl_s: int) -> None:
        await self.redis.set(keys.launcher_options(cluster, name), text, ex=ttl_s)

    async def active_ids(self, user_id: str | None = None) -> list[str]:
        key = keys.user_active(user_id) if user_id else keys.ACTIVE
        return sorted(str(m) for m in await self.redis.smembers(key))

    async def active_count(self, user_id: str) -> int:
        return int(await self.redis.scard(keys.user_active(user_id)))

    async def active_counts(self, user_id: str) -> tuple[int, int]:
        """(launches, dry runs) of ``user_id`` that are active."""
        return await self._active_counts(self.redis, user_id)

    async def active_counts_taking_rate(
        self, user_id: str, name: str, *, limit: int | None, window_s: float
    ) -> tuple[int, int, float]:
        """:meth:`active_counts` and :meth:`take_rate` (unless ``limit`` is None: 0.0) in
        one round trip (a second only to read the active launches, when there are any)."""
        now = time.time()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.smembers(keys.user_active(user_id))
            if limit is not None:
                member = f"{now:.6f}:{secrets.token_hex(4)}"
                pipe.eval(
                    _RATE, 1, keys.rate(name, user_id), str(now), str(window_s), str(limit), member
                )
            found = await pipe.execute()
        real, dry = await self._count_active(self.redis, found[0])
        return real, dry, max(float(found[1]), 0.0) if limit is not None else 0.0

    @staticmethod
    async def _active_counts(client: Any, user_id: str) -> tuple[int, int]:
        return await Store._count_active(client, await client.smembers(keys.user_active(user_id)))

    @staticmethod
    async def _count_active(client: Any, members: Any) -> tuple[int, int]:
        """(launches, dry runs) active among ``members`` (launch ids)."""
        ids = sorted(str(i) for i in members)
        real = dry = 0
        for raw in await client.mget([keys.launch(i) for i in ids]) if ids else []:
            if raw:
                other = Launch.model_validate_json(raw)
                if other.active:
                    dry, real = (dry + 1, real) if other.request.dry_run else (dry, real + 1)
        return real, dry

    async def take_rate(
        self, name: str, user_id: str, *, limit: int, window_s: float, now: float | None = None
    ) -> float:
        """Count one use of ``name`` by ``user_id`` when fewer than ``limit`` happened in the
        last ``window_s`` (one atomic step, shared by every process): 0.0; else nothing is
        counted and the answer is how many seconds until one more would fit."""
        now = time.time() if now is None else now
        member = f"{now:.6f}:{secrets.token_hex(4)}"
        wait = await self.redis.eval(
            _RATE, 1, keys.rate(name, user_id), str(now), str(window_s), str(limit), member
        )
        return max(float(wait), 0.0)

    async def tracked_ids(self, cluster: str) -> list[str]:
        return sorted(str(m) for m in await self.redis.smembers(keys.tracked(cluster)))

    async def find_job(self, job_id: str) -> list[tuple[str, str]]:
        """(cluster, launch id) pairs for a Slurm job id, across clusters (one hash read)."""
        found: Any = await self.redis.hgetall(keys.job_index(job_id))
        return sorted((str(cluster), str(launch_id)) for cluster, launch_id in found.items())

    async def finished(self, launch_id: str) -> HistoryEntry | None:
        """The history entry of a finished launch (kept after its record expired)."""
        raw = await self.redis.get(keys.summary(launch_id))
        return HistoryEntry.model_validate_json(raw) if raw else None

    async def history(
        self,
        *,
        user_id: str = "",
        cluster: str = "",
        since: float = 0.0,
        limit: int = 50,
    ) -> list[HistoryEntry]:
        """Finished launches, newest first: everyone's, one user's, one cluster's, or one
        user's on one cluster; only those that ended at or after ``since``."""
        key = keys.history(user_id=user_id) if user_id else keys.history(cluster=cluster)
        entries: list[HistoryEntry] = []
        offset, page = 0, max(limit, 50)
        while len(entries) < limit:
            ids: list[Any] = await self.redis.zrevrangebyscore(
                key, "+inf", since, start=offset, num=page
            )
            if not ids:
                break
            offset += len(ids)
            for raw in await self.redis.mget([keys.summary(i) for i in ids]):
                if raw is None:
                    continue
                entry = HistoryEntry.model_validate_json(raw)
                if not cluster or entry.cluster == cluster:
                    entries.append(entry)
        return entries[:limit]

    async def migrate_job_index(self) -> int:
        """Once per Redis: move the job keys of earlier versions into the per-job-id hashes
        (the only keyspace scan, done once and marked done). Returns how many moved."""
        if await self.redis.exists(keys.JOB_INDEX_MIGRATED):
            return 0
        moved = 0
        async for key in self.redis.scan_iter(match=keys.job("*", "*"), count=1000):
            _, _, cluster, job_id = str(key).split(":", 3)
            launch_id = await self.redis.get(key)
            if launch_id:
                await self.redis.hset(keys.job_index(job_id), cluster, str(launch_id))
                moved += 1
            await self.redis.delete(key)
        await self.redis.set(keys.JOB_INDEX_MIGRATED, str(time.time()))
        if moved:
            log.info("moved %d job ids into the job index", moved)
        return moved

    # -- streams (queue and outbox) -----------------------------------------

    async def read(
        self, stream: str, group: str, consumer: str, *, block_ms: int, pending: bool = False
    ) -> list[tuple[str, dict[str, str]]]:
        """Entries for this consumer: new ones, or (``pending``) its own unacknowledged ones."""
        try:
            reply: Any = await self.redis.xreadgroup(
                group,
                consumer,
                {stream: "0" if pending else ">"},
                count=16,
                block=None if pending else block_ms,
            )
        except ResponseError as exc:
            await self._regroup(exc)
            return []
        entries: list[tuple[str, dict[str, str]]] = []
        for _stream, items in reply or []:
            entries.extend((str(entry_id), dict(fields)) for entry_id, fields in items if fields)
        return entries

    async def claim_stale(
        self, stream: str, group: str, consumer: str, *, min_idle_ms: int
    ) -> list[tuple[str, dict[str, str]]]:
        """Take over entries another consumer read but never acknowledged (it died)."""
        try:
            reply: Any = await self.redis.xautoclaim(
                stream, group, consumer, min_idle_ms, "0-0", count=16
            )
        except ResponseError as exc:
            await self._regroup(exc)
            return []
        return [(str(entry_id), dict(fields)) for entry_id, fields in reply[1] if fields]

    async def ack(self, stream: str, group: str, entry_id: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xack(stream, group, entry_id)
            pipe.xdel(stream, entry_id)
            await pipe.execute()

    async def stream_length(self, stream: str) -> int:
        return int(await self.redis.xlen(stream))

    async def requeue(self, launch_id: str, *, after_s: float = 0.0) -> None:
        """Back on the queue, now or (``after_s``) as a deferred entry any worker takes when due."""
        if after_s > 0:
            await self.redis.zadd(keys.DEFERRED, {launch_id: time.time() + after_s})
            return
        op = self._op()
        if await self._redone(op) is not None:
            return
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(keys.QUEUE, {"launch": launch_id})
            self._mark_done(pipe, op)
            await pipe.execute()

    async def promote_due(self) -> int:
        """Move deferred launches that are due onto the queue; how many moved."""
        moved = await self.redis.eval(_PROMOTE, 2, keys.DEFERRED, keys.QUEUE, str(time.time()))
        return int(moved)

    async def backlog(self) -> Backlog:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xlen(keys.QUEUE)
            pipe.xrange(keys.QUEUE, count=1)
            pipe.zcard(keys.DEFERRED)
            pipe.zcount(keys.DEFERRED, "-inf", time.time())
            pipe.xlen(keys.OUTBOX)
            pipe.xrange(keys.OUTBOX, count=1)
            queue, first, deferred, due, outbox, oldest = await pipe.execute()
        return Backlog(
            queue=int(queue),
            queue_oldest=_stream_time(first),
            deferred=int(deferred),
            deferred_due=int(due),
            outbox=int(outbox),
            outbox_oldest=_stream_time(oldest),
        )

    async def lease_holder(self, name: str) -> str:
        """Who holds the lease ``name`` now ("" when nobody)."""
        return str(await self.redis.get(keys.lease(name)) or "")

    async def deferred_count(self) -> int:
        return int(await self.redis.zcard(keys.DEFERRED))

    async def deliveries(self, stream: str, group: str, entry_id: str) -> int:
        """How many times the group has handed out this entry (1 the first time)."""
        info: Any = await self.redis.xpending_range(stream, group, entry_id, entry_id, 1)
        return int(info[0]["times_delivered"]) if info else 0

    async def dead_letter_entry(
        self, entry_id: str, fields: dict[str, str], reason: str, *, retry_at: float | None = None
    ) -> None:
        """Keep a queue entry that keeps failing where an admin can see it, and take it off
        the queue; with ``retry_at``, it goes back on the queue then (:meth:`replay_due`)."""
        op = self._op()
        if await self._redone(op) is not None:  # set aside already, its reply lost
            return
        dead = {**fields, "entry": entry_id, "reason": reason[:2000], "at": str(time.time())}
        keys_ = (keys.DEAD_LETTERS, keys.DEAD_LETTERS_DUE, keys.QUEUE, keys.store_op(op.id))
        due = "" if retry_at is None else repr(retry_at)
        args = [entry_id, keys.QUEUE_GROUP, due, str(OP_DONE_S)]
        await self.redis.eval(
            _DEAD_ENTRY, len(keys_), *keys_, *args, *(x for kv in dead.items() for x in kv)
        )

    async def replay_due(self, now: float | None = None) -> int:
        """Put the queue's dead letters that are due back on the queue, atomically; how many."""
        when = time.time() if now is None else now
        keys_ = (keys.DEAD_LETTERS_DUE, keys.DEAD_LETTERS, keys.QUEUE)
        return int(await self.redis.eval(_REPLAY, 3, *keys_, str(when)))

    async def queue_retrying_count(self) -> int:
        """Queue dead letters that will be replayed."""
        return int(await self.redis.zcard(keys.DEAD_LETTERS_DUE))

    async def queue_dead_letter_count(self) -> int:
        return int(await self.redis.xlen(keys.DEAD_LETTERS))

    async def mark_posted(self, event_id: str) -> bool:
        """True the first time; False when this outbox entry was already posted."""
        return await self._set_once(keys.posted(event_id), None, 7 * 86400)

    async def was_posted(self, event_id: str) -> bool:
        return bool(await self.redis.exists(keys.posted(event_id)))

    async def mark_once(self, name: str, owner: str, ttl_s: int) -> bool:
        """True for the one caller (of any process) that set the report mark ``name``."""
        return await self._set_once(keys.report_posted(name), owner, ttl_s)

    async def unmark(self, name: str, owner: str) -> None:
        """Let go of the report mark ``name`` when ``owner`` set it (its post failed)."""
        key = keys.report_posted(name)
        if await self.redis.get(key) == owner:
            await self.redis.delete(key)

    async def first_seen(self, name: str, ttl_s: int) -> bool:
        """True the first time ``name`` is seen within ``ttl_s`` (shared by every process)."""
        return await self._set_once(keys.seen(name), None, ttl_s)

    async def count(self, name: str, ttl_s: int = 86400) -> int:
        """Increment and return the counter ``name`` (kept ``ttl_s``)."""
        op = self._op()
        done = await self._redone(op)
        if done is not None:
            return int(done)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.incr(keys.dedupe(name))
            pipe.expire(keys.dedupe(name), ttl_s)
            pipe.eval(_MARK_WITH, 2, keys.dedupe(name), keys.store_op(op.id), str(OP_DONE_S))
            value, _, _ = await pipe.execute()
        return int(value)

    # -- asks: cluster work for the workers, answered back ---------

    async def push_ask(self, ask: dict[str, Any]) -> None:
        """Put an ask on the list every worker takes from (see bot.engine.asks)."""
        await self.redis.rpush(keys.ASKS, json.dumps(ask))

    async def take_ask(self, timeout_s: float) -> dict[str, Any] | None:
        """The oldest ask, waiting up to ``timeout_s`` for one (None: none came)."""
        found = await self.redis.blpop([keys.ASKS], timeout=timeout_s)
        return None if found is None else dict(json.loads(found[1]))

    async def put_answer(self, ask_id: str, answer: dict[str, Any], keep_s: int = 60) -> None:
        """A worker's answer, kept ``keep_s`` for the asker to take."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(keys.answer(ask_id), self._redact(json.dumps(answer)))
            pipe.expire(keys.answer(ask_id), keep_s)
            await pipe.execute()

    async def wait_answer(self, ask_id: str, timeout_s: float) -> dict[str, Any] | None:
        """The answer to ``ask_id``, waiting up to ``timeout_s`` (None: no worker answered)."""
        found = await self.redis.blpop([keys.answer(ask_id)], timeout=timeout_s)
        return None if found is None else dict(json.loads(found[1]))

    # -- leases ------------------------------------------------

    async def acquire(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take or keep the lease ``name``; True while ``owner`` holds it."""
        key = keys.lease(name)
        if await self.redis.set(key, owner, nx=True, px=ttl_ms):
            return True
        return bool(await self.redis.eval(_RENEW, 1, key, owner, str(ttl_ms)))

    async def release(self, name: str, owner: str) -> None:
        await self.redis.eval(_RELEASE, 1, keys.lease(name), owner)

    # -- the notifier's lanes and dead letters ---------------------------------
    # An outbox entry is moved to its lane (one launch's thread, or its pages) in the
    # same transaction that acknowledges it, and stays there until it is delivered or
    # dead-lettered: what is owed survives a restart, and one lane waits without
    # holding up the others.

    async def hold(self, entries: list[tuple[str, Event]]) -> None:
        """Move outbox entries to their lanes, ``(lane, event)`` in outbox order."""
        now = time.time()
        op = self._op()
        if await self._redone(op) is not None:
            return
        async with self.redis.pipeline(transaction=True) as pipe:
            self._mark_done(pipe, op)
            for lane, event in entries:
                body = json.dumps({"id": event.id, **event.encode()})
                pipe.hset(keys.NOTIFY_HELD, event.id, body)
                pipe.rpush(keys.notify_lane(lane), event.id)
                pipe.zadd(keys.NOTIFY_LANES, {lane: now}, nx=True)  # a lane waiting keeps waiting
                pipe.xack(keys.OUTBOX, keys.OUTBOX_GROUP, event.id)
                pipe.xdel(keys.OUTBOX, event.id)
            await pipe.execute()

    async def due_lanes(self, now: float, limit: int = 500) -> list[str]:
        """Lanes whose first entry may be tried at ``now``."""
        found = await self.redis.zrangebyscore(keys.NOTIFY_LANES, "-inf", now, start=0, num=limit)
        return [str(lane) for lane in found]

    async def lane_events(self, lane: str, limit: int = 50) -> list[Event]:
        """The first ``limit`` entries of ``lane``, in order."""
        ids = [str(i) for i in await self.redis.lrange(keys.notify_lane(lane), 0, limit - 1)]
        if not ids:
            return []
        bodies = await self.redis.hmget(keys.NOTIFY_HELD, ids)
        events = []
        for entry_id, body in zip(ids, bodies, strict=True):
            if body:
                fields = {str(k): str(v) for k, v in json.loads(body).items()}
                fields.pop("id", None)
                events.append(Event.decode(entry_id, fields))
        return events

    async def lane_done(self, lane: str, event_id: str, dead: DeadLetter | None = None) -> int:
        """Take the delivered (or, with ``dead``, given up for good) first entry off ``lane``;
        returns how many entries are left in it."""
        lane_keys = [
            keys.notify_lane(lane),
            keys.NOTIFY_HELD,
            keys.NOTIFY_TRIES,
            keys.NOTIFY_LANES,
            keys.NOTIFY_GIVEN_UP,
            keys.NOTIFY_RETRYING,
            keys.NOTIFY_FIRST_FAILED,
        ]
        letter = dead.encode() if dead is not None else ""
        args = [event_id, lane, letter, str(DEAD_LETTERS_KEPT)]
        return int(await self.redis.eval(_LANE_DONE, len(lane_keys), *lane_keys, *args))

    async def note_failure(self, event_id: str, now: float) -> tuple[int, float]:
        """Count a failed delivery of an entry: its failures so far, and when it first failed."""
        op = self._op()
        if await self._redone(op) is not None:  # counted already: read what it came to
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hget(keys.NOTIFY_TRIES, event_id)
                pipe.hget(keys.NOTIFY_FIRST_FAILED, event_id)
                tries, first = await pipe.execute()
            return int(tries or 1), float(first or now)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(keys.NOTIFY_TRIES, event_id, 1)
            pipe.hsetnx(keys.NOTIFY_FIRST_FAILED, event_id, str(now))
            pipe.hget(keys.NOTIFY_FIRST_FAILED, event_id)
            self._mark_done(pipe, op)
            tries, _, first, _ = await pipe.execute()
        return int(tries), float(first or now)

    async def dead_letter(self, letter: DeadLetter, *, no_thread: bool = False) -> None:
        """Record an entry that kept failing among the dead letters; it stays first in its
        lane, tried again now and then, until delivered or given up. ``no_thread``: it is
        a launch's parent message, so its worker ends the launch instead of waiting."""
        op = self._op()
        if await self._redone(op) is not None:
            return
        async with self.redis.pipeline(transaction=True) as pipe:
            self._mark_done(pipe, op)
            pipe.rpush(keys.NOTIFY_DEAD_LETTERS, letter.encode())
            pipe.ltrim(keys.NOTIFY_DEAD_LETTERS, -DEAD_LETTERS_KEPT, -1)
            pipe.hset(keys.NOTIFY_RETRYING, letter.event.id, letter.encode())
            if no_thread:
                pipe.set(keys.no_thread(letter.launch_id), letter.reason, ex=7 * 86400)
            await pipe.execute()

    async def no_thread(self, launch_id: str) -> str:
        """Why a launch's parent message went to the dead letters, or "" while it did not."""
        return str(await self.redis.get(keys.no_thread(launch_id)) or "")

    async def retrying_letters(self) -> list[DeadLetter]:
        """Dead letters still tried again, oldest first."""
        raw: Any = await self.redis.hvals(keys.NOTIFY_RETRYING)
        return sorted((DeadLetter.decode(str(item)) for item in raw), key=lambda d: d.at)

    async def retrying_count(self) -> int:
        return int(await self.redis.hlen(keys.NOTIFY_RETRYING))

    async def given_up(self, limit: int = 100) -> list[DeadLetter]:
        """The newest ``limit`` dead letters given up for good, oldest first."""
        raw = await self.redis.lrange(keys.NOTIFY_GIVEN_UP, -limit, -1)
        return [DeadLetter.decode(str(item)) for item in raw]

    async def given_up_count(self) -> int:
        return int(await self.redis.llen(keys.NOTIFY_GIVEN_UP))

    # -- people: notification preferences and watched launches --------------------

    async def prefs(self, user_id: str) -> Prefs:
        """A person's preferences (the defaults until they change one)."""
        raw = await self.redis.get(keys.prefs(user_id))
        return Prefs.model_validate_json(raw) if raw else Prefs()

    async def set_prefs(self, user_id: str, prefs: Prefs) -> None:
        await self.redis.set(keys.prefs(user_id), prefs.model_dump_json())

    async def watch(self, launch_id: str, user_id: str) -> bool:
        """``user_id`` follows ``launch_id``; False when they already did."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.sadd(keys.watchers(launch_id), user_id)
            pipe.sadd(keys.watching(user_id), launch_id)
            added, _ = await pipe.execute()
        return bool(added)

    async def unwatch(self, launch_id: str, user_id: str) -> bool:
        """``user_id`` stops following ``launch_id``; False when they did not follow it."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.srem(keys.watchers(launch_id), user_id)
            pipe.srem(keys.watching(user_id), launch_id)
            removed, _ = await pipe.execute()
        return bool(removed)

    async def watchers(self, launch_id: str) -> list[str]:
        return sorted(str(u) for u in await self.redis.smembers(keys.watchers(launch_id)))

    async def watching(self, user_id: str) -> list[str]:
        return sorted(str(i) for i in await self.redis.smembers(keys.watching(user_id)))

    async def hold_for_quiet(self, lane: str, until: float) -> None:
        """Quiet hours hold a DM lane until ``until``; noted, so what waited goes as one."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zadd(keys.NOTIFY_LANES, {lane: until}, xx=True)
            pipe.set(keys.quiet_held(lane), "1", ex=7 * DAY_S)
            await pipe.execute()

    async def quiet_held(self, lane: str) -> bool:
        return bool(await self.redis.exists(keys.quiet_held(lane)))

    async def quiet_over(self, lane: str) -> None:
        await self.redis.delete(keys.quiet_held(lane))

    async def write_dms(self, source_id: str, dms: list[Event]) -> bool:
        """Write the DMs about the posted outbox entry ``source_id`` to the outbox, once:
        False (nothing written) when they were written before."""
        mark = keys.dm_sent(source_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(mark)
                    if await pipe.exists(mark):
                        await pipe.reset()  # type: ignore[no-untyped-call]
                        return False
                    pipe.multi()  # type: ignore[no-untyped-call]
                    for dm in dms:
                        pipe.xadd(keys.OUTBOX, self._entry(dm))
                    pipe.set(mark, "1", ex=7 * DAY_S)
                    await pipe.execute()
                    return True
                except WatchError:
                    continue

    async def retry_lane_at(self, lane: str, when: float) -> None:
        """Try ``lane`` again no earlier than ``when`` (a time.time())."""
        await self.redis.zadd(keys.NOTIFY_LANES, {lane: when}, xx=True)

    async def undelivered(self) -> int:
        """Messages written and not yet delivered nor dead-lettered: those still in the
        outbox and those moved to a lane."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xlen(keys.OUTBOX)
            pipe.hlen(keys.NOTIFY_HELD)
            outbox, held = await pipe.execute()
        return int(outbox) + int(held)

    async def held_count(self) -> int:
        """Entries moved to lanes and not yet delivered or dead-lettered."""
        return int(await self.redis.hlen(keys.NOTIFY_HELD))

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The newest ``limit`` dead letters, oldest first."""
        raw = await self.redis.lrange(keys.NOTIFY_DEAD_LETTERS, -limit, -1)
        return [DeadLetter.decode(str(item)) for item in raw]

    async def dead_letter_count(self) -> int:
        return int(await self.redis.llen(keys.NOTIFY_DEAD_LETTERS))

    async def count_thread_wait(self, launch_id: str) -> int:
        """Count one more look at a launch whose thread was not posted yet; how many so far."""
        return await self.count(f"thread-wait:{launch_id}", ttl_s=7 * 86400)

    async def thread_waits(self, launch_id: str) -> int:
        """How many times a worker found this launch's thread not posted yet."""
        return int(await self.redis.get(keys.dedupe(f"thread-wait:{launch_id}")) or 0)

    async def mark_bad_channel(self, launch_id: str, reason: str) -> bool:
        """Note that a launch's channel refuses the bot; True the first time."""
        return await self._set_once(keys.bad_channel(launch_id), reason, 7 * 86400)

    async def bad_channel(self, launch_id: str) -> str:
        """Why a launch's channel refuses the bot, or "" while it is not known to."""
        return str(await self.redis.get(keys.bad_channel(launch_id)) or "")

    async def clear_bad_channel(self, launch_id: str) -> None:
        await self.redis.delete(keys.bad_channel(launch_id))


for _name, _method in list(vars(Store).items()):
    if (
        _name not in ("ping", "ride")
        and not _name.startswith("_")
        and asyncio.iscoroutinefunction(_method)
    ):
        setattr(Store, _name, _translated(_method))
