"""Posting one outbox entry: what a delivered event puts in front of people.

A launch's parent message (posted before anything else of its, then edited by
each update), its thread lines with their buttons, its loss curve, a person's
direct messages, and the steps of a page (Slack's on-call channel, PagerDuty),
each step marked done on its own. A sweep member's messages go to the sweep's
thread and table (``bot.notify.sweep_notes``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, assert_never

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.notify import sweep_notes
from bot.notify.paging import PAGE_KINDS, Pager
from bot.planning.after_training import exportable
from bot.store.store import Store
from bot.text.front import Front, MessageRef
from bot.text.mrkdwn import (
    actions,
    approve_button,
    cancel_button,
    edit_relaunch_button,
    evaluate_button,
    export_button,
    reject_button,
    resume_button,
    retry_button,
    run_again_button,
    section,
    use_partition_button,
)
from bot.wording import render, thread
from cluster.site.profiles import ClusterProfile

log = logging.getLogger(__name__)


class Poster:
    """Posts the events the notifier takes off its lanes, one at a time."""

    def __init__(
        self,
        store: Store,
        front: Front,
        profiles: dict[str, ClusterProfile],
        pager: Pager | None = None,
    ) -> None:
        self.store = store
        self.front = front
        self.profiles = profiles
        self.pager = pager
        self._sweep_locks: dict[str, asyncio.Lock] = {}

    async def send_dms(self, batch: list[Event]) -> None:
        """One direct message for the DMs of a lane not yet sent (a summary of several)."""
        todo = [dm for dm in batch if not await self.store.marks.was_posted(dm.id)]
        if not todo:
            return
        await self.front.post_to_user(
            str(todo[0].data.get("user", "")), thread.summary([dm.text for dm in todo])
        )
        for dm in todo:
            await self.store.marks.mark_posted(dm.id)

    async def deliver(self, event: Event) -> None:
        launch = await self.store.launches.get(event.launch_id)
        if launch is None:
            log.warning(
                "notifier: %s event for unknown launch %s dropped", event.kind, event.launch_id
            )
            return
        if event.kind in PAGE_KINDS:
            await self._page(event, launch)
            return
        if event.kind == "enqueue":  # the store puts these on the queue, never in the outbox
            log.warning("notifier: enqueue event for %s is not a message; dropped", launch.id)
            return
        if launch.sweep:
            await sweep_notes.deliver(
                self.store, self.front, self._sweep_locks, event, launch, thread_blocks
            )
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
                text = thread.posted(launch, event)
                await self.front.post(
                    launch.channel,
                    text,
                    blocks=thread_blocks(launch, event, text),
                    thread_ts=launch.parent_ts,
                )
            case "plot":
                await self._plot(launch)
            case "dm":
                await self.send_dms([event])
            case "oncall" | "resolve" | "enqueue":
                pass  # pages and queue entries are handled above
            case _:
                assert_never(event.kind)

    async def _page(self, event: Event, launch: Launch) -> None:
        """Each step of a page not yet done, side by side; raises when one failed."""
        if self.pager is None:
            return
        todo = {
            name: step
            for name, step in self.pager.steps().items()
            if not await self.store.marks.was_posted(f"{event.id}:{name}")
        }
        if not todo:
            return
        link = await self.permalink(launch)

        async def run(name: str) -> None:
            await todo[name](event.kind, launch, event.data, link)
            await self.store.marks.mark_posted(f"{event.id}:{name}")

        results = await asyncio.gather(*(run(name) for name in todo), return_exceptions=True)
        failed = [(n, r) for n, r in zip(todo, results, strict=True) if isinstance(r, Exception)]
        for name, error in failed:
            log.warning("launch %s: the %s step of a page failed: %s", launch.id, name, error)
        if failed:
            raise failed[0][1]
        if event.kind == "oncall" and await self.store.marks.mark_posted(f"{event.id}:told"):
            await self._say_paged(launch, list(self.pager.steps()))

    async def _say_paged(self, launch: Launch, steps: list[str]) -> None:
        """Once a page went out, say so in the launch's thread (after what caused it)."""
        paged = Event("thread", launch.id, data={"move": "paged", "steps": list(steps)})
        await self.store.launches.mutate(launch.id, lambda stored: [paged])

    async def permalink(self, launch: Launch) -> str:
        """The thread's link, or "" (no parent yet, or Slack cannot say): a page goes
        out without it rather than wait."""
        if not launch.parent_ts:
            return ""
        try:
            return await self.front.permalink(MessageRef(launch.channel, launch.parent_ts))
        except Exception as exc:
            log.warning("launch %s: no permalink for the page: %s", launch.id, exc)
            return ""

    async def _plot(self, launch: Launch) -> None:
        try:
            png = await asyncio.to_thread(render.loss_curve, launch)
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
        try:  # for links from App Home and /jobs history; the thread works without it
            link = await self.front.permalink(ref)
        except Exception as exc:
            log.info("launch %s: no permalink for its thread: %s", launch.id, exc)
            link = ""

        def keep_ts(stored: Launch) -> list[Event]:
            stored.parent_ts = stored.parent_ts or ref.ts
            stored.permalink = stored.permalink or link
            return []

        stored, _ = await self.store.launches.mutate(launch.id, keep_ts)
        return stored


def thread_blocks(launch: Launch, event: Event, text: str = "") -> list[dict[str, Any]] | None:
    """Buttons under a thread line: Cancel and Retry (a hang), Approve and Reject,
    Use <partition> (a refused partition), Run again and Edit & relaunch (the final line),
    Resume from checkpoint (a run that stopped early and was not resumed), and Export and
    Evaluate (the final line of a run that completed, where its framework has a converter)."""
    wanted = event.data.get("buttons") or []
    label = f"job {launch.job_id}" if launch.job_id else f"launch {launch.id}"
    buttons = []
    if "cancel" in wanted and launch.active:
        buttons.append(cancel_button(launch.id, job_label=label))
    if "retry" in wanted and launch.active:
        buttons.append(retry_button(launch.id))
    if "resume" in wanted and launch.outcome == "STOPPED_EARLY":
        buttons.append(resume_button(launch.id))
    if "run_again" in wanted and not launch.active and not launch.sweep:
        buttons += [run_again_button(launch.id), edit_relaunch_button(launch.id)]
        if launch.outcome == "COMPLETED" and exportable(launch):
            buttons += [export_button(launch.id), evaluate_button(launch.id)]
    partition = str(event.data.get("partition", ""))
    if "use_partition" in wanted and partition and launch.phase == Phase.REJECTED:
        buttons.append(use_partition_button(partition, f"{launch.id}:{partition}"))
    if launch.phase == Phase.AWAITING_APPROVAL and "approve" in wanted:
        target = str(event.data.get("sweep") or launch.id)  # a sweep is approved whole
        buttons += [approve_button(target), reject_button(target)]
    if not buttons:
        return None
    return [section(text or thread.line(event)), actions(*buttons)]
