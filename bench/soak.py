"""Soak: many launches through two ``trainbot serve`` processes while things break, then
every thread checked against Slurm and the disk.

Runs N launches (NeMo pretrain/cpt/sft, NeMo-RL sft/dpo/grpo/rm; small models; clusters
a3m a3u a4 a3h; 1 or 2 nodes) on the dev cluster through signed Slack requests to two
``trainbot serve`` processes sharing the soak's own Redis (append-only, on a free port),
while injecting at random: the stand-in's faults (oom, nccl, hang, gated, wandb, the
tokenizer race) by knob files, a node failure, SIGKILL of a bot process (started again),
a Redis restart and the login node's sshd stopped for 30 s; with
``--kill-redis-primary N``, Redis is devcluster/sentinel's primary, replica and three
sentinels instead, and its primary is SIGKILLed N times (Sentinel promotes the replica;
the killed server comes back as a replica), each time reporting how long until the
promotion and until every bot's ``/healthz`` answered 200 again. Hung launches and a few
others are cancelled with the Cancel button. Then, from the Slack stand-in's record,
``sacct`` and the disk (trainbot's Redis only for what it charged), it checks each
launch's final state, checkpoints, message order and duplicates, one job per attempt, no
job after a cancel, on-call pages, and that the GPU-hours charged to budgets equal what
``sacct`` reports for the soak's jobs; prints a table and exits 1 on any divergence.

    .venv/bin/python bench/soak.py [--launches 40] [--concurrency 4] [--seed N]
                                   [--kill-redis-primary N]

Needs the dev cluster up and root (node failures, the login node's sshd). Not part of
``.ci/run``: it disturbs the shared dev cluster (a node fails, sshd stops for 30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import soak_infra as infra  # noqa: E402
from bench import soak_slurm  # noqa: E402
from bench.soak_check import Divergence, check_charges, check_launch  # noqa: E402
from bench.soak_report import print_report  # noqa: E402
from bench.soak_thread import LAUNCH_RE, PAGE_PREFIX, Plan, View, unmentioned  # noqa: E402
from bot.settings.env import Target
from bot.store.store import Store  # noqa: E402
from commands.budget import iso_week  # noqa: E402
from support.slack_standin import (  # noqa: E402
    BOT_TOKEN,
    SIGNING_SECRET,
    SlackStandin,
    block_action_body,
    post_signed,
    slash_command_body,
)

CHANNEL, ONCALL, USER = "C0TRAIN", "C0ONCALL", "U0ALICE"
CLUSTERS = ("a3m", "a3u", "a4", "a3h")
NEMO = [(w, m) for w in ("pretrain", "cpt", "sft") for m in ("llama3p1_2b", "llama3p1_8b")]
NEMO_RL = [(w, "llama3p1_8b") for w in ("sft", "dpo", "grpo", "rm")]
FAULTS = ("none", "oom", "nccl", "hang", "gated", "wandb", "tokenizer", "none")
FAULT_AT_STEP = 4
CANCEL_ACTION = "trainbot_cancel"


@dataclass
class PrimaryKill:
    """One SIGKILL of the Redis primary: what was in flight, and how long until it mended."""

    at_s: float  # since the soak began
    in_flight: str  # launches queued, submitting and running at the kill
    promoted_s: float | None = None  # until the sentinels named a new primary
    healthy_s: float | None = None  # until every bot's /healthz answered 200 after that
    unhealthy_seen: bool = False  # some /healthz answered other than 200 in between


@dataclass
class Msg:
    ts: str
    channel: str
    thread_ts: str
    text: str
    raw: str


class RecordingStandin(SlackStandin):
    """The Web API stand-in, also keeping each posted message's ts and every update."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.messages: list[Msg] = []
        self.updates: dict[str, list[str]] = {}

    def _m_chat_postMessage(self, p: dict[str, Any]) -> dict[str, Any]:
        answer = super()._m_chat_postMessage(p)
        raw = json.dumps(p, default=str, ensure_ascii=False)
        channel, thread_ts = str(p.get("channel", "")), str(p.get("thread_ts") or "")
        self.messages.append(Msg(answer["ts"], channel, thread_ts, str(p.get("text", "")), raw))
        return answer

    def _m_chat_update(self, p: dict[str, Any]) -> dict[str, Any]:
        self.updates.setdefault(str(p.get("ts", "")), []).append(str(p.get("text", "")))
        return super()._m_chat_update(p)


