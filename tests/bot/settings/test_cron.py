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
