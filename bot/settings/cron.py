"""Crontab schedules (UTC) for the bot's own timed posts: the parsed trigger and the
slot a run belongs to. Pure: the caller gives the clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apscheduler.triggers.cron import CronTrigger


def cron_trigger(text: str) -> CronTrigger:
    """A crontab line (UTC) as a trigger; six fields put seconds first. ValueError if bad."""
    fields = text.split()
    if len(fields) == 5:
        return CronTrigger.from_crontab(text, timezone=UTC)
    if len(fields) == 6:
        second, minute, hour, day, month, dow = fields
        return CronTrigger(
            second=second, minute=minute, hour=hour, day=day, month=month,
            day_of_week=dow, timezone=UTC,
        )  # fmt: skip
    raise ValueError(f"{len(fields)} fields; give 5 (minute hour day month weekday) or 6")


def slot_of(trigger: CronTrigger, now: datetime) -> datetime:
    """The schedule's slot a run at ``now`` belongs to: the nearest fire time, looking
    back up to half the gap between slots (every process names the same slot)."""
    first = trigger.get_next_fire_time(None, now)
    assert first is not None
    second = trigger.get_next_fire_time(first, first + timedelta(microseconds=1))
    gap = (second - first) if second is not None else timedelta(days=7)
    found: datetime | None = trigger.get_next_fire_time(None, now - gap / 2)
    return found if found is not None else first
