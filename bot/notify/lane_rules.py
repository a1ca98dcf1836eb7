"""The notifier's lanes, as rules: which lane an outbox entry joins, and when an
entry that failed is tried again (and when it is a dead letter, or given up)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.lifecycle import notices
from bot.lifecycle.events import Event
from bot.notify.paging import PAGE_KINDS

SWEEP_KINDS = ("parent", "update")  # a sweep member's events that go to the sweep's table


@dataclass(frozen=True)
class Retry:
    """A failed delivery is tried again after ``first_s``, then twice as long each
    time up to ``cap_s``. After ``max_tries`` tries it is a dead letter: recorded
    (and surfaced), but it keeps its place first in its lane, so its launch's later
    messages still follow it in order, and it is tried again less often, the wait
    doubling on up to ``dead_cap_s``, until ``give_up_after_s`` after its first
    failure; only then is it (with the rest of its lane) given up for good."""

    first_s: float = 2.0
    cap_s: float = 120.0
    max_tries: int = 8
    dead_cap_s: float = 1800.0
    give_up_after_s: float = 86400.0

    def delay_s(self, tries: int) -> float:
        """How long to wait after the ``tries``-th failure."""
        if tries < self.max_tries:
            return min(self.cap_s, self.first_s * 2.0 ** max(tries - 1, 0))
        late = min(tries - self.max_tries, 30)
        return min(self.dead_cap_s, max(self.cap_s, self.first_s) * 2.0**late)


def lane_of(event: Event, sweep: str = "") -> str:
    """A launch's thread is one lane and its pages another, so a page never waits
    for a thread the bot cannot post in. The parent updates of a sweep's members
    share one lane, the sweep's, where a newer update replaces those before it: the
    table is edited once per round, however many members moved. A person's DMs are a
    lane of their own (those that break through quiet hours another), whatever launch
    they are about."""
    if event.kind == "dm":
        user, urgent = str(event.data.get("user", "")), bool(event.data.get("urgent"))
        return notices.dm_lane(user, urgent=urgent)
    if sweep and event.kind in SWEEP_KINDS:
        return f"sweep:{sweep}"
    kind = "page" if event.kind in PAGE_KINDS else "thread"
    return f"{kind}:{event.launch_id}"
