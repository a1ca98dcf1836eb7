"""A person's notification preferences: which events come as DMs, and quiet hours.

Pure: the model (kept as JSON in Redis by the store), when quiet hours end, and the
choices the App Home offers. Quiet hours are read in the person's own time zone
(Slack's ``users.info`` ``tz``, noted when they open the App Home or change a setting).
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field

from bot.lifecycle.notices import DM_EVENT_OF, DM_EVENTS, URGENT, DmEvent

DEFAULT_DM: tuple[DmEvent, ...] = ("finish", "failure", "hang")
EVENT_LABELS: dict[DmEvent, str] = {
    "start": "start",
    "checkpoint": "each checkpoint",
    "finish": "finish",
    "failure": "failure",
    "hang": "hang",
}


class Prefs(BaseModel):
    """What one person wants. Defaults: a DM when a launch of theirs (or one they watch)
    finishes, fails or hangs; no quiet hours."""

    model_config = ConfigDict(extra="ignore")

    dm: list[DmEvent] = Field(default_factory=lambda: list(DEFAULT_DM))
    quiet: bool = False
    quiet_start_h: int = Field(default=22, ge=0, le=23)
    quiet_end_h: int = Field(default=8, ge=0, le=23)
    break_through: bool = True  # failures and hangs come even in quiet hours
    tz: str = ""  # IANA name from Slack; "" is UTC

    def wants(self, notice: str) -> bool:
        """Whether this notice (:data:`bot.lifecycle.notices.Notice`) comes to them as a DM."""
        event = DM_EVENT_OF.get(notice)
        return event is not None and event in self.dm

    def urgent(self, notice: str) -> bool:
        """Whether this notice comes even in quiet hours."""
        return self.break_through and notice in URGENT


def zone(name: str) -> ZoneInfo:
    """The time zone ``name``; UTC when it is empty or unknown here."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def quiet_until(prefs: Prefs, now: float) -> float | None:
    """When the quiet hours that ``now`` falls in end (a time.time()), or None when
    ``now`` is outside them. The hours are wall-clock hours in the person's zone, so
    they stay put across daylight-saving changes; a window may span midnight."""
    start, end = prefs.quiet_start_h, prefs.quiet_end_h
    if not prefs.quiet or start == end:
        return None
    tz = zone(prefs.tz)
    local = datetime.fromtimestamp(now, tz)
    hour = local.hour
    inside = start <= hour < end if start < end else hour >= start or hour < end
    if not inside:
        return None
    day = local.date()
    if end <= hour:  # the window ends tomorrow
        day += timedelta(days=1)
    ends = datetime.combine(day, time(end), tzinfo=tz)
    # An hour a spring-forward change skips is read with the offset before the change,
    # which lands just after the jump: the first real moment past the quiet hours.
    return ends.timestamp()


def apply_choice(prefs: Prefs, choice: str) -> Prefs:
    """A setting changed in the App Home (``dm:finish:on``, ``quiet:on``, ``start:22``,
    ``end:7``, ``break:off``); ValueError with what would be right when it makes no sense."""
    name, _, rest = choice.partition(":")
    value, _, flag = rest.partition(":")
    if name == "dm" and value in DM_EVENTS and flag in ("on", "off"):
        on = flag == "on"
        wanted = [e for e in DM_EVENTS if (e in prefs.dm and e != value) or (e == value and on)]
        return prefs.model_copy(update={"dm": wanted})
    if name in ("quiet", "break") and value in ("on", "off") and not flag:
        field = "quiet" if name == "quiet" else "break_through"
        return prefs.model_copy(update={field: value == "on"})
    if name in ("start", "end") and value.isdigit() and 0 <= int(value) <= 23 and not flag:
        field = "quiet_start_h" if name == "start" else "quiet_end_h"
        return prefs.model_copy(update={field: int(value)})
    raise ValueError(
        f"unknown setting {choice!r}: expected dm:<event>:on|off (events: "
        f"{', '.join(DM_EVENTS)}), quiet:on|off, break:on|off, start:<0-23> or end:<0-23>"
    )


def hours_text(prefs: Prefs) -> str:
    """``22:00-08:00 Europe/Amsterdam``."""
    return f"{prefs.quiet_start_h:02d}:00-{prefs.quiet_end_h:02d}:00 {prefs.tz or 'UTC'}"
