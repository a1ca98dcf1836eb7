"""The usage report: top users, clusters, failures by cause, the GPU-hours failed
runs used and the nodes that failed launches (the node ledger), posted to the
configured channel on a cron schedule (``report:``).

Every process that runs the poller schedules it; at each slot of the schedule the
first process to set the slot's mark in Redis (set-if-absent) posts and the others
do nothing, so the report is posted once however many bot processes run. A post that
fails lets the mark go (and is logged). Figures come from the charges taken from
``sacct`` (:meth:`bot.store.budgets.Budgets.charges`).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.core.usage import hours
from bot.settings.cron import cron_trigger, slot_of
from bot.store.budgets import Charge
from bot.store.nodes import NodeRecord
from bot.store.store import Store
from bot.text.front import Front
from bot.text.mrkdwn import escape, slack_date

log = logging.getLogger(__name__)

SUCCEEDED = frozenset({"COMPLETED", "CANCELLED", "STOPPED_EARLY", ""})  # not a failure
MARK_KEEP_S = 90 * 86400


def node_line(nodes: Sequence[NodeRecord], *, since: float, top: int) -> str:
    """The node ledger in the window: each node with the launches it failed then, most first."""
    counted = []
    for record in nodes:
        failures = record.failures_since(since)
        launches = {e.launch_id for e in failures if e.launch_id}
        if launches:
            causes = ", ".join(dict.fromkeys(e.cause_key or "unknown" for e in failures))
            counted.append((len(launches), record.cluster, record.node, causes))
    if not counted:
        return ""
    counted.sort(key=lambda row: (-row[0], row[1], row[2]))
    parts = [
        f"{escape(cluster)}/{escape(node)} {count} ({escape(causes)})"
        for count, cluster, node, causes in counted[:top]
    ]
    return "Nodes that failed launches (launches, causes): " + ", ".join(parts)


def report_text(
    charges: Sequence[Charge],
    *,
    since: float,
    until: float,
    top: int,
    nodes: Sequence[NodeRecord] = (),
) -> str:
    """The report's text (mrkdwn); ``nodes``: the node ledger of every cluster."""
    text = _usage_text(charges, since=since, until=until, top=top)
    ledger = node_line(nodes, since=since, top=top)
    return f"{text}\n{ledger}" if ledger else text


def _usage_text(charges: Sequence[Charge], *, since: float, until: float, top: int) -> str:
    start, end = slack_date(since), slack_date(until)  # each reader's own time zone
    total = sum(c.gpu_hours for c in charges)
    lines = [
        f"*GPU usage report* {start} to {end}: {hours(total)} GPU-hours in "
        f"{len(charges)} launch{'es' if len(charges) != 1 else ''}"
    ]
    if not charges:
        return lines[0] + "\nNothing was charged in this window."
    people: dict[str, float] = defaultdict(float)
    clusters: dict[str, float] = defaultdict(float)
    causes: dict[str, list[Charge]] = defaultdict(list)
    for c in charges:
        people[c.user_id] += c.gpu_hours
        clusters[c.cluster] += c.gpu_hours
        if c.outcome not in SUCCEEDED:
            causes[c.cause or c.outcome.lower()].append(c)
    ranked = sorted(people.items(), key=lambda item: (-item[1], item[0]))[:top]
    lines.append("Top users: " + ", ".join(f"<@{escape(u)}> {hours(h)}" for u, h in ranked))
    by_cluster = sorted(clusters.items(), key=lambda item: (-item[1], item[0]))
    lines.append("Clusters: " + ", ".join(f"{n} {hours(h)}" for n, h in by_cluster))
    failed = [c for group in causes.values() for c in group]
    if failed:
        parts = [
            f"{escape(cause)} {len(group)}"
            for cause, group in sorted(causes.items(), key=lambda item: (-len(item[1]), item[0]))
        ]
        lines.append(f"Failures by cause: {', '.join(parts)}")
        wasted = sum(c.gpu_hours for c in failed)
        lines.append(f"GPU-hours used by failed runs: {hours(wasted)} ({wasted / total:.0%})"
                     if total else f"GPU-hours used by failed runs: {hours(wasted)}")  # fmt: skip
    else:
        lines.append("No failed runs.")
    return "\n".join(lines)


class Reporter:
    """Posts the report on its schedule; once per slot across processes."""

    def __init__(
        self, store: Store, front: Front, *, channel: str, cron: str, days: int, top: int,
        owner: str, clusters: Sequence[str] = (),
    ) -> None:  # fmt: skip
        self.store, self.front, self.owner = store, front, owner
        self.clusters = list(clusters)  # whose node ledgers the report shows
        self.channel, self.days, self.top = channel, days, top
        self.trigger = cron_trigger(cron)
        self.scheduler = AsyncIOScheduler(timezone=UTC)

    def start(self) -> None:
        self.scheduler.add_job(self.run, self.trigger, id="report", misfire_grace_time=60)
        self.scheduler.start()

    def shutdown(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    async def run(self) -> bool:
        """Post the report of the current slot unless another process has; True if posted."""
        slot = slot_of(self.trigger, datetime.now(UTC))
        name = slot.strftime("%Y-%m-%dT%H:%M:%S")
        if not await self.store.marks.mark_once(name, self.owner, MARK_KEEP_S):
            return False
        until = min(slot.timestamp(), time.time())
        since = until - self.days * 86400
        try:
            nodes = [
                r for c in self.clusters for r in await self.store.nodes.node_ledger(c, since=since)
            ]
            text = report_text(await self.store.budgets.charges(since, until), since=since,
                               until=until, top=self.top, nodes=nodes)  # fmt: skip
            await self.front.post(self.channel, text)
        except Exception:
            log.exception("usage report of %s not posted", name)
            await self.store.marks.unmark(name, self.owner)
            return False
        log.info("usage report of %s posted to %s", name, self.channel)
        return True