def make_plans(
    rng: random.Random, n: int, run_id: str, cancels: int, node_failures: int
) -> list[Plan]:
    faults = [FAULTS[i % len(FAULTS)] for i in range(n)]
    rng.shuffle(faults)
    plans = []
    for i, fault in enumerate(faults):
        framework = "nemo" if fault == "tokenizer" else rng.choice(("nemo", "nemo-rl"))
        workload, model = rng.choice(NEMO if framework == "nemo" else NEMO_RL)
        cluster, nodes = rng.choice(CLUSTERS), rng.choice((1, 1, 2))
        plans.append(
            Plan(i, f"{run_id}n{i:02d}", framework, workload, model, cluster, nodes, fault)
        )
    quiet = [p for p in plans if p.fault == "none"]
    for plan in rng.sample(quiet, min(cancels, len(quiet))):
        plan.cancel_after_s = rng.uniform(2, 45)
    steady = [p for p in quiet if p.cancel_after_s is None]
    # Spread over the run, so that one is running whenever a node failure comes.
    for plan in steady[:: max(1, len(steady) // max(1, 3 * node_failures))]:
        plan.long_run = node_failures > 0
    return plans


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.run_id = "sk" + secrets.token_hex(2)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"trainbot-soak-{self.run_id}-"))
        self.sentinel = args.kill_redis_primary > 0
        self.redis = infra.OwnRedis(self.workdir / "redis")
        self.target: str | Target = (
            Target(sentinels=infra.SENTINELS, wait_replicas=1, retry_for_s=30)
            if self.sentinel
            else self.redis.url
        )
        self.primary_kills: list[PrimaryKill] = []
        self.standin = RecordingStandin(usergroups={"S0ONCALL": ["U0ONCALL"]})
        self.serves: list[infra.ServeProcess] = []
        self.plans = make_plans(
            self.rng, args.launches, self.run_id, args.cancels, args.node_failures
        )
        self.injected: Counter[str] = Counter()
        self.notes: list[str] = []
        self.failed_nodes: set[str] = set()
        self.open = asyncio.Event()  # cleared while Redis restarts: no requests then
        self.open.set()
        self.started = time.time()
        self.parents: dict[str, str] = {}
        self.running_since: dict[str, float] = {}
        self.sent = 0
        self.cache_root = infra.trainer_home() / "trainbot-soak" / self.run_id
        self.charged: dict[str, float | None] = {}  # launch id -> GPU-hours charged
        self.charged_total = 0.0  # every budget's usage, summed

    def note(self, text: str) -> None:
        line = f"{time.time() - self.started:6.0f} s  {text}"
        self.notes.append(line)
        print(line, flush=True)

    # -- setup -----------------------------------------------------------------
    def write_config(self) -> Path:
        data = yaml.safe_load((infra.PROJECT / ".devcluster" / "trainbot.yaml").read_text())
        for name, cluster in data["clusters"].items():
            cluster["poll_interval_s"] = self.args.poll_interval_s
            cluster["cache_dir"] = f"~/trainbot-soak/{self.run_id}/cache-{name}"
            infra.make_trainer_dir(self.cache_root / f"cache-{name}")
        data["watch"].update(
            max_attempts=3,
            retry_backoff_s=1,
            hang_min_s=self.args.hang_min_s,
            hang_step_factor=10,
            evidence_reread_s=3,
        )
        for rule in data["policy"]["rules"]:
            rule["max_concurrent"] = max(int(rule.get("max_concurrent") or 0), len(self.plans))
        path = self.workdir / "trainbot.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    async def start(self) -> None:
        await self.standin.start()
        skip = {"SLACK_APP_TOKEN", "REDIS_URL", "REDIS_SENTINELS"}
        env = {k: v for k, v in os.environ.items() if k not in skip}
        if self.sentinel:
            await asyncio.to_thread(infra.sentinel, "down")
            await asyncio.to_thread(infra.sentinel, "up")
            async with Store.connect(self.target) as store:
                await store.redis.flushdb()
            env["REDIS_SENTINELS"] = infra.SENTINELS_ENV
            where = f"sentinels {infra.SENTINELS_ENV} (primary {infra.sentinel('primary')})"
        else:
            await self.redis.start()
            env["REDIS_URL"] = self.redis.url
            where = f"redis :{self.redis.port}"
        env |= {
            "TRAINBOT_CONFIG": str(self.write_config()),
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": self.standin.api_url,
            "TRAINBOT_HF_TOKEN": "hf_soak_token",
            "TRAINBOT_WANDB_API_KEY": "wandb_soak_key",
        }
        for name in ("bot-a", "bot-b"):
            serve = infra.ServeProcess(name, env, self.workdir / f"{name}.log")
            self.serves.append(serve)
            await serve.start()
        self.note(
            f"run {self.run_id}: {where}, bots on "
            f"{', '.join(str(s.port) for s in self.serves)}, logs in {self.workdir}"
        )

    # -- what the stand-in saw -------------------------------------------------------
    def parent_of(self, plan: Plan) -> str:
        if plan.launch_id and plan.launch_id not in self.parents:
            for msg in self.standin.messages:
                if (
                    msg.channel == CHANNEL
                    and not msg.thread_ts
                    and f"`{plan.launch_id}`" in msg.raw
                ):
                    self.parents[plan.launch_id] = msg.ts
                    break
        return self.parents.get(plan.launch_id, "")

    def view(
        self, plan: Plan, jobs: list[soak_slurm.JobRow], incarnations: list[soak_slurm.JobRow]
    ) -> View:
        ts = self.parent_of(plan)
        first = [m.text for m in self.standin.messages if m.ts == ts] if ts else []
        thread = [unmentioned(m.text) for m in self.standin.messages if ts and m.thread_ts == ts]
        pages = [
            m.text
            for m in self.standin.messages
            if m.channel == ONCALL
            and m.text.startswith(PAGE_PREFIX)
            and plan.launch_id
            and plan.launch_id in m.text
        ]
        parent_texts = first + self.standin.updates.get(ts, [])
        return View(plan, parent_texts, thread, pages, jobs, incarnations)

    def final(self, plan: Plan) -> bool:
        return not plan.launch_id or self.view(plan, [], []).final

    def thread(self, plan: Plan) -> list[str]:
        return self.view(plan, [], []).thread

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
            for msg in self.standin.messages:
                if msg.channel == CHANNEL and not msg.thread_ts and f"`{tag}`" in msg.raw:
                    if match := LAUNCH_RE.search(msg.raw):
                        return match.group(0)
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
            message_ts=self.parent_of(plan) or "1700000000.000001",
            response_url=self.standin.response_url(),
        )
        text = await self.post(body)
        if not text.startswith("(no answer") and not text.startswith("(HTTP"):
            plan.cancel_presses.append(time.time())

    # -- the run -------------------------------------------------------------------------
    def active(self) -> list[Plan]:
        return [p for p in self.plans if p.launch_id and not self.final(p)]

    async def launch_all(self) -> None:
        for plan in self.plans:
            while len(self.active()) >= self.args.concurrency:
                await asyncio.sleep(1)
            infra.write_knobs(plan.tag, self.knobs(plan))
            if plan.fault == "tokenizer":
                self.cold_cache(plan)
            await self.send_train(plan)
            self.sent += 1
            if not plan.launch_id:
                self.note(f"{plan.tag}: never queued")
            await asyncio.sleep(self.rng.uniform(0.2, 2.0))

    def knobs(self, plan: Plan) -> dict[str, object]:
        steps = self.args.steps * (4 if plan.long_run else 1)
        values: dict[str, object] = {
            "steps": steps,
            "step_time_s": self.args.step_time_s,
            "ckpt_every": 3,
            "save_time_s": 0.3,
            "tokenizer_race": "cold" if plan.fault == "tokenizer" else "off",
        }
        if plan.fault in ("oom", "nccl", "hang", "gated", "wandb"):
            values.update(fault=plan.fault, fault_at_step=FAULT_AT_STEP)
        if plan.fault == "nccl":
            values["fault_once"] = 1
        return values

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
                reported = any(t.startswith("⚠️ No progress for") for t in self.thread(plan))
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
        for i, kind in enumerate(kinds):
            threshold = len(self.plans) * (0.15 + 0.7 * (i + 1) / (len(kinds) + 1))
            while self.sent < threshold:
                await asyncio.sleep(1)
            await asyncio.sleep(self.rng.uniform(5, 20))
            try:
                await getattr(self, f"inject_{kind}")()
            except Exception as exc:  # a fault that could not be injected is reported
                self.note(f"could not inject {kind}: {type(exc).__name__}: {exc}")

    async def inject_node(self) -> None:
        deadline = time.monotonic() + 300
        running: list[soak_slurm.QueueRow] = []
        while time.monotonic() < deadline and not running:
            rows = await asyncio.to_thread(soak_slurm.squeue_rows, self.run_id)
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

    def steady(self, row: soak_slurm.QueueRow) -> bool:
        """Whether the job belongs to a launch that runs long, to the end."""
        return any(p.launch_id and p.launch_id in row.name and p.long_run for p in self.plans)

    async def inject_kill(self) -> None:
        serve = self.rng.choice([s for s in self.serves if s.alive])
        self.note(f"SIGKILL {serve.name} (pid {serve.pid})")
        serve.sigkill()
        self.injected["bot SIGKILL"] += 1
        await asyncio.sleep(self.rng.uniform(3, 10))
        await serve.start()
        self.note(f"{serve.name} started again (pid {serve.pid})")

    async def inject_redis(self) -> None:
        self.note(f"Redis restart (:{self.redis.port})")
        self.open.clear()
        try:
            await self.redis.stop()
            self.injected["Redis restart"] += 1
            await asyncio.sleep(3)
        finally:
            await self.redis.start()
            self.open.set()
        self.note("Redis back")

    async def inject_primary(self) -> None:
        """SIGKILL the Redis primary, preferably while a submit is in flight; then until
        the sentinels promote the replica and every live bot's /healthz answers 200."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.submitting():
            await asyncio.sleep(0.2)
        submitting = {p.launch_id for p in self.submitting()}
        running = {
            m.group(0)
            for r in await asyncio.to_thread(soak_slurm.squeue_rows, self.run_id)
            if r.state == "RUNNING" and (m := LAUNCH_RE.search(r.name))
        }
        queued = {p.launch_id for p in self.active()} - submitting - running
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
                codes = [await status(s) for s in self.serves if s.alive]
                kill.unhealthy_seen |= any(code != 200 for code in codes)
                if kill.promoted_s is not None and all(code == 200 for code in codes):
                    kill.healthy_s = time.monotonic() - killed_at
                    break
                await asyncio.sleep(0.2)
        self.note(
            f"bots healthy again {kill.healthy_s or 0:.1f} s after the kill"
            if kill.healthy_s
            else "bots not healthy within 120 s of the kill"
        )
        await asyncio.to_thread(infra.sentinel, "revive")
        self.note(f"old primary {before} revived as a replica")

    def submitting(self) -> list[Plan]:
        """Launches whose submit is in flight: pre-flight said ok, nothing since."""
        last = {p.launch_id: (self.thread(p) or [""])[-1] for p in self.active()}
        return [p for p in self.active() if last.get(p.launch_id, "").startswith("Pre-flight ok")]

    async def inject_sshd(self) -> None:
        # The worst moment: while a submit runs (up to a minute's wait for one).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.submitting():
            await asyncio.sleep(0.2)
        caught = [p.launch_id for p in self.submitting()]
        if caught:
            self.note(f"submits in flight: {', '.join(caught)}")
        pids = {s.pid for s in self.serves if s.alive}
        self.note(f"login node's sshd stopped for {self.args.sshd_down_s:.0f} s")
        try:
            await infra.stop_sshd(pids)
            self.injected["sshd stopped"] += 1
            await asyncio.sleep(self.args.sshd_down_s)
        finally:
            await infra.start_sshd()
        self.note("login node's sshd started again")

    async def drive(self) -> None:
        deadline = self.started + self.args.deadline_s
        launcher = asyncio.create_task(self.launch_all())
        faults = asyncio.create_task(self.inject_all())
        try:
            while time.time() < deadline:
                await self.watch_once()
                for task in (launcher, faults):
                    if task.done() and task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
                if launcher.done() and faults.done() and not self.active():
                    break
                await asyncio.sleep(2)
            else:
                self.note(f"deadline of {self.args.deadline_s:.0f} s reached")
        finally:
            for task in (launcher, faults):
                task.cancel()
            await asyncio.gather(launcher, faults, return_exceptions=True)
        await asyncio.sleep(8)  # the last parent updates

    # -- the end -------------------------------------------------------------------------
    async def wait_charged(self, timeout_s: float = 180) -> None:
        """While the bots still run: until no ended launch waits to be charged (the pollers
        charge one once sacct shows all its jobs ended), bounded."""
        clusters = sorted({p.cluster for p in self.plans})
        waiting: list[str] = []
        async with Store.connect(self.target) as store:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                waiting = [i for c in clusters for i in await store.uncharged(c)]
                if not waiting:
                    return
                await asyncio.sleep(2)
        self.note(f"still not charged after {timeout_s:.0f} s: {waiting}")

    async def read_charges(self) -> None:
        """What trainbot charged: each launch's figure, and every budget's usage in all
        (the soak's person, its clusters, the weeks it spanned)."""
        weeks = sorted({iso_week(self.started), iso_week(time.time())})
        async with Store.connect(self.target) as store:
            for plan in self.plans:
                launch = await store.get(plan.launch_id) if plan.launch_id else None
                if launch is not None:
                    self.charged[plan.launch_id] = launch.gpu_hours if launch.charged else None
            self.charged_total = sum(
                [await store.usage(USER, c, w) for c in CLUSTERS for w in weeks]
            )

    async def settle_slurm(self) -> None:
        """Stop the bots, then until Slurm holds none of the soak's jobs (bounded)."""
        for serve in self.serves:
            await serve.stop()
        try:
            await infra.wait_until(
                "the soak's jobs to leave the queue",
                lambda: not soak_slurm.squeue_rows(self.run_id),
                90,
                every_s=3,
            )
        except TimeoutError:
            left = soak_slurm.squeue_rows(self.run_id)
            self.note(f"still queued at the end, cancelled: {[r.job_id for r in left]}")
        await asyncio.sleep(3)  # slurmdbd catches up

    def check(self) -> tuple[list[View], list[Divergence]]:
        rows = soak_slurm.sacct_rows(self.started, self.run_id)
        incarnations = soak_slurm.sacct_rows(self.started, self.run_id, duplicates=True)
        home = infra.trainer_home()
        dirs = {
            "nemo_logs": home / "vertex-oss-training" / "nemo" / "logs",
            "nemo_rl": home / "vertex-oss-training" / "nemo_rl",
        }
        views, divergences = [], []
        known = {p.launch_id for p in self.plans if p.launch_id}
        for plan in self.plans:
            if not plan.launch_id:
                divergences.append(Divergence("not_queued", plan.tag, "no launch id came back"))
                continue
            jobs = [r for r in rows if plan.launch_id in r.name]
            mine = [r for r in incarnations if plan.launch_id in r.name]
            view = self.view(plan, jobs, mine)
            views.append(view)
            divergences += check_launch(view, dirs, page_user_faults=self.args.page_user_faults)
        for row in rows:
            match = LAUNCH_RE.search(row.name)
            if match is None or match.group(0) not in known:
                divergences.append(
                    Divergence("job_without_launch", row.job_id, f"{row.name} {row.state}")
                )
        divergences += check_charges(views, self.charged, self.charged_total, incarnations)
        return views, divergences

    def dump(self, views: list[View]) -> None:
        """Every thread, page and Slurm row, for reading a divergence afterwards."""
        out = [
            {
                "plan": asdict(v.plan),
                "parent": v.parent_texts[-1:] if v.parent_texts else [],
                "thread": v.thread,
                "pages": v.pages,
                "jobs": [asdict(j) for j in v.jobs],
                "incarnations": [asdict(j) for j in v.incarnations],
            }
            for v in views
        ]
        path = self.workdir / "threads.json"
        path.write_text(json.dumps({"notes": self.notes, "launches": out}, indent=1))

    async def cleanup(self) -> None:
        steps: list[Callable[[], object]] = [
            *(lambda n=n: infra.node_restore(n) for n in sorted(self.failed_nodes)),
            infra.start_sshd,
            *(s.stop for s in self.serves),
            lambda: soak_slurm.scancel([r.job_id for r in soak_slurm.squeue_rows(self.run_id)]),
            self.stop_redis,
            *(lambda t=p.tag: infra.remove_knobs(t) for p in self.plans),
            lambda: infra.remove_tree(self.cache_root),
            lambda: infra.remove_if_empty(self.cache_root.parent),
            self.standin.close,
        ]
        for step in steps:
            try:
                result = step()
                if asyncio.iscoroutine(result):
                    await asyncio.wait_for(result, 90)
            except Exception as exc:  # clean up the rest whatever happens
                print(f"soak: cleanup step failed: {type(exc).__name__}: {exc}", file=sys.stderr)

    async def stop_redis(self) -> None:
        if self.sentinel:
            await asyncio.to_thread(infra.sentinel, "down")
        else:
            await self.redis.stop()

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


async def main(args: argparse.Namespace) -> int:
    soak = Soak(args)
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
    divergences: list[Divergence] = []
    interrupted = False
    try:
        await soak.start()
        await soak.drive()
        await soak.wait_charged()
        await soak.settle_slurm()
        await soak.read_charges()
        views, divergences = soak.check()
        soak.dump(views)
        wall_s = time.time() - soak.started
        print_report(args, soak.run_id, views, divergences, soak.injected, soak.plans, wall_s)
        soak.print_primary_kills()
    except asyncio.CancelledError:  # SIGTERM or Ctrl-C: clean up, no verdict
        interrupted = True
    finally:
        await soak.cleanup()
        print(f"soak: logs kept in {soak.workdir}", flush=True)
    if interrupted:
        print("soak: interrupted; no verdict", file=sys.stderr)
        return 2
    return 1 if divergences else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    p.add_argument("--launches", type=int, default=40)
    p.add_argument("--concurrency", type=int, default=4, help="launches in flight at once")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--cancels", type=int, default=None, help="random cancels (default N/20)")
    p.add_argument("--node-failures", type=int, default=1)
    p.add_argument("--kills", type=int, default=None, help="bot SIGKILLs (default 1, 2 from 20)")
    p.add_argument(
        "--redis-restarts", type=int, default=None, help="default 1; 0 with --kill-redis-primary"
    )
    p.add_argument(
        "--kill-redis-primary",
        type=int,
        default=0,
        metavar="N",
        help="run Redis through devcluster/sentinel and SIGKILL its primary N times",
    )
    p.add_argument("--sshd-stops", type=int, default=1)
    p.add_argument("--sshd-down-s", type=float, default=30.0)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--step-time-s", type=float, default=1.5)
    p.add_argument("--poll-interval-s", type=float, default=1.0)
    p.add_argument("--hang-min-s", type=float, default=20.0)
    p.add_argument("--deadline-s", type=float, default=None, help="default 600 + 60 s a launch")
    p.add_argument(
        "--page-user-faults",
        action="store_true",
        help="expect an on-call page for oom, gated and wandb too (trainbot tells the user)",
    )
    args = p.parse_args(argv)
    args.seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    args.cancels = args.cancels if args.cancels is not None else max(1, args.launches // 20)
    if args.kill_redis_primary < 0:
        p.error(f"--kill-redis-primary {args.kill_redis_primary}: give 0 or more kills")
    if args.redis_restarts is None:
        args.redis_restarts = 0 if args.kill_redis_primary else 1
    elif args.redis_restarts and args.kill_redis_primary:
        p.error("--redis-restarts restarts the soak's own Redis; with --kill-redis-primary give 0")
    args.kills = args.kills if args.kills is not None else (2 if args.launches >= 20 else 1)
    if args.deadline_s is None:
        args.deadline_s = 600 + 60 * args.launches / max(1, args.concurrency) * 2
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
