"""The soak's faults outside the stand-in trainer, spread over the run in a seeded order:
a node failure under a running job, SIGKILL of a bot process (started again), a restart
of the soak's own Redis, the Redis primary SIGKILLed under Sentinel (timed until the
promotion and until every bot is healthy again) and the login node's sshd stopped."""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from bench import soak_infra as infra
from bench import soak_slurm
from bench.soak_launches import SoakLaunches
from bench.soak_thread import LAUNCH_RE


@dataclass
class PrimaryKill:
    """One SIGKILL of the Redis primary: what was in flight, and how long until it mended."""

    at_s: float  # since the soak began
    in_flight: str  # launches queued, submitting and running at the kill
    promoted_s: float | None = None  # until the sentinels named a new primary
    healthy_s: float | None = None  # until every bot's /healthz answered 200 after that
    unhealthy_seen: bool = False  # some /healthz answered other than 200 in between


class Faults:
    def __init__(
        self,
        args: argparse.Namespace,
        rng: random.Random,
        launches: SoakLaunches,
        redis: infra.OwnRedis,
        started: float,
        note: Callable[[str], None],
        injected: Counter[str],
    ) -> None:
        self.args = args
        self.rng = rng  # the soak's one seeded generator, shared with its launches
        self.launches = launches
        self.redis = redis
        self.started = started
        self.note = note
        self.injected = injected
        self.failed_nodes: set[str] = set()  # failed and not yet restored
        self.primary_kills: list[PrimaryKill] = []

    async def inject_all(self) -> None:
        a = self.args
        kinds = (
            ["node"] * a.node_failures
            + ["kill"] * a.kills
            + ["redis"] * a.redis_restarts
            + ["sshd"] * a.sshd_stops
            + ["primary"] * a.kill_redis_primary
        )
        self.rng.shuffle(kinds)
        plans = self.launches.plans
        for i, kind in enumerate(kinds):
            threshold = len(plans) * (0.15 + 0.7 * (i + 1) / (len(kinds) + 1))
            while self.launches.sent < threshold:
                await asyncio.sleep(1)
            await asyncio.sleep(self.rng.uniform(5, 20))
            try:
                await getattr(self, f"inject_{kind}")()
            except Exception as exc:  # a fault that could not be injected is reported
                self.note(f"could not inject {kind}: {type(exc).__name__}: {exc}")

    async def inject_node(self) -> None:
        deadline = time.monotonic() + 300
        running: list[soak_slurm.SoakQueueRow] = []
        while time.monotonic() < deadline and not running:
            rows = await asyncio.to_thread(soak_slurm.squeue_rows, self.launches.run_id)
            # A job that has just started and fails by no fault of its own: it still runs
            # when Slurm declares the node dead (only slurmd dies; see devcluster/node).
            running = [
                r
                for r in rows
                if r.state == "RUNNING" and r.nodelist and r.elapsed_s < 15 and self.steady(r)
            ]
            await asyncio.sleep(1)
        if not running:
            self.note("node failure skipped: none of the soak's jobs was running")
            return
        victim = self.rng.choice(running)
        node = infra.expand_nodes(victim.nodelist)[0]
        self.note(f"node failure: {node} (devcluster/node fail), running job {victim.job_id}")
        self.failed_nodes.add(node)
        try:
            await asyncio.to_thread(infra.node_fail, node)
            self.injected["node failure"] += 1

            def down() -> bool:
                out = infra.run(["sinfo", "-h", "-n", node, "-o", "%T"], timeout_s=20)
                return "down" in out or "fail" in out

            await infra.wait_until(f"{node} DOWN", down, 90, every_s=2)
        finally:
            await asyncio.to_thread(infra.node_restore, node)
            self.failed_nodes.discard(node)
            self.note(f"{node} restored")

    def steady(self, row: soak_slurm.SoakQueueRow) -> bool:
        """Whether the job belongs to a launch that runs long, to the end."""
        return any(
            p.launch_id and p.launch_id in row.name and p.long_run for p in self.launches.plans
        )

    async def inject_kill(self) -> None:
        serve = self.rng.choice([s for s in self.launches.serves if s.alive])
        self.note(f"SIGKILL {serve.name} (pid {serve.pid})")
        serve.sigkill()
        self.injected["bot SIGKILL"] += 1
        await asyncio.sleep(self.rng.uniform(3, 10))
        await serve.start()
        self.note(f"{serve.name} started again (pid {serve.pid})")

    async def inject_redis(self) -> None:
        self.note(f"Redis restart (:{self.redis.port})")
        self.launches.open.clear()
        try:
            await self.redis.stop()
            self.injected["Redis restart"] += 1
            await asyncio.sleep(3)
        finally:
            await self.redis.start()
            self.launches.open.set()
        self.note("Redis back")

    async def wait_submitting(self, timeout_s: float = 60) -> None:
        """Until some submit is in flight (the worst moment for a fault), bounded."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.launches.submitting():
            await asyncio.sleep(0.2)

    async def inject_primary(self) -> None:
        """SIGKILL the Redis primary, preferably while a submit is in flight; then until
        the sentinels promote the replica and every live bot's /healthz answers 200."""
        await self.wait_submitting()
        submitting = {p.launch_id for p in self.launches.submitting()}
        running = {
            m.group(0)
            for r in await asyncio.to_thread(soak_slurm.squeue_rows, self.launches.run_id)
            if r.state == "RUNNING" and (m := LAUNCH_RE.search(r.name))
        }
        queued = {p.launch_id for p in self.launches.active()} - submitting - running
        before = await asyncio.to_thread(infra.sentinel, "primary")
        killed_at = time.monotonic()
        await asyncio.to_thread(infra.sentinel, "kill")
        kill = PrimaryKill(
            at_s=time.time() - self.started,
            in_flight=f"{len(queued)} queued, {len(submitting)} submitting, {len(running)} running",
        )
        self.primary_kills.append(kill)
        self.injected["Redis primary SIGKILL"] += 1
        self.note(f"Redis primary {before} SIGKILLed; in flight: {kill.in_flight}")
        await self.wait_mended(kill, before, killed_at)
        self.note(
            f"bots healthy again {kill.healthy_s or 0:.1f} s after the kill"
            if kill.healthy_s
            else "bots not healthy within 120 s of the kill"
        )
        await asyncio.to_thread(infra.sentinel, "revive")
        self.note(f"old primary {before} revived as a replica")

    async def wait_mended(self, kill: PrimaryKill, before: str, killed_at: float) -> None:
        """Until a replica is promoted and every live bot's /healthz answers 200 (120 s
        at most), noting both times in ``kill``."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:

            async def status(serve: infra.ServeProcess) -> int:
                try:
                    async with session.get(f"{serve.base_url}/healthz") as response:
                        return response.status
                except (aiohttp.ClientError, TimeoutError):
                    return 0

            while time.monotonic() - killed_at < 120:
                now = time.monotonic() - killed_at
                if kill.promoted_s is None:
                    primary = await asyncio.to_thread(infra.sentinel, "primary")
                    if primary != before:
                        kill.promoted_s = now
                        self.note(f"replica {primary} promoted {now:.1f} s after the kill")
                codes = [await status(s) for s in self.launches.serves if s.alive]
                kill.unhealthy_seen |= any(code != 200 for code in codes)
                if kill.promoted_s is not None and all(code == 200 for code in codes):
                    kill.healthy_s = time.monotonic() - killed_at
                    break
                await asyncio.sleep(0.2)

    async def inject_sshd(self) -> None:
        # The worst moment: while a submit runs (up to a minute's wait for one).
        await self.wait_submitting()
        caught = [p.launch_id for p in self.launches.submitting()]
        if caught:
            self.note(f"submits in flight: {', '.join(caught)}")
        pids = {s.pid for s in self.launches.serves if s.alive}
        self.note(f"login node's sshd stopped for {self.args.sshd_down_s:.0f} s")
        try:
            await infra.stop_sshd(pids)
            self.injected["sshd stopped"] += 1
            await asyncio.sleep(self.args.sshd_down_s)
        finally:
            await infra.start_sshd()
        self.note("login node's sshd started again")

    def print_primary_kills(self) -> None:
        if not self.primary_kills:
            return
        print("Redis primary SIGKILLs (time from the kill):")
        for i, kill in enumerate(self.primary_kills, 1):
            promoted = "never" if kill.promoted_s is None else f"{kill.promoted_s:.1f} s"
            healthy = "not within 120 s" if kill.healthy_s is None else f"{kill.healthy_s:.1f} s"
            seen = "a 503 seen before" if kill.unhealthy_seen else "no 503 seen"
            print(
                f"  {i}. at {kill.at_s:.0f} s ({kill.in_flight}): replica promoted {promoted}, "
                f"every bot's /healthz 200 {healthy} ({seen})"
            )
