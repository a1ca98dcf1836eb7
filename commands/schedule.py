"""``at=<time>`` and ``after=<job>[:ok|:any]``: when a launch may go. Pure: the caller
gives the clock and the person's time zone.

Times are read in the person's zone (Slack's ``tz`` of the user, the console's local
zone) and kept as UTC (``2026-12-24T07:00:00Z``), the canonical form ``to_text`` writes
back and this parser reads again.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from commands.errors import CommandError
from commands.parse import Args
from commands.suggest import quote
from commands.values import LAUNCH_ID_PATTERN, SLURM_JOB_ID_PATTERN

AT_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"  # the stored (UTC) form
AFTER_PATTERN = f"{LAUNCH_ID_PATTERN}|{SLURM_JOB_ID_PATTERN}"
MAX_AHEAD_DAYS = 90
AT_FORMS = "at=HH:MM, at=tomorrow HH:MM or at=YYYY-MM-DDTHH:MM"

_HHMM = re.compile(r"(\d{1,2}):(\d{2})")
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})[T ](\d{1,2}):(\d{2})(?::(\d{2}))?(Z|[+-]\d{2}:\d{2})?")


def zone(name: str) -> tzinfo:
    """The named IANA zone; "" or an unknown name: this machine's local zone."""
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    local = datetime.now().astimezone().tzinfo
    return local if local is not None else UTC


def zone_name(name: str) -> str:
    """How the zone is named back to the person."""
    found = zone(name)
    return str(found) if isinstance(found, ZoneInfo) else (found.tzname(None) or "local time")


