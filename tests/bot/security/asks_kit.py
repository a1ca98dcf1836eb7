"""What the tests of forged asks share: a worker's real ask loop (``serve_asks``) with
real Clusters on the dev cluster, the dev cluster's people mapped (U0ALICE runs as
alice, U0BOB as bob), and ways to put any text on the asks list as an intruder who
reaches Redis would."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from bot.gateway import ask_wire as wire
from bot.gateway.answering import serve_asks
from bot.gateway.asks import WorkerAsks
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.store import keys
from bot.store.store import Store
from cluster.ssh.pool import SSHPool
from cluster.watching.tracking import Tracking
from commands.requests import TrainRequest
from support.workspace import ASK_KEY
from tests.bot.botkit import bot_settings, dev_config, open_test_store, stored_record

KEY = ASK_KEY.encode()
PEOPLE = {"U0ALICE": "alice", "U0BOB": "bob"}


@dataclass
class AskWorker:
    """A worker's ask loop, the store it takes from, and a well-behaved web role's asks."""

    store: Store
    clusters: Clusters
    asks: WorkerAsks
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    loops: list[asyncio.Task[None]] = field(default_factory=list)

    def serve(self) -> None:
        """Start the worker's ask loop."""
        self.loops.append(
            asyncio.create_task(serve_asks(self.store, self.clusters, self.stop, KEY))
        )

    async def push_raw(self, raw: str) -> None:
        """Any text on the asks list, as someone with Redis access would put it there."""
        await self.store.asks.push_ask(raw)

    async def answer(self, ask_id: str, timeout_s: float = 30) -> dict[str, Any] | None:
        """The worker's answer to ``ask_id``, its signature checked as the asker checks it."""
        sealed = await self.store.asks.wait_answer(ask_id, timeout_s)
        return None if sealed is None else wire.unseal_answer(ask_id, sealed, KEY)

    async def rewrite(self, launch_id: str, **fields: Any) -> None:
        """Change the launch's record in Redis behind the bot's back."""
        record = await stored_record(self.store, launch_id)
        record.update(fields)
        await self.store.redis.set(keys.launch(launch_id), json.dumps(record))


@asynccontextmanager
async def ask_worker(*, serving: bool = True, **config: Any) -> AsyncIterator[AskWorker]:
    """The ask loop of a worker process (holding the SSH key and the user CA); with
    ``serving=False`` the loop starts only at :meth:`AskWorker.serve`."""
    cfg = dev_config(people=PEOPLE, **config)
    async with open_test_store() as store, SSHPool() as pool:
        clusters = Clusters(cfg, bot_settings(), pool, store)
        stop = asyncio.Event()
        worker = AskWorker(store, clusters, WorkerAsks(store, KEY), stop)
        if serving:
            worker.serve()
        try:
            yield worker
        finally:
            stop.set()
            await asyncio.gather(*worker.loops)


def signed(body: str) -> str:
    """Any body, signed with the real key: what a holder of the key could put there."""
    sig = hmac.new(KEY, body.encode(), hashlib.sha256).hexdigest()
    return json.dumps({"body": body, "sig": sig})


def with_field(ask: wire.Ask, name: str, value: Any) -> str:
    """``ask`` with one more field in what it asks, signed with the real key."""
    body = json.loads(ask.model_dump_json())
    body["what"][name] = value
    return signed(json.dumps(body))


def old_style(kind: str, **args: Any) -> tuple[str, str]:
    """An ask as an intruder writes it: no signature, naming paths, users or job ids."""
    ask_id = secrets.token_hex(12)
    raw = {"id": ask_id, "kind": kind, "until": time.time() + 30, "args": args}
    return ask_id, json.dumps(raw)


def attempt(job_id: str, log_path: str = "") -> dict[str, Any]:
    """An attempt as stored, for :meth:`AskWorker.rewrite`."""
    tracking = {"framework": "nemo", "job_id": job_id, "log_path": log_path}
    return {"number": 1, "job_id": job_id, "tracking": tracking}


async def seeded(
    store: Store,
    *,
    owner: str = "U0ALICE",
    cluster_user: str = "alice",
    job_id: str = "",
    log_path: str = "",
    cancelled: bool = False,
) -> Launch:
    """A launch on a4 as the workers and poller would have left it."""
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    launch = Launch(
        request=request,
        user_id=owner,
        channel="C0TRAIN",
        phase=Phase.DONE if cancelled else Phase.RUNNING,
        outcome="CANCELLED" if cancelled else "",
        cluster_user=cluster_user,
        cancelled_by=owner if cancelled else "",
    )
    if job_id:
        tracking = Tracking(framework="nemo", job_id=job_id, log_path=log_path)
        launch.attempts = [Attempt(number=1, job_id=job_id, tracking=tracking)]
    await store.launches.create(launch, [], enqueue=False)
    return launch
