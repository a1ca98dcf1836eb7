"""Crontab schedules (UTC) of the bot's own timed posts: five or six fields, and the one
slot every process names for a run near a fire time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.settings.cron import cron_trigger, slot_of

MONDAY_9 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday


def test_five_fields_are_a_crontab_line_in_utc() -> None:
    trigger = cron_trigger("0 9 * * mon")
    after_friday = datetime(2026, 2, 27, 12, 0, tzinfo=UTC)
    assert trigger.get_next_fire_time(None, after_friday) == MONDAY_9
    assert trigger.get_next_fire_time(MONDAY_9, MONDAY_9 + timedelta(seconds=1)) == (
        MONDAY_9 + timedelta(days=7)
    )


def test_six_fields_put_seconds_first() -> None:
    trigger = cron_trigger("*/2 * * * * *")
    start = datetime(2026, 3, 2, 9, 0, 1, tzinfo=UTC)
    assert trigger.get_next_fire_time(None, start) == datetime(2026, 3, 2, 9, 0, 2, tzinfo=UTC)


@pytest.mark.parametrize("text", ["0 9 * *", "0 9 * * mon tue extra", ""])
def test_a_wrong_number_of_fields_says_how_many_to_give(text: str) -> None:
    with pytest.raises(ValueError, match=r"give 5 \(minute hour day month weekday\) or 6"):
        cron_trigger(text)


@pytest.mark.parametrize("text", ["61 9 * * mon", "0 9 * * someday", "0 25 * * *"])
def test_a_value_out_of_range_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        cron_trigger(text)


@pytest.mark.parametrize(
    "now",
    [
        MONDAY_9 - timedelta(seconds=2),  # a clock a little early
        MONDAY_9,
        MONDAY_9 + timedelta(seconds=5),  # a run that started a little late
        MONDAY_9 + timedelta(days=3, hours=11),  # just under half the week later
    ],
)
def test_a_run_belongs_to_the_nearest_fire_time(now: datetime) -> None:
    assert slot_of(cron_trigger("0 9 * * mon"), now) == MONDAY_9


def test_past_half_the_gap_the_next_slot_is_named() -> None:
    trigger = cron_trigger("0 9 * * mon")
    assert slot_of(trigger, MONDAY_9 + timedelta(days=3, hours=13)) == MONDAY_9 + timedelta(days=7)


def test_slots_of_a_schedule_in_seconds() -> None:
    trigger = cron_trigger("*/2 * * * * *")
    base = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)
    assert slot_of(trigger, base + timedelta(milliseconds=900)) == base
    assert slot_of(trigger, base + timedelta(milliseconds=1100)) == base + timedelta(seconds=2)


# -- read as cron reads it: Sunday is 0 and 7, Monday 1 ----------------------------

SUNDAY = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)  # the day before MONDAY_9


def fire_days(text: str, days: int = 7) -> list[str]:
    """The weekday names a schedule fires on in the week from SUNDAY 00:00."""
    trigger = cron_trigger(text)
    names: list[str] = []
    at = trigger.get_next_fire_time(None, SUNDAY)
    while at is not None and at < SUNDAY + timedelta(days=days):
        names.append(at.strftime("%a"))
        at = trigger.get_next_fire_time(at, at + timedelta(microseconds=1))
    return names


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("0 9 * * 1", ["Mon"]),
        ("0 9 * * mon", ["Mon"]),
        ("0 9 * * 1-5", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("0 9 * * mon-fri", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("0 9 * * 0", ["Sun"]),
        ("0 9 * * 7", ["Sun"]),
        ("0 9 * * 6,0", ["Sun", "Sat"]),
        ("0 9 * * */2", ["Sun", "Tue", "Thu", "Sat"]),
    ],
)
def test_weekdays_are_numbered_as_cron_numbers_them(text: str, days: list[str]) -> None:
    assert fire_days(text) == days


def test_monday_at_nine_fires_on_monday_at_nine() -> None:
    assert cron_trigger("0 9 * * 1").get_next_fire_time(None, SUNDAY) == MONDAY_9


def test_a_day_of_month_and_a_weekday_fire_on_either() -> None:
    # cron: "on the 1st, and on every Monday" (not "a 1st that is a Monday")
    assert fire_days("0 9 1 * 1", days=14) == ["Sun", "Mon", "Mon"]


async def test_the_scheduler_runs_the_trigger_at_its_fire_times() -> None:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    scheduler = AsyncIOScheduler(timezone=UTC)
    scheduler.add_job(lambda: None, cron_trigger("0 9 * * 1"), id="report")
    scheduler.start(paused=True)
    try:
        fire = scheduler.get_job("report").next_run_time
        assert fire is not None and fire.weekday() == 0 and (fire.hour, fire.minute) == (9, 0)
        assert fire > datetime.now(UTC)
    finally:
        scheduler.shutdown(wait=False)
