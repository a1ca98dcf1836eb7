"""at= and after=: every accepted form with the UTC time it means, every refusal with
what would be right, and the whole /train line round-tripping through to_text."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from commands import CommandError, TrainRequest, User
from commands.context import CommandContext
from commands.schedule import at_epoch, parse_after, parse_at, show
from tests.commands.lines import parse_line

# Thursday 2026-12-03 20:00 UTC: 21:00 in Berlin, 15:00 in New York.
NOW = datetime(2026, 12, 3, 20, 0, tzinfo=UTC).timestamp()

ACCEPTED = [
    ("22:00", "Europe/Berlin", "2026-12-03T21:00:00Z"),
    ("22:00", "America/New_York", "2026-12-04T03:00:00Z"),
    ("9:05", "Asia/Tokyo", "2026-12-04T00:05:00Z"),  # 05:00 in Tokyo now: 09:05 is today
    ("tomorrow 06:30", "Europe/Berlin", "2026-12-04T05:30:00Z"),
    ("Tomorrow   06:30", "Europe/Berlin", "2026-12-04T05:30:00Z"),
    ("tomorrow_06:30", "Europe/Berlin", "2026-12-04T05:30:00Z"),
    ("today 23:15", "Europe/Berlin", "2026-12-03T22:15:00Z"),
    ("2026-12-24T08:00", "Europe/Berlin", "2026-12-24T07:00:00Z"),
    ("2026-12-24 08:00", "America/New_York", "2026-12-24T13:00:00Z"),
    ("2026-12-24T08:00:30", "UTC", "2026-12-24T08:00:30Z"),
    ("2026-12-24T07:00:00Z", "America/New_York", "2026-12-24T07:00:00Z"),  # the stored form
    ("2026-12-24T08:00+01:00", "Asia/Tokyo", "2026-12-24T07:00:00Z"),
]


@pytest.mark.parametrize(("raw", "tz", "utc"), ACCEPTED, ids=[f"{a[0]}@{a[1]}" for a in ACCEPTED])
def test_at_accepted(raw: str, tz: str, utc: str) -> None:
    assert parse_at(raw, tz=tz, now=NOW) == utc


REFUSED = [
    ("20:30", "Europe/Berlin", "20:30 today has passed (Europe/Berlin)"),
    ("20:30", "Europe/Berlin", 'at="tomorrow 20:30"'),
    ("2026-12-01T08:00", "UTC", "has already passed (2026-12-01 08:00 UTC)"),
    ("today 08:00", "UTC", "has already passed"),
    ("8pm", "UTC", "Use at=HH:MM, at=tomorrow HH:MM or at=YYYY-MM-DDTHH:MM"),
    ("12/24 08:00", "UTC", "is not a time trainbot reads"),
    ("24.12.2026 08:00", "UTC", "is not a time trainbot reads"),
    ("0800", "UTC", "is not a time trainbot reads"),
    ("next week", "UTC", "is not a time trainbot reads"),
    ("25:00", "UTC", "hours go from 00 to 23"),
    ("2026-02-30T08:00", "UTC", "there is no such date"),
    ("2027-12-24T08:00", "UTC", "more than 90 days ahead"),
    ("2027-03-28T02:30", "Europe/Berlin", "does not exist in your time zone"),
]


@pytest.mark.parametrize(("raw", "tz", "message"), REFUSED)
def test_at_refused(raw: str, tz: str, message: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse_at(raw, tz=tz, now=NOW)
    assert message in str(caught.value)
    assert caught.value.field == "at"


def test_clock_changes_are_refused_with_what_would_be_right() -> None:
    march = datetime(2027, 3, 20, 12, 0, tzinfo=UTC).timestamp()
    with pytest.raises(CommandError, match="does not exist in your time zone"):
        parse_at("2027-03-28T02:30", tz="Europe/Berlin", now=march)
    october = datetime(2026, 10, 25, 12, 0, tzinfo=UTC).timestamp()
    with pytest.raises(CommandError) as caught:
        parse_at("2026-11-01T01:30", tz="America/New_York", now=october)
    text = str(caught.value)
    assert "happens twice" in text
    assert "at=2026-11-01T01:30-04:00" in text and "at=2026-11-01T01:30-05:00" in text
    # Either answer is then taken as it says.
    assert parse_at("2026-11-01T01:30-05:00", tz="", now=october) == "2026-11-01T06:30:00Z"
    assert parse_at("2027-02-28T02:30", tz="Europe/Berlin", now=NOW) == "2027-02-28T01:30:00Z"


def test_shown_back_in_the_persons_zone() -> None:
    # 01:30 on the 4th in Kolkata already: its "tomorrow" is the 5th.
    stored = parse_at("tomorrow 06:30", tz="Asia/Kolkata", now=NOW)
    assert show(at_epoch(stored), "Asia/Kolkata") == "2026-12-05 06:30 Asia/Kolkata"
    assert show(at_epoch(stored), "UTC") == "2026-12-05 01:00 UTC"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("L-7f3a9c2b41", ("L-7f3a9c2b41", "ok")),
        ("l-7F3A9C2B41", ("L-7f3a9c2b41", "ok")),  # any case, as typed elsewhere
        ("l-7f3a9c", ("L-7f3a9c", "ok")),
        ("L-7f3a9c:any", ("L-7f3a9c", "any")),
        ("4187:OK", ("4187", "ok")),
        ("4187:done", None),
        ("job-1", None),
        ("-1", None),
    ],
)
def test_after(raw: str, expected: tuple[str, str] | None) -> None:
    if expected is None:
        with pytest.raises(CommandError) as caught:
            parse_after(raw)
        assert caught.value.field == "after"
        assert "after=L-7f3a9c2b41" in str(caught.value) or ":ok" in str(caught.value)
    else:
        assert parse_after(raw) == expected


def test_train_line_keeps_at_and_after(context: CommandContext) -> None:
    user = User(id="U0ALICE", tz="Europe/Berlin")
    line = "/train sft llama3p1_8b after=L-7f3a9c:any at=tomorrow 06:30 cluster=a4"
    request = parse_line(line, user=user, context=context)
    assert isinstance(request, TrainRequest)
    assert request.after == "L-7f3a9c" and request.after_any
    assert request.at is not None
    assert show(at_epoch(request.at), "Europe/Berlin").endswith("06:30 Europe/Berlin")
    again = parse_line(request.to_text(), user=User(id="U0ALICE", tz="Asia/Tokyo"), context=context)
    assert again == request  # the stored UTC form reads back the same in any zone
    with pytest.raises(CommandError, match="is not a time trainbot reads"):
        parse_line("/train sft llama3p1_8b at=soon", user=user, context=context)
    with pytest.raises(CommandError, match="Unexpected '06:30'"):  # only after today/tomorrow
        parse_line("/train sft llama3p1_8b at=22:00 06:30", user=user, context=context)


def test_a_lone_time_is_not_taken_for_a_workload(context: CommandContext) -> None:
    user = User(id="U0ALICE", tz="UTC")
    with pytest.raises(CommandError, match="Say what to train first"):
        parse_line("/train at=tomorrow 06:30", user=user, context=context)
