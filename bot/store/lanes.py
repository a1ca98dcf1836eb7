"""The notifier's lanes and dead letters.

An outbox entry is moved to its lane (one launch's thread, or its pages) in the
same transaction that acknowledges it, and stays there until it is delivered or
dead-lettered: what is owed survives a restart, and one lane waits without
holding up the others.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from redis.exceptions import WatchError

from bot.lifecycle.events import Event
from bot.settings.config import DAY_S
from bot.store import keys
from bot.store.base import Section, rides

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
# Where an operator finds the notifier's dead letters in Redis (doctor names it).
DEAD_LETTERS_AT = keys.NOTIFY_DEAD_LETTERS


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


class Lanes(Section):
    """Lanes, the messages held in them, and dead letters."""

    @rides
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

    @rides
    async def due_lanes(self, now: float, limit: int = 500) -> list[str]:
        """Lanes whose first entry may be tried at ``now``."""
        found = await self.redis.zrangebyscore(keys.NOTIFY_LANES, "-inf", now, start=0, num=limit)
        return [str(lane) for lane in found]

    @rides
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

    @rides
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

    @rides
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

    @rides
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

    @rides
    async def no_thread(self, launch_id: str) -> str:
        """Why a launch's parent message went to the dead letters, or "" while it did not."""
        return str(await self.redis.get(keys.no_thread(launch_id)) or "")

    @rides
    async def retrying_letters(self) -> list[DeadLetter]:
        """Dead letters still tried again, oldest first."""
        raw: Any = await self.redis.hvals(keys.NOTIFY_RETRYING)
        return sorted((DeadLetter.decode(str(item)) for item in raw), key=lambda d: d.at)

    @rides
    async def retrying_count(self) -> int:
        return int(await self.redis.hlen(keys.NOTIFY_RETRYING))

    @rides
    async def given_up(self, limit: int = 100) -> list[DeadLetter]:
        """The newest ``limit`` dead letters given up for good, oldest first."""
        raw = await self.redis.lrange(keys.NOTIFY_GIVEN_UP, -limit, -1)
        return [DeadLetter.decode(str(item)) for item in raw]

    @rides
    async def given_up_count(self) -> int:
        return int(await self.redis.llen(keys.NOTIFY_GIVEN_UP))

    @rides
    async def hold_for_quiet(self, lane: str, until: float) -> None:
        """Quiet hours hold a DM lane until ``until``; noted, so what waited goes as one."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zadd(keys.NOTIFY_LANES, {lane: until}, xx=True)
            pipe.set(keys.quiet_held(lane), "1", ex=7 * DAY_S)
            await pipe.execute()

    @rides
    async def quiet_held(self, lane: str) -> bool:
        return bool(await self.redis.exists(keys.quiet_held(lane)))

    @rides
    async def quiet_over(self, lane: str) -> None:
        await self.redis.delete(keys.quiet_held(lane))

    @rides
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

    @rides
    async def retry_lane_at(self, lane: str, when: float) -> None:
        """Try ``lane`` again no earlier than ``when`` (a time.time())."""
        await self.redis.zadd(keys.NOTIFY_LANES, {lane: when}, xx=True)

    @rides
    async def undelivered(self) -> int:
        """Messages written and not yet delivered nor dead-lettered: those still in the
        outbox and those moved to a lane."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xlen(keys.OUTBOX)
            pipe.hlen(keys.NOTIFY_HELD)
            outbox, held = await pipe.execute()
        return int(outbox) + int(held)

    @rides
    async def held_count(self) -> int:
        """Entries moved to lanes and not yet delivered or dead-lettered."""
        return int(await self.redis.hlen(keys.NOTIFY_HELD))

    @rides
    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The newest ``limit`` dead letters, oldest first."""
        raw = await self.redis.lrange(keys.NOTIFY_DEAD_LETTERS, -limit, -1)
        return [DeadLetter.decode(str(item)) for item in raw]

    @rides
    async def dead_letter_count(self) -> int:
        return int(await self.redis.llen(keys.NOTIFY_DEAD_LETTERS))
