"""Delivers the outbox to the front end, in order, once.

One notifier at a time holds the lease, so a launch's thread reads in the
order its events were written, whichever process wrote them. An entry is
acknowledged only after the front end took it; after a crash the same
entry is delivered again unless it was marked posted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, assert_never

from bot import keys, render
from bot.front import Front, MessageRef
from bot.launches import Launch, Phase
from bot.paging import Pager
from bot.slack_text import (
    actions,
    approve_button,
    cancel_button,
    reject_button,
    retry_button,
    section,
    use_partition_button,
)
from bot.store import Event, Store
from cluster.profiles import ClusterProfile

log = logging.getLogger(__name__)

LEASE = "notifier"
LEASE_TTL_MS = 15_000
MAX_TRIES = 8


class Notifier:
    def __init__(
        self,
        store: Store,
        front: Front,
        profiles: dict[str, ClusterProfile],
        *,
        owner: str,
        pager: Pager | None = None,
    ) -> None:
        self.store = store
        self.front = front
        self.profiles = profiles
        self.owner = owner
        self.pager = pager
        self.delivered = 0
        self.on_delivered: list[Callable[[str], None]] = []  # told each delivered entry's id
        self._tries: dict[str, int] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                if not await self.store.acquire(LEASE, self.owner, LEASE_TTL_MS):
                    await _sleep(stop, 2.0)
                    continue
                await self.drain(block_ms=1000)
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis or the front end is down: keep going, slowly
                log.exception("notifier: delivery failed; retrying")
                await _sleep(stop, 2.0)
        await self.store.release(LEASE, self.owner)

    async def drained(self) -> bool:
        """Whether every outbox entry has been delivered."""
        return await self.store.stream_length(keys.OUTBOX) == 0

    async def drain(self, *, block_ms: int = 0) -> int:
        """Deliver what is waiting (this consumer's unacknowledged entries first)."""
        entries = await self.store.read(
            keys.OUTBOX, keys.OUTBOX_GROUP, self.owner, block_ms=block_ms, pending=True
        )
        if not entries:
            entries = await self.store.claim_stale(
                keys.OUTBOX, keys.OUTBOX_GROUP, self.owner, min_idle_ms=LEASE_TTL_MS
            )
        if not entries:
            entries = await self.store.read(
                keys.OUTBOX, keys.OUTBOX_GROUP, self.owner, block_ms=block_ms
            )
        events = []
        for entry_id, fields in entries:
            try:
                events.append(Event.decode(entry_id, fields))
            except ValueError as exc:  # written by another version of trainbot
                log.warning("notifier: outbox entry %s dropped: %s", entry_id, exc)
                await self.store.ack(keys.OUTBOX, keys.OUTBOX_GROUP, entry_id)
        for index, event in enumerate(events):
            later = events[index + 1 :]
            if event.kind == "update" and any(
                e.kind == "update" and e.launch_id == event.launch_id for e in later
            ):
                await self.store.ack(
                    keys.OUTBOX, keys.OUTBOX_GROUP, event.id
                )  # a newer one follows
                continue
            await self._deliver_once(event)
        return len(events)

    async def _deliver_once(self, event: Event) -> None:
        if not await self.store.was_posted(event.id):
            try:
                await self.deliver(event)
            except Exception:
                tries = self._tries.get(event.id, 0) + 1
                self._tries[event.id] = tries
                if tries < MAX_TRIES:
                    raise
                log.exception(
                    "notifier: giving up on %s event %s for %s",
                    event.kind,
                    event.id,
                    event.launch_id,
                )
            if event.kind != "update":
                await self.store.mark_posted(event.id)
        self._tries.pop(event.id, None)
        await self.store.ack(keys.OUTBOX, keys.OUTBOX_GROUP, event.id)
        self.delivered += 1
        for observer in self.on_delivered:
            observer(event.id)

    async def deliver(self, event: Event) -> None:
        launch = await self.store.get(event.launch_id)
        if launch is None:
            log.warning(
                "notifier: %s event for unknown launch %s dropped", event.kind, event.launch_id
            )
            return
        if event.kind == "enqueue":  # the store puts these on the queue, never in the outbox
            log.warning("notifier: enqueue event for %s is not a message; dropped", launch.id)
            return
        if not launch.parent_ts:
            launch = await self._post_parent(launch)
        match event.kind:
            case "parent":
                pass  # posted just above, or earlier
            case "update":
                text, blocks = render.parent(launch, self.profiles.get(launch.cluster))
                await self.front.update(
                    MessageRef(launch.channel, launch.parent_ts), text, blocks=blocks
                )
            case "thread":
                await self.front.post(
                    launch.channel,
                    event.text,
                    blocks=thread_blocks(launch, event),
                    thread_ts=launch.parent_ts,
                )
            case "plot":
                await self._plot(launch)
            case "oncall" | "resolve":
                if self.pager is None:
                    return
                link = await self.front.permalink(MessageRef(launch.channel, launch.parent_ts))
                if event.kind == "oncall":
                    await self.pager.trigger(launch, event.data, link)
                else:
                    await self.pager.resolve(launch, event.data, link)
            case _:
                assert_never(event.kind)

    async def _plot(self, launch: Launch) -> None:
        try:
            png = render.loss_curve(launch)
        except ValueError as exc:
            log.info("launch %s: no loss curve: %s", launch.id, exc)
            return
        await self.front.upload(
            launch.channel,
            launch.parent_ts,
            filename=f"{launch.id}-loss.png",
            content=png,
            title=f"Loss curve of {launch.id}",
        )

    async def _post_parent(self, launch: Launch) -> Launch:
        text, blocks = render.parent(launch, self.profiles.get(launch.cluster))
        ref = await self.front.post(launch.channel, text, blocks=blocks)

        def keep_ts(stored: Launch) -> list[Event]:
            stored.parent_ts = stored.parent_ts or ref.ts
            return []

        stored, _ = await self.store.mutate(launch.id, keep_ts)
        return stored


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


def thread_blocks(launch: Launch, event: Event) -> list[dict[str, Any]] | None:
    """Buttons under a thread line: Cancel and Retry (a hang), Approve and Reject,
    Use <partition> (a refused partition)."""
    wanted = event.data.get("buttons") or []
    label = f"job {launch.job_id}" if launch.job_id else f"launch {launch.id}"
    buttons = []
    if "cancel" in wanted and launch.active:
        buttons.append(cancel_button(launch.id, job_label=label))
    if "retry" in wanted and launch.active:
        buttons.append(retry_button(launch.id))
    partition = str(event.data.get("partition", ""))
    if "use_partition" in wanted and partition and launch.phase == Phase.REJECTED:
        buttons.append(use_partition_button(partition, f"{launch.id}:{partition}"))
    if launch.phase == Phase.AWAITING_APPROVAL and "approve" in wanted:
        buttons += [approve_button(launch.id), reject_button(launch.id)]
    if not buttons:
        return None
    return [section(event.text), actions(*buttons)]