def parse_at(raw: str, *, tz: str, now: float) -> str:
    """``at=`` text to the UTC time it means (the stored form), or CommandError saying
    what would be right. Times already past, more than :data:`MAX_AHEAD_DAYS` ahead,
    or skipped or doubled by a clock change are refused."""
    text = " ".join(raw.replace("_", " ").split())
    where = zone(tz)
    today = datetime.fromtimestamp(now, where).date()
    lowered = text.lower()
    when: datetime | None = None
    day: date | None = None
    rest = lowered
    for word, offset in (("today", 0), ("tomorrow", 1)):
        if lowered == word or lowered.startswith(word + " "):
            day, rest = today + timedelta(days=offset), lowered[len(word) :].strip()
            break
    if found := _HHMM.fullmatch(rest):
        clock = _clock(int(found[1]), int(found[2]), 0, raw)
        when = _local(datetime.combine(day or today, clock), where, raw)
        if day is None and when.timestamp() <= now:
            raise CommandError(
                f"at={quote(raw)}: {clock:%H:%M} today has passed ({zone_name(tz)}). "
                f'For tomorrow say at="tomorrow {clock:%H:%M}".',
                field="at",
            )
    elif day is None and (found := _ISO.fullmatch(text)):
        year, month, mday, hour, minute, second, utc_offset = found.groups()
        try:
            on = date(int(year), int(month), int(mday))
        except ValueError:
            raise CommandError(
                f"at={quote(raw)}: there is no such date. Use {AT_FORMS}.", field="at"
            ) from None
        clock = _clock(int(hour), int(minute), int(second or 0), raw)
        if utc_offset:
            stamp = f"{on.isoformat()}T{clock.isoformat()}"
            when = datetime.fromisoformat(stamp + ("+00:00" if utc_offset == "Z" else utc_offset))
        else:
            when = _local(datetime.combine(on, clock), where, raw)
    if when is None:
        raise CommandError(
            f"at={quote(raw)} is not a time trainbot reads. Use {AT_FORMS} "
            f"(24-hour clock, your time zone {zone_name(tz)}), "
            'for example at=22:00 or at="tomorrow 06:30".',
            field="at",
        )
    if when.timestamp() <= now:
        raise CommandError(
            f"at={quote(raw)} has already passed ({show(when.timestamp(), tz)}). "
            "Give a time ahead, or leave at= out to start now.",
            field="at",
        )
    if when.timestamp() > now + MAX_AHEAD_DAYS * 86400:
        raise CommandError(
            f"at={quote(raw)} is more than {MAX_AHEAD_DAYS} days ahead. Give a time within that.",
            field="at",
        )
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def at_epoch(stored: str) -> float:
    """The stored form (:data:`AT_PATTERN`) as seconds since the epoch."""
    return datetime.strptime(stored, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def show(when: float, tz: str) -> str:
    """``2026-12-24 08:00 Europe/Berlin``: a time as the person reads it."""
    return f"{datetime.fromtimestamp(when, zone(tz)):%Y-%m-%d %H:%M} {zone_name(tz)}"


def _clock(hour: int, minute: int, second: int, raw: str) -> time:
    if hour > 23 or minute > 59 or second > 59:
        raise CommandError(
            f"at={quote(raw)}: hours go from 00 to 23 and minutes from 00 to 59 "
            "(a 24-hour clock), for example at=18:30.",
            field="at",
        )
    return time(hour, minute, second)


def _local(naive: datetime, where: tzinfo, raw: str) -> datetime:
    """A wall-clock time in ``where``; refused when a clock change skips or repeats it."""
    first, second = naive.replace(tzinfo=where, fold=0), naive.replace(tzinfo=where, fold=1)
    if first.utcoffset() == second.utcoffset():
        return first
    if first.astimezone(UTC).astimezone(where).replace(tzinfo=None) != naive:
        raise CommandError(
            f"at={quote(raw)}: {naive:%Y-%m-%d %H:%M} does not exist in your time zone "
            "(the clocks skip it). Give a time an hour later.",
            field="at",
        )
    one, two = (d.strftime("%Y-%m-%dT%H:%M%z") for d in (first, second))
    raise CommandError(
        f"at={quote(raw)}: {naive:%Y-%m-%d %H:%M} happens twice in your time zone (the "
        f"clocks go back). Say which with its offset: at={one[:-2]}:{one[-2:]} or "
        f"at={two[:-2]}:{two[-2:]}.",
        field="at",
    )


def parse_after(raw: str) -> tuple[str, Literal["ok", "any"]]:
    """``after=<job>[:ok|:any]`` to (job, mode); the job is a launch id or a Slurm job id."""
    job, _, mode = raw.partition(":")
    value = _job_value(job)
    if value is None:
        raise CommandError(
            f"after={quote(raw)}: {quote(job)} is not a job. Give a launch id such as "
            "after=L-7f3a9c2b41 or a Slurm job id such as after=4187, optionally with "
            ":ok (start only if it completed, the default) or :any (start whatever its end).",
            field="after",
        )
    lowered = mode.lower() or "ok"
    if lowered == "ok":
        return value, "ok"
    if lowered == "any":
        return value, "any"
    raise CommandError(
        f"after={quote(raw)}: {quote(mode)} is not a condition. Use after={value}:ok "
        f"(start only if it completed) or after={value}:any (start whatever its end).",
        field="after",
    )


def parse_from(raw: str) -> tuple[str, int | None]:
    """``from=<job>[@<step>]``: a launch id or a Slurm job id, and the step of the
    checkpoint to start from (None: its newest complete one)."""
    job, at, step_text = raw.partition("@")
    value = _job_value(job)
    if value is None:
        raise CommandError(
            f"from={quote(raw)} is not a job. Give the launch whose newest checkpoint to "
            "start from: a launch id such as from=L-7f3a9c2b41 or a Slurm job id such as "
            "from=4187, and @<step> for another of its checkpoints (from=L-7f3a9c2b41@200).",
            field="from",
        )
    if not at:
        return value, None
    step = step_text.replace("_", "")
    if not step.isdigit() or len(step) > 12:
        raise CommandError(
            f"from={quote(raw)}: {quote(step_text)} is not a step. After @ give the step "
            f"of one of its checkpoints, a whole number such as from={value}@200 "
            f"(`/checkpoints {value}` lists them).",
            field="from",
        )
    return value, int(step)


def _job_value(text: str) -> str | None:
    """A launch id (its ``L-`` in upper case, the rest lower) or a Slurm job id; None
    when ``text`` is neither."""
    value = text.lower()
    if value.startswith("l-"):
        value = "L-" + value[2:]
    return value if re.fullmatch(AFTER_PATTERN, value) else None


def join_at_words(args: Args) -> Args:
    """``at=tomorrow 06:30`` typed without quotes splits in two: the lone ``HH:MM`` word
    that follows ``at=today`` or ``at=tomorrow`` joins it again."""
    at = args.pairs.get("at", "").lower()
    if at not in ("today", "tomorrow"):
        return args
    clocks = [w for w in args.words if _HHMM.fullmatch(w)]
    if len(clocks) != 1:
        return args
    words = tuple(w for w in args.words if w != clocks[0])
    return Args(words=words, pairs={**args.pairs, "at": f"{at} {clocks[0]}"})
