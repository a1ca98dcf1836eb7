"""Putting the bot together: Redis, the SSH pool, workers, notifier and poller.

Start-up and shutdown live in one AsyncExitStack, closed in reverse: on stop,
the workers finish what they hold (an unfinished queue entry stays pending
in Redis for the next start), the poller stops, the SSH pool closes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

from bot.alerts import PagerDuty
from bot.clusters import Clusters
from bot.config import Config
from bot.core import Core
from bot.front import Front
from bot.notifier import Notifier
from bot.paging import Pager
from bot.poller import Poller
from bot.settings import Settings
from bot.store import Store
from bot.worker import Worker
from cluster.ssh import SSHPool

log = logging.getLogger(__name__)


@dataclass
class Bot:
    settings: Settings
    config: Config
    store: Store
    clusters: Clusters
    core: Core
    workers: list[Worker]
    notifier: Notifier
    poller: Poller
    stop: asyncio.Event
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def healthy(self) -> tuple[bool, str]:
        try:
            await self.store.ping()
        except Exception as exc:
            return False, f"redis: {exc}"
        dead = [t.get_name() for t in self.tasks if t.done()]
        if dead:
            return False, "stopped: " + ", ".join(dead)
        return True, "ok"

    def metrics(self) -> str:
        stats = self.clusters.pool.stats
        lines = [
            "# HELP trainbot_launches_processed_total Queue entries handled by workers.",
            "# TYPE trainbot_launches_processed_total counter",
            f"trainbot_launches_processed_total {sum(w.processed for w in self.workers)}",
            "# HELP trainbot_messages_delivered_total Outbox entries delivered to the front end.",
            "# TYPE trainbot_messages_delivered_total counter",
            f"trainbot_messages_delivered_total {self.notifier.delivered}",
            "# HELP trainbot_message_retries_total Failed deliveries that will be tried again.",
            "# TYPE trainbot_message_retries_total counter",
            f"trainbot_message_retries_total {self.notifier.retried}",
            "# HELP trainbot_dead_letters_total Outbox entries given up on (kept in Redis).",
            "# TYPE trainbot_dead_letters_total counter",
            f"trainbot_dead_letters_total {self.notifier.dead_lettered}",
            "# HELP trainbot_polls_total Collector polls run.",
            "# TYPE trainbot_polls_total counter",
            f"trainbot_polls_total {self.poller.polls}",
            "# HELP trainbot_ssh_round_trips_total SSH commands run, by cluster.",
            "# TYPE trainbot_ssh_round_trips_total counter",
        ]
        for cluster, count in sorted(stats.by_cluster.items()):
            lines.append(f'trainbot_ssh_round_trips_total{{cluster="{cluster}"}} {count}')
        return "\n".join(lines) + "\n"


def process_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@asynccontextmanager
async def running(
    settings: Settings, config: Config, front: Front, *, workers: int = 2, instance: str = ""
) -> AsyncIterator[Bot]:
    """The whole bot speaking through ``front``; stops everything on exit.

    ``instance`` tells apart several bots on one host (their leases and queue consumers).
    """
    owner = process_name() + (f"-{instance}" if instance else "")
    host = socket.gethostname() + (f"-{instance}" if instance else "")
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(Store.connect(settings.redis_url))
        pool = await stack.enter_async_context(SSHPool())
        clusters = Clusters(config, settings, pool)
        core = Core(store, clusters, config.command_context(), front)
        pagerduty = None
        webhook = config.alerts.webhook
        if webhook is not None and webhook.routing_key is not None:
            key = settings.require_env_secret(webhook.routing_key.env, needed_by="alerts.webhook")
            pagerduty = await stack.enter_async_context(PagerDuty(webhook.url, key))
        pager = Pager(front, config.alerts, pagerduty)
        stop = asyncio.Event()
        bot = Bot(
            settings=settings,
            config=config,
            store=store,
            clusters=clusters,
            core=core,
            # Stable names: after a restart a worker first finishes its own pending entries.
            workers=[Worker(store, clusters, name=f"{host}-worker-{i}") for i in range(workers)],
            notifier=Notifier(
                store,
                front,
                clusters.profiles,
                owner=owner,
                pager=pager,
            ),
            poller=Poller(store, clusters, owner=owner),
            stop=stop,
        )
        for worker in bot.workers:
            bot.tasks.append(asyncio.create_task(worker.run(stop), name=worker.name))
        bot.tasks.append(asyncio.create_task(bot.notifier.run(stop), name="notifier"))
        bot.poller.start()

        async def shutdown() -> None:
            stop.set()
            bot.poller.shutdown()
            done, pending = await asyncio.wait(bot.tasks, timeout=15)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        stack.push_async_callback(shutdown)
        log.info(
            "trainbot running as %s with %d workers on %s",
            owner,
            workers,
            ", ".join(clusters.profiles),
        )
        yield bot
