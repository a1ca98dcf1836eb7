"""Notification preferences: quiet hours in the person's zone (across DST), which events
come as DMs, and the App Home's choices."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.lifecycle.prefs import Prefs, apply_choice, quiet_until


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


QUIET = [
    # (zone, start, end, now (UTC), quiet until (UTC) or None)
    ("Europe/Amsterdam", 22, 8, "2026-12-04T20:59:00+00:00", None),  # 21:59 local
    ("Europe/Amsterdam", 22, 8, "2026-12-04T21:00:00+00:00", "2026-12-05T07:00:00+00:00"),
    ("Europe/Amsterdam", 22, 8, "2026-12-05T03:00:00+00:00", "2026-12-05T07:00:00+00:00"),
    ("Europe/Amsterdam", 22, 8, "2026-12-05T07:00:00+00:00", None),  # 08:00 local: over
    ("America/Los_Angeles", 22, 8, "2026-12-05T07:00:00+00:00", "2026-12-05T16:00:00+00:00"),
    ("Asia/Kolkata", 13, 14, "2026-12-05T07:45:00+00:00", "2026-12-05T08:30:00+00:00"),
    ("", 22, 8, "2026-12-04T23:00:00+00:00", "2026-12-05T08:00:00+00:00"),  # no zone: UTC
    ("Not/AZone", 22, 8, "2026-12-04T23:00:00+00:00", "2026-12-05T08:00:00+00:00"),
    # Spring forward (2026-03-29, 02:00 CET -> 03:00 CEST): 8:00 local is 06:00 UTC.
    ("Europe/Amsterdam", 22, 8, "2026-03-28T22:00:00+00:00", "2026-03-29T06:00:00+00:00"),
    # Fall back (2026-10-25, 03:00 CEST -> 02:00 CET): 8:00 local is 07:00 UTC.
    ("Europe/Amsterdam", 22, 8, "2026-10-24T21:00:00+00:00", "2026-10-25T07:00:00+00:00"),
    # Quiet hours that end in the hour the clocks skip end at the jump (03:00 CEST).
    ("Europe/Amsterdam", 0, 2, "2026-03-29T00:30:00+00:00", "2026-03-29T01:00:00+00:00"),
    ("Europe/Amsterdam", 9, 17, "2026-12-04T12:00:00+00:00", "2026-12-04T16:00:00+00:00"),
    ("Europe/Amsterdam", 9, 17, "2026-12-04T17:00:00+00:00", None),
]


@pytest.mark.parametrize(("tz", "start", "end", "now", "until"), QUIET)
def test_quiet_hours_end_in_the_persons_zone(
    tz: str, start: int, end: int, now: str, until: str | None
) -> None:
    prefs = Prefs(quiet=True, quiet_start_h=start, quiet_end_h=end, tz=tz)
    got = quiet_until(prefs, at(now))
    assert (None if got is None else datetime.fromtimestamp(got, UTC).isoformat()) == (
        None if until is None else datetime.fromisoformat(until).isoformat()
    )


def test_no_quiet_hours_when_off_or_empty() -> None:
    now = at("2026-12-04T23:00:00+00:00")
    assert quiet_until(Prefs(quiet=False, tz="UTC"), now) is None
    assert quiet_until(Prefs(quiet=True, quiet_start_h=5, quiet_end_h=5), now) is None


def test_which_notices_come_as_dms_and_which_break_through() -> None:
    prefs = Prefs()  # finish, failure, hang; failures break through
    wanted = [n for n in ("started", "checkpoint", "completed", "failed", "hung") if prefs.wants(n)]
    assert wanted == ["completed", "failed", "hung"]
    assert prefs.wants("completed") and prefs.wants("cancelled") and prefs.wants("failed")
    assert not prefs.wants("started") and not prefs.wants("checkpoint")
    assert not prefs.wants("approval")  # the thread's mention is enough
    assert prefs.urgent("failed") and prefs.urgent("hung") and not prefs.urgent("completed")
    held = Prefs(break_through=False)
    assert not held.urgent("failed")
    only_failures = Prefs(dm=["failure"])
    assert only_failures.wants("failed") and not only_failures.wants("completed")


def test_app_home_choices() -> None:
    prefs = Prefs()
    prefs = apply_choice(prefs, "dm:finish:off")
    assert prefs.dm == ["failure", "hang"]
    prefs = apply_choice(apply_choice(prefs, "dm:checkpoint:on"), "dm:checkpoint:on")
    assert prefs.dm == ["checkpoint", "failure", "hang"]
    prefs = apply_choice(prefs, "quiet:on")
    prefs = apply_choice(apply_choice(prefs, "start:23"), "end:7")
    prefs = apply_choice(prefs, "break:off")
    assert (prefs.quiet, prefs.quiet_start_h, prefs.quiet_end_h, prefs.break_through) == (
        True,
        23,
        7,
        False,
    )


@pytest.mark.parametrize(
    "choice", ["dm:lunch:on", "dm:finish:maybe", "start:24", "end:-1", "quiet:yes", "x", ""]
)
def test_a_choice_that_makes_no_sense_says_what_would(choice: str) -> None:
    with pytest.raises(ValueError, match=r"expected dm:<event>:on\|off \(events: start, "):
        apply_choice(Prefs(), choice)
