"""Crontab schedules (UTC) for the bot's own timed posts: the parsed trigger and the
slot a run belongs to. Pure: the caller gives the clock.

A schedule is read as cron reads it (``cronsim``): weekdays 0 and 7 are Sunday, 1 is
Monday, so ``0 9 * * 1`` fires on Mondays and ``1-5`` is Monday to Friday; when both
the day of the month and the day of the week are restricted, either one matching is
enough. APScheduler 3's own ``CronTrigger`` counts weekdays from Monday = 0 and would
fire a day late; it only runs the trigger here (:class:`Crontab`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apscheduler.triggers.base import BaseTrigger
from cronsim import CronSim, CronSimError

_SECOND = timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)


class Crontab(BaseTrigger):  # type: ignore[misc]
    """An APScheduler trigger that fires when a crontab line (UTC) says; six fields put
    seconds first."""

    def __init__(self, text: str) -> None:
        self.text = " ".join(text.split())
        fields = self.text.split()
        if len(fields) not in (5, 6):
            raise ValueError(f"{len(fields)} fields; give 5 (minute hour day month weekday) or 6")
        try:
            next(CronSim(self.text, datetime(2000, 1, 1, tzinfo=UTC)))
        except CronSimError as exc:
            raise ValueError(str(exc).rstrip(".")) from None
        except StopIteration:
            raise ValueError("it never fires") from None

    def next_at(self, start: datetime) -> datetime | None:
        """The first fire time at or after ``start`` (None if there is none)."""
        start = start.astimezone(UTC)
        # CronSim gives whole seconds strictly after its start, less any microseconds.
        base = start.replace(microsecond=0) if start.microsecond else start - _SECOND
        try:
            return next(CronSim(self.text, base))
        except StopIteration:
            return None

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        """APScheduler's question: the next fire time, at or after ``now`` (or just after
        the previous one, when that is earlier)."""
        start = now
        if previous_fire_time is not None:
            start = min(now, previous_fire_time + _MICROSECOND)
        return self.next_at(start)

    def __str__(self) -> str:
        return f"crontab[{self.text}]"

    def __repr__(self) -> str:
        return f"<Crontab {self.text!r} UTC>"


def cron_trigger(text: str) -> Crontab:
    """A crontab line (UTC) as a trigger; six fields put seconds first. ValueError if bad."""
    return Crontab(text)


def slot_of(trigger: Crontab, now: datetime) -> datetime:
    """The schedule's slot a run at ``now`` belongs to: the nearest fire time, looking
    back up to half the gap between slots (every process names the same slot)."""
    first = trigger.get_next_fire_time(None, now)
    assert first is not None
    second = trigger.get_next_fire_time(first, first + timedelta(microseconds=1))
    gap = (second - first) if second is not None else timedelta(days=7)
    found: datetime | None = trigger.get_next_fire_time(None, now - gap / 2)
    return found if found is not None else first
