"""Delivering a sweep member's messages: into the sweep's one thread and table.

The first message of any member posts the sweep's parent (once, under a lock per
sweep: one notifier delivers at a time) and every member takes that thread as its
own at once (a worker submits a launch only once its thread is up). A member's
parent update re-renders the whole table (those updates share one notifier lane,
so they coalesce); its thread lines are replies prefixed with the member's number
and values. When the last member ends, the comparison and the overlaid loss
curves are posted once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from bot.lifecycle import sweeps as sweep_math
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Sweep
from bot.store.store import Store
from bot.text.front import Front, MessageRef
from bot.text.plot import render_overlay_png
from bot.wording import sweeps, thread

log = logging.getLogger(__name__)


Blocks = Callable[[Launch, Event], list[dict[str, Any]] | None]


async def deliver(
    store: Store,
    front: Front,
    locks: dict[str, asyncio.Lock],
    event: Event,
    launch: Launch,
    thread_blocks: Blocks,
) -> None:
    sweep = await _parent(store, front, locks, launch.sweep)
    if sweep is None:
        log.warning("launch %s: its sweep %s is gone; message dropped", launch.id, launch.sweep)
        return
    if launch.parent_ts != sweep.parent_ts:
        launch = await _join_thread(store, launch, sweep)
    if event.kind == "update":
        await _update(store, front, sweep)
    elif event.kind == "thread":
        index = sweep.members.index(launch.id) if launch.id in sweep.members else -1
        who = f"*#{index + 1}* ({sweeps.short_values(sweep, index)}) " if index >= 0 else ""
        said = who + thread.line(event)
        labelled = Event(event.kind, event.launch_id, said, event.data, event.id)
        await front.post(
            sweep.channel,
            labelled.text,
            blocks=thread_blocks(launch, labelled),
            thread_ts=sweep.parent_ts,
        )
    # "parent": posted above; "plot": the sweep's overlay at its end replaces each member's


async def _parent(
    store: Store, front: Front, locks: dict[str, asyncio.Lock], sweep_id: str
) -> Sweep | None:
    async with locks.setdefault(sweep_id, asyncio.Lock()):
        sweep = await store.launches.get_sweep(sweep_id)
        if sweep is None or sweep.parent_ts:
            return sweep
        members = await store.launches.get_many(sweep.members)
        text, blocks = sweeps.table_blocks(sweep, members, time.time())
        ref = await front.post(sweep.channel, text, blocks=blocks)
        sweep.parent_ts = ref.ts
        await store.launches.save_sweep(sweep)
        try:  # for links from App Home and /jobs history; the thread works without it
            link = await front.permalink(ref)
        except Exception as exc:
            log.info("sweep %s: no permalink for its thread: %s", sweep.id, exc)
            link = ""
        for member in members:  # every member's thread is up now: its worker may submit
            if member is not None:
                await _join_thread(store, member, sweep, link)
        return sweep


async def _join_thread(store: Store, launch: Launch, sweep: Sweep, link: str = "") -> Launch:
    def join(stored: Launch) -> list[Event]:
        stored.parent_ts = sweep.parent_ts
        stored.permalink = stored.permalink or link
        return []

    stored, _ = await store.launches.mutate(launch.id, join)
    return stored


async def _update(store: Store, front: Front, sweep: Sweep) -> None:
    members = await store.launches.get_many(sweep.members)
    now = time.time()
    text, blocks = sweeps.table_blocks(sweep, members, now)
    await front.update(MessageRef(sweep.channel, sweep.parent_ts), text, blocks=blocks)
    if not sweep_math.ended(members) or await store.marks.was_posted(f"sweep-end:{sweep.id}"):
        return
    if not await store.marks.was_posted(f"sweep-compared:{sweep.id}"):
        text = f"<@{sweep.user_id}> {sweeps.comparison_text(sweep, members, now)}"
        await front.post(sweep.channel, text, thread_ts=sweep.parent_ts)
        await store.marks.mark_posted(f"sweep-compared:{sweep.id}")
    try:
        png = await asyncio.to_thread(
            render_overlay_png,
            sweep_math.curves(sweep, members),
            title=f"Sweep {sweep.id}: {sweep.title.replace(' · ', ' ')} · loss by member",
        )
    except ValueError as exc:
        log.info("sweep %s: no overlay: %s", sweep.id, exc)
    else:
        await front.upload(
            sweep.channel,
            sweep.parent_ts,
            filename=f"{sweep.id}-loss.png",
            content=png,
            title=f"Loss curves of sweep {sweep.id}",
        )
    await store.marks.mark_posted(f"sweep-end:{sweep.id}")
