"""One soak run: its own Redis (or Sentinel's), the Slack stand-in and two ``trainbot
serve`` processes started; the launches and the faults driven together until every
launch ended (or the deadline); then, with the bots stopped and Slurm settled, what
trainbot charged read and every launch checked; and everything cleaned up."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import yaml

from bench import soak_infra as infra
from bench import soak_slurm
from bench.soak_check import Divergence, check_charges, check_launch
from bench.soak_faults import Faults
from bench.soak_launches import SoakLaunches
from bench.soak_plan import CLUSTERS, make_plans
from bench.soak_slack import USER, RecordingStandin
from bench.soak_thread import LAUNCH_RE, View
from bot.settings.env import Target
from bot.store.store import Store
from commands.budget import iso_week
from support.workspace import BOT_TOKEN, SIGNING_SECRET


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
        self.standin = RecordingStandin(usergroups={"S0ONCALL": ["U0ONCALL"]})
        self.serves: list[infra.ServeProcess] = []
        self.plans = make_plans(
            self.rng, args.launches, self.run_id, args.cancels, args.node_failures
        )
        self.injected: Counter[str] = Counter()
        self.notes: list[str] = []
        self.started = time.time()
        self.cache_root = infra.trainer_home() / "trainbot-soak" / self.run_id
        self.charged: dict[str, float | None] = {}  # launch id -> GPU-hours charged
        self.charged_total = 0.0  # every budget's usage, summed
        self.launches = SoakLaunches(
            args,
            self.rng,
            self.plans,
            self.run_id,
            self.standin,
            self.serves,
            self.cache_root,
            self.note,
            self.injected,
        )
        self.faults = Faults(
            args, self.rng, self.launches, self.redis, self.started, self.note, self.injected
        )

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

    # -- the run -------------------------------------------------------------------------
    async def drive(self) -> None:
        deadline = self.started + self.args.deadline_s
        launcher = asyncio.create_task(self.launches.launch_all())
        faults = asyncio.create_task(self.faults.inject_all())
        try:
            while time.time() < deadline:
                await self.launches.watch_once()
                for task in (launcher, faults):
                    if task.done() and task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
                if launcher.done() and faults.done() and not self.launches.active():
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
                waiting = [i for c in clusters for i in await store.budgets.uncharged(c)]
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
                launch = await store.launches.get(plan.launch_id) if plan.launch_id else None
                if launch is not None:
                    self.charged[plan.launch_id] = launch.gpu_hours if launch.charged else None
            self.charged_total = sum(
                [await store.budgets.usage(USER, c, w) for c in CLUSTERS for w in weeks]
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
            view = self.standin.view(plan, jobs, mine)
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
            *(lambda n=n: infra.node_restore(n) for n in sorted(self.faults.failed_nodes)),
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
