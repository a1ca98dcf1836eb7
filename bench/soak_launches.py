"""The soak's launches as Slack sends them: each planned ``/train`` posted, signed, to a
live bot (no more than ``--concurrency`` in flight), its knob file written first; then
hung launches and those picked for a random cancel cancelled with the Cancel button."""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import aiohttp

from bench import soak_infra as infra
from bench import soak_slurm
from bench.soak_plan import knobs
from bench.soak_slack import CANCEL_ACTION, CHANNEL, USER, RecordingStandin
from bench.soak_thread import LAUNCH_RE, Plan
from support.slack_requests import block_action_body, post_signed, slash_command_body


class SoakLaunches:
    def __init__(
        self,
        args: argparse.Namespace,
        rng: random.Random,
        plans: list[Plan],
        run_id: str,
        standin: RecordingStandin,
        serves: list[infra.ServeProcess],
        cache_root: Path,
        note: Callable[[str], None],
        injected: Counter[str],
    ) -> None:
        self.args = args
        self.rng = rng  # the soak's one seeded generator, shared with its faults
        self.plans = plans
        self.run_id = run_id
        self.standin = standin
        self.serves = serves
        self.cache_root = cache_root
        self.note = note
        self.injected = injected
        self.open = asyncio.Event()  # cleared while Redis restarts: no requests then
        self.open.set()
        self.sent = 0
        self.running_since: dict[str, float] = {}

    # -- requests as Slack sends them --------------------------------------------------
    def live_serve(self) -> infra.ServeProcess:
        alive = [s for s in self.serves if s.alive] or self.serves
        return self.rng.choice(alive)

    async def post(self, body: str) -> str:
        await asyncio.wait_for(self.open.wait(), 120)
        url = f"{self.live_serve().base_url}/slack/events"
        try:
            answer = await asyncio.wait_for(post_signed(url, body), 15)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return f"(no answer: {type(exc).__name__}: {exc} from {url})"
        return answer.body if answer.status == 200 else f"(HTTP {answer.status})"

    async def find_by_tag(self, tag: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if launch_id := self.standin.launch_id_tagged(tag):
                return launch_id
            await asyncio.sleep(1)
        return ""

    async def send_train(self, plan: Plan) -> None:
        body = slash_command_body("/train", plan.text, user_id=USER, channel_id=CHANNEL)
        for _ in range(3):
            text = await self.post(body)
            match = LAUNCH_RE.search(text)
            plan.launch_id = match.group(0) if match else await self.find_by_tag(plan.tag, 30)
            if plan.launch_id:
                plan.sent_at = time.time()
                return
            self.note(f"{plan.tag}: /train not acknowledged ({text[:100]!r}); sending again")

    async def press_cancel(self, plan: Plan, *, ask_first: bool) -> None:
        if ask_first:  # /cancel answers with a confirm and the button
            await self.post(slash_command_body("/cancel", plan.launch_id, user_id=USER))
        body = block_action_body(
            CANCEL_ACTION,
            plan.launch_id,
            user_id=USER,
            channel_id=CHANNEL,
            message_ts=self.standin.parent_of(plan) or "1700000000.000001",
            response_url=self.standin.response_url(),
        )
        text = await self.post(body)
        if not text.startswith("(no answer") and not text.startswith("(HTTP"):
            plan.cancel_presses.append(time.time())

    # -- the launches in flight ----------------------------------------------------------
    def active(self) -> list[Plan]:
        return [p for p in self.plans if p.launch_id and not self.standin.final(p)]

    def submitting(self) -> list[Plan]:
        """Launches whose submit is in flight: pre-flight said ok, nothing since."""
        last = {p.launch_id: (self.standin.thread(p) or [""])[-1] for p in self.active()}
        return [p for p in self.active() if last.get(p.launch_id, "").startswith("Pre-flight ok")]

    async def launch_all(self) -> None:
        for plan in self.plans:
            while len(self.active()) >= self.args.concurrency:
                await asyncio.sleep(1)
            infra.write_knobs(plan.tag, knobs(plan, self.args))
            if plan.fault == "tokenizer":
                self.cold_cache(plan)
            await self.send_train(plan)
            self.sent += 1
            if not plan.launch_id:
                self.note(f"{plan.tag}: never queued")
            await asyncio.sleep(self.rng.uniform(0.2, 2.0))

    def cold_cache(self, plan: Plan) -> None:
        """A cold tokenizer cache on the launch's cluster, unless another race is under way."""
        others = [p for p in self.active() if p.fault == "tokenizer" and p.cluster == plan.cluster]
        if not others:
            infra.remove_tree(self.cache_root / f"cache-{plan.cluster}" / "torch")

    async def watch_once(self) -> None:
        """Cancel hung launches (when the thread says so, or when long overdue) and the
        launches picked for a random cancel."""
        now = time.time()
        queue = await asyncio.to_thread(soak_slurm.squeue_rows, self.run_id)
        for row in queue:
            if row.state == "RUNNING" and (match := LAUNCH_RE.search(row.name)):
                self.running_since.setdefault(match.group(0), now)
        for plan in self.active():
            presses = plan.cancel_presses
            if len(presses) >= 6 or (presses and now - presses[-1] < 30):
                continue
            if plan.fault == "hang":
                reported = any(t.startswith("⚠️ No progress for") for t in self.standin.thread(plan))
                since = self.running_since.get(plan.launch_id)
                overdue = since is not None and now - since > self.args.hang_min_s + 120
                if overdue and not reported:
                    self.note(f"{plan.launch_id} ({plan.tag}): hung, no report; cancelling")
                if reported or overdue:
                    await self.press_cancel(plan, ask_first=False)
            elif plan.cancel_after_s is not None and now - plan.sent_at >= plan.cancel_after_s:
                if not presses:
                    self.injected["cancel"] += 1
                    self.note(f"{plan.launch_id} ({plan.tag}): cancelling at random")
                await self.press_cancel(plan, ask_first=not presses)
