"""trainbot scaled out: 2 web, 2 worker and 2 poller processes (``trainbot serve --role``)
on one Redis and the dev cluster, with one process of each role killed (SIGKILL) mid-run.

Launches go to both webs as signed HTTP slash commands. Every launch must complete with
exactly one Slurm job per attempt (found by the launch id in the job name), the Web API
stand-in must see no message twice, and the poller lease of every cluster the killed
poller held must move to the other poller within two poll intervals.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import aiohttp
import pytest
import redis.asyncio as aioredis

from bot.engine.poller import lease_name
from bot.lifecycle.launch import Phase
from bot.store import keys
from support.slack_requests import post_signed, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import ASK_KEY, BOT_TOKEN, SIGNING_SECRET
from tests.bot.botkit import (
    DEV,
    LAUNCH_RE,
    PROJECT,
    TEST_REDIS,
    dev_config,
    flush_test_redis,
    free_port,
    in_dm,
    knobs,
    open_test_store,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]

POLL_INTERVAL_S = 1.0
CLUSTERS = ("a3m", "a3u", "a4", "a3h")
WORKER_PID = re.compile(r"-worker-\d+-(\d+)-[0-9a-f]{6}$")


@dataclass
class Proc:
    role: str
    port: int
    popen: subprocess.Popen[bytes]
    log: Path
    out: IO[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        if not self.out.closed:
            self.out.flush()
        return self.log.read_text(errors="replace")


def start(role: str, index: int, tmp_path: Path, config: Path, standin: SlackStandin) -> Proc:
    port = free_port()
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("SLACK_") and not name.startswith("TRAINBOT_")
    }
    env |= {
        "TRAINBOT_CONFIG": str(config),
        "REDIS_URL": TEST_REDIS,
        "SLACK_API_URL": standin.api_url,
        "TRAINBOT_HTTP_PORT": str(port),
        "TRAINBOT_HF_TOKEN": "hf_test_token_value",
        "TRAINBOT_ASK_KEY": ASK_KEY,  # web signs its asks, workers check them
    }
    # Each role gets only the Slack secrets it needs: workers none, pollers the bot token.
    if role in ("web", "poller"):
        env["SLACK_BOT_TOKEN"] = BOT_TOKEN
    if role == "web":
        env["SLACK_SIGNING_SECRET"] = SIGNING_SECRET
    log = tmp_path / f"{role}{index}.log"
    out = log.open("wb")
    popen = subprocess.Popen(
        [sys.executable, "-m", "bot", "serve", "--role", role],
        cwd=PROJECT, env=env, stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    return Proc(role, port, popen, log, out)


async def wait_healthy(proc: Proc, timeout_s: float = 60) -> None:
    async def healthy() -> bool:
        assert proc.popen.poll() is None, proc.output()
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{proc.url}/healthz") as response,
            ):
                return response.status == 200
        except aiohttp.ClientError:
            return False

    await wait_until(healthy, f"{proc.role} on {proc.port} to be healthy", timeout_s, 0.3)


async def send_train(web: Proc, text: str, user: str = "U0ALICE") -> str:
    body = slash_command_body("/train", text, user_id=user)
    answer = await post_signed(f"{web.url}/slack/events", body)
    assert answer.status == 200 and answer.elapsed_s < 3.0, answer
    found = LAUNCH_RE.search(answer.json()["text"])
    assert found, answer.body
    return found.group(0)


async def jobs_named(launch_id: str) -> list[str]:
    """Slurm's jobs carrying ``launch_id``; the login node is shared and busy, so an ssh
    that fails (exit 255) is tried again."""
    for _ in range(3):
        try:
            return await asyncio.to_thread(slurm_jobs_named, launch_id)
        except AssertionError as exc:
            if "exited 255" not in str(exc):
                raise
            await asyncio.sleep(1.0)
    return await asyncio.to_thread(slurm_jobs_named, launch_id)


def launch_of(params: dict[str, object]) -> str:
    """The launch id a parent message names (in its text or its blocks' footer)."""
    found = LAUNCH_RE.search(f"{params.get('text', '')} {json.dumps(params.get('blocks'))}")
    return found.group(0) if found else f"no launch id in {params}"


async def lease_owners(client: aioredis.Redis) -> dict[str, str]:
    owners = {}
    for cluster in CLUSTERS:
        value = await client.get(keys.lease(lease_name(cluster)))
        owners[cluster] = value.decode() if isinstance(value, bytes) else (value or "")
    return owners


async def kill_a_worker_mid_launch(client: aioredis.Redis, workers: list[Proc]) -> Proc:
    """SIGKILL the worker process holding a queue entry (a launch it is working on)."""
    by_pid = {str(p.popen.pid): p for p in workers}

    async def holder() -> Proc | None:
        try:
            pending = await client.xpending_range(keys.QUEUE, keys.QUEUE_GROUP, "-", "+", 10)
        except aioredis.ResponseError:  # the group is not made yet
            return None
        for entry in pending:
            consumer = entry["consumer"]
            name = consumer.decode() if isinstance(consumer, bytes) else str(consumer)
            found = WORKER_PID.search(name)
            if found and found.group(1) in by_pid:
                return by_pid[found.group(1)]
        return None

    victim = await wait_until(holder, "a worker to take a launch", 30, 0.02)
    victim.popen.send_signal(signal.SIGKILL)
    return victim


async def test_two_of_each_role_survive_losing_one_of_each(
    standin: SlackStandin, unique: str, tmp_path: Path
) -> None:
    dev_config()  # skips when the dev cluster is not up
    await flush_test_redis()
    config = tmp_path / "trainbot.yaml"
    config.write_text(
        re.sub(
            r"poll_interval_s: [0-9.]+",
            f"poll_interval_s: {POLL_INTERVAL_S}",
            (DEV / "trainbot.yaml").read_text(),
        )
    )
    procs = [
        start(role, index, tmp_path, config, standin)
        for role in ("web", "worker", "poller")
        for index in (0, 1)
    ]
    webs, workers, pollers = procs[0:2], procs[2:4], procs[4:6]
    client = aioredis.from_url(TEST_REDIS)
    killed: list[Proc] = []
    try:
        await asyncio.gather(*(wait_healthy(p) for p in procs))
        async with knobs(unique, steps=6, step_time_s=0.5), open_test_store() as store:
            texts = [f"rm llama3p1_8b cluster={c} name={unique}" for c in CLUSTERS]
            sent = [send_train(webs[i % 2], text) for i, text in enumerate(texts)]
            launch_ids = list(await asyncio.gather(*sent))
            killed.append(await kill_a_worker_mid_launch(client, workers))
            webs[0].popen.send_signal(signal.SIGKILL)  # its launches are queued: nothing lost
            killed.append(webs[0])

            async def one_running() -> bool:
                launches = [await store.launches.get(launch_id) for launch_id in launch_ids]
                return any(la is not None and la.phase == Phase.RUNNING for la in launches)

            await wait_until(one_running, "a launch to run", 120)
            owners = await lease_owners(client)
            by_owner = Counter(owner for owner in owners.values() if owner)
            holder_name = by_owner.most_common(1)[0][0]
            victim = next(p for p in pollers if holder_name.endswith(f"-{p.popen.pid}"))
            lost = [cluster for cluster, owner in owners.items() if owner == holder_name]
            killed_at = time.monotonic()
            victim.popen.send_signal(signal.SIGKILL)
            killed.append(victim)
            survivor = next(p for p in pollers if p is not victim)

            async def taken_over() -> bool:
                now = await lease_owners(client)
                return all(now[c].endswith(f"-{survivor.popen.pid}") for c in lost)

            await wait_until(taken_over, "the poller leases to fail over", 30, 0.05)
            failover_s = time.monotonic() - killed_at
            assert failover_s <= 2 * POLL_INTERVAL_S, (failover_s, lost)

            # The surviving web still takes launches.
            later = await send_train(webs[1], f"rm llama3p1_8b name={unique}", user="U0BOB")
            launch_ids.append(later)
            launches = [await wait_for_launch(store, lid, timeout_s=240) for lid in launch_ids]
            await wait_delivered(store, timeout_s=60)

        assert [la.outcome for la in launches] == ["COMPLETED"] * len(launches), launches
        for launch in launches:  # one Slurm job per attempt
            attempts = sorted(a.job_id for a in launch.attempts)
            assert await jobs_named(launch.id) == attempts, launch.id

        posts = standin.calls_to("chat.postMessage")
        parents = Counter(
            launch_of(c.params)
            for c in posts
            if not c.params.get("thread_ts") and not in_dm(c.params)
        )
        assert parents == Counter(dict.fromkeys(launch_ids, 1)), parents
        # Each owner's DM about the end (the default preferences), once across notifiers.
        dms = Counter(launch_of(c.params) for c in posts if in_dm(c.params))
        assert dms == Counter(dict.fromkeys(launch_ids, 1)), dms
        thread = Counter(
            (c.params["thread_ts"], c.params["text"]) for c in posts if c.params.get("thread_ts")
        )
        assert [m for m, n in thread.items() if n > 1] == []
        uploads = Counter(
            c.params.get("thread_ts") for c in standin.calls_to("files.completeUploadExternal")
        )
        assert all(n == 1 for n in uploads.values()), uploads
        finals = [text for (_, text) in thread if re.match(r"<@U\w+> ✅ COMPLETED", text)]
        assert len(finals) == len(launch_ids)
    finally:
        await client.aclose()
        for proc in procs:
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
            proc.out.close()
    for proc in procs:
        if proc not in killed:
            assert proc.popen.returncode == 0, proc.output()
        assert "hf_test_token_value" not in proc.output()
        assert BOT_TOKEN not in proc.output()
