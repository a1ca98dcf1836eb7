"""Putting the bot together: Redis, the SSH pool, workers, notifier and poller.

A process runs some of the bot's parts, by role (``trainbot serve --role``):
``web`` answers Slack (the core), ``worker`` takes launches off the queue,
``poller`` polls the clusters and delivers the outbox (the notifier: like the
poller it works under a Redis lease, so any number of poller processes can run
and one of them does the work); ``all`` is all three in one process. The web
role holds no SSH key and no user CA: the cluster work of its commands (start
estimates, /logs, /clusters, cancels) is asked of the workers (bot.gateway.asks).

Start-up and shutdown live in one AsyncExitStack, closed in reverse: on stop,
the workers finish what they hold (an unfinished queue entry stays pending
in Redis for the next start), the poller stops, the SSH pool closes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

from bot.core.core import Core
from bot.core.home import dead_letter_text
from bot.core.redact import (
    MIN_SECRET_CHARS,
    RedactingFront,
    Redactor,
    install_log_filter,
    remove_log_filter,
)
from bot.engine.image_runner import ImageRunner
from bot.engine.poller import Poller, lease_name
from bot.engine.worker import Worker, worker_name
from bot.gateway.answering import serve_asks
from bot.gateway.asks import WorkerAsks
from bot.gateway.authority import Authority
from bot.gateway.identity import People
from bot.gateway.on_cluster import Clusters
from bot.notify.alerts import PagerDuty
from bot.notify.lane_rules import Retry
from bot.notify.notifier import Notifier
from bot.notify.paging import Pager
from bot.notify.report import Reporter
from bot.runtime.metrics import Counts, Metrics
from bot.runtime.supervise import Supervisor
from bot.settings.config import Config
from bot.settings.env import Settings
from bot.slack.webapi import observe_slack_errors
from bot.store.store import Store
from bot.text.front import Front
from bot.wording import image_run as image_words
from cluster.errors import ConfigError
from cluster.ssh.connect import check_ca_key
from cluster.ssh.pool import SSHPool

log = logging.getLogger(__name__)

ROLES = ("all", "web", "worker", "poller")
PARTS = frozenset({"web", "worker", "poller"})


def acts_as_people(parts: frozenset[str]) -> bool:
    """Whether a process running ``parts`` logs in as people (and so reads the user CA
    key): workers and pollers do; the web part, which Slack talks to, never does."""
    return bool(parts & {"worker", "poller"})


def check_role_config(config: Config, parts: frozenset[str]) -> None:
    """What a process running ``parts`` needs of the config, checked before it connects
    to anything. One that logs in as people (a worker, a poller) needs the user CA key of
    every cluster with ``identity``, owner-only (see check_ca_key). The web role needs
    neither a CA nor an SSH key: it asks the workers for cluster work (bot.gateway.asks)."""
    if not acts_as_people(parts):
        return
    for name, profile in config.clusters.items():
        if profile.identity is not None and profile.login.user_ca_key_file is None:
            raise ConfigError(
                f"clusters.{name}: identity needs login.user_ca_key_file (the CA key the bot "
                "signs each person's short-lived SSH certificate with) in the worker and "
                "poller roles; only --role web runs without it"
            )
    paths = {p.login.user_ca_key_file for p in config.clusters.values()}
    for path in sorted(path for path in paths if path is not None):
        check_ca_key(path)


def check_ask_key(settings: Settings, parts: frozenset[str]) -> bytes | None:
    """The key asks are signed with (TRAINBOT_ASK_KEY), or None. A web process without
    one cannot work (every cluster answer of its commands is asked of the workers): it
    refuses to start. A worker without one answers no asks (an unsigned ask is never
    believed), and says so once at start; ``all`` needs none for itself."""
    key = settings.ask_key
    if key is not None:
        return key.get_secret_value().encode()
    if "web" in parts and not parts & {"worker", "poller"}:
        raise ConfigError(
            "is not set: the web role asks the workers for what its commands need of a "
            "cluster (/logs, /clusters, cancels, start estimates) and signs each ask with "
            "it; give the web and worker processes the same value of at least 32 "
            "characters (e.g. python3 -c 'import secrets; print(secrets.token_hex(32))'), "
            "or TRAINBOT_ASK_KEY_FILE",
            source="environment",
            path="TRAINBOT_ASK_KEY",
        )
    if "worker" in parts:
        log.warning(
            "TRAINBOT_ASK_KEY is not set: this process answers no asks, so a --role web "
            "process gets no /logs, /clusters, cancels or start estimates from it (this "
            "process's own commands do not need them)"
        )
    return None


def role_parts(role: str) -> frozenset[str]:
    """The parts a process of ``role`` runs."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; known: {', '.join(ROLES)}")
    return PARTS if role == "all" else frozenset({role})


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
    supervisor: Supervisor
    parts: frozenset[str] = PARTS

    meters: Metrics = field(init=False)

    def __post_init__(self) -> None:
        """The metrics of this bot, fed by hooks on its parts."""
        workers, stats = self.workers, self.clusters.pool.stats
        counts = Counts(
            processed=lambda: sum(w.processed for w in workers),
            delivered=lambda: self.notifier.delivered,
            queue_dead_letters=lambda: sum(w.dead_letters for w in workers),
            polls=lambda: self.poller.polls,
            ssh_round_trips=lambda: dict(stats.by_cluster),
        )
        meters = Metrics(self.store.backlog, counts)
        self.store.observers.append(meters.observe_change)
        self.store.retry_observers.append(meters.observe_store_retry)
        stats.observers.append(meters.observe_ssh)
        self.poller.observers.append(meters.observe_poll)
        self.notifier.on_delivered.append(meters.observe_delivery)
        self.supervisor.observers.append(meters.observe_loop_restart)
        observe_slack_errors(self.core.front, meters.observe_slack_error)
        meters.add_dead_letters("queue", self.store.queue.dead_letter_count)
        meters.add_dead_letters("queue_retrying", self.store.queue.retrying_count)
        meters.add_dead_letters("notifier", self.store.lanes.dead_letter_count)
        meters.add_dead_letters("notifier_retrying", self.store.lanes.retrying_count)
        meters.add_dead_letters("notifier_given_up", self.store.lanes.given_up_count)
        self.meters = meters

    async def healthy(self) -> tuple[bool, str]:
        """(True, "ok"), or False and which part is broken: redis, queue groups, poller
        lease, or a loop failing (bot.runtime.supervise); a loop restarted and running
        well since is said on the "ok". (Socket Mode is checked where it runs:
        bot.slack.http.)"""
        failing_over = self.store.failing_over()
        if failing_over:
            return False, f"redis: {failing_over}"
        try:
            await self.store.ping()
            groups = await self.store.groups_ok()
        except Exception as exc:
            return False, f"redis: {exc}"
        if not groups:
            return False, "queue groups: missing (they are made again on the next read)"
        if not self.poller.scheduler.running:  # another process must be polling each cluster
            try:
                unpolled = [
                    name
                    for name in self.clusters.profiles
                    if not await self.store.leases.lease_holder(lease_name(name))
                ]
            except Exception as exc:
                return False, f"redis: {exc}"
            if unpolled:
                return False, "poller lease: no process polls " + ", ".join(unpolled)
        failing, restarted = self.supervisor.problems()
        if failing:
            return False, "failing: " + "; ".join(failing)
        try:
            retrying = await self.store.lanes.retrying_letters()
            owed = dead_letter_text(retrying, await self.store.lanes.given_up_count())
        except Exception as exc:
            return False, f"redis: {exc}"
        said = ([owed] if owed else []) + (
            ["restarted: " + "; ".join(restarted)] if restarted else []
        )
        return True, "; ".join(["ok", *said])

    async def metrics(self) -> str:
        """The Prometheus text exposition (what Redis holds is read now)."""
        return await self.meters.expose()


def secret_redactor(settings: Settings, config: Config) -> Redactor:
    """One redactor for every secret value this process holds: the values of the
    variables the config names (job secrets, PagerDuty key), the Slack secrets and the
    Redis passwords (the data nodes', the sentinels', one inside ``REDIS_URL``)."""
    names = {ref.env for p in config.clusters.values() for ref in p.job_secrets.values() if ref.env}
    webhook = config.alerts.webhook
    if webhook is not None and webhook.routing_key is not None:
        names.add(webhook.routing_key.env)
    values = [settings.env_secret(name) for name in sorted(names)]
    values += [
        settings.ask_key,
        settings.slack_bot_token,
        settings.slack_app_token,
        settings.slack_signing_secret,
    ]
    found = [v.get_secret_value() for v in values if v is not None]
    found += [v for v in settings.redis_secrets() if v]
    short = [v for v in found if len(v) < MIN_SECRET_CHARS]
    if short:
        log.warning(
            "%d secret value(s) shorter than %d characters cannot be redacted safely",
            len(short),
            MIN_SECRET_CHARS,
        )
    return Redactor(found)


def process_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@asynccontextmanager
async def running(
    settings: Settings,
    config: Config,
    front: Front,
    *,
    workers: int = 2,
    instance: str = "",
    role: str = "all",
) -> AsyncIterator[Bot]:
    """The bot (the parts ``role`` runs) speaking through ``front``; stops everything on exit.

    ``instance`` tells apart several bots on one host (their leases and queue consumers).
    """
    parts = role_parts(role)
    if "worker" not in parts:
        workers = 0
    owner = process_name() + (f"-{instance}" if instance else "")
    host = socket.gethostname() + (f"-{instance}" if instance else "")
    async with AsyncExitStack() as stack:
        redactor = secret_redactor(settings, config)
        log_filter = install_log_filter(redactor)
        stack.callback(remove_log_filter, log_filter)
        front = RedactingFront(front, redactor)
        store = await stack.enter_async_context(
            Store.connect(
                settings.redis_target(), redact=redactor, retention=config.retention.store()
            )
        )
        people = acts_as_people(parts)
        check_role_config(config, parts)
        pool = await stack.enter_async_context(
            SSHPool(act_as_people=people, person_idle_s=settings.ssh_person_idle_s)
        )
        clusters = Clusters(config, settings, pool, store)
        ask_key = check_ask_key(settings, parts)
        # A process without the workers' keys (the web role) asks them for cluster work.
        calls = None if parts & {"worker", "poller"} else WorkerAsks(store, ask_key or b"")
        core = Core(
            store, clusters, config.command_context(), front, calls=calls, redactor=redactor
        )
        pagerduty = None
        webhook = config.alerts.webhook
        if webhook is not None and webhook.routing_key is not None:
            key = settings.require_env_secret(webhook.routing_key.env, needed_by="alerts.webhook")
            pagerduty = await stack.enter_async_context(PagerDuty(webhook.url, key))
        pager = Pager(front, config.alerts, pagerduty)
        stop = asyncio.Event()
        supervisor = Supervisor(stop, redact=redactor)
        bot = Bot(
            settings=settings,
            config=config,
            store=store,
            clusters=clusters,
            core=core,
            # Unique names: a worker's launch locks are its own, even on a shared host; what a
            # dead worker left pending is claimed by the others once idle.
            workers=[
                Worker(store, clusters, name=worker_name(f"{host}-worker-{i}"))
                for i in range(workers)
            ],
            notifier=Notifier(
                store,
                front,
                clusters.profiles,
                owner=owner,
                pager=pager,
                retry=Retry(
                    dead_cap_s=config.delivery.dead_letter_retry_max_s,
                    give_up_after_s=config.delivery.retry_for_h * 3600,
                ),
            ),
            poller=Poller(store, clusters, owner=owner),
            stop=stop,
            supervisor=supervisor,
            parts=parts,
        )
        # A launch that moves or comes due is admitted again with the groups Slack says now.
        directory = core.directory
        authority = Authority(
            store,
            clusters,
            People(clusters, front, clusters),
            directory.groups_of,
            lambda: bool(directory.unanswered),
        )
        bot.poller.authority = authority
        bot.notifier.may_see = authority.may_see
        # Every loop under the supervisor: one that raises is logged, counted and started
        # again after a back-off; /healthz says which (bot.runtime.supervise).
        for worker in bot.workers:
            worker.hold.authority = authority
            supervisor.run(worker.name, functools.partial(worker.run, stop))
        if bot.workers:  # /images import and fetch: submitted and followed by the workers
            runner = ImageRunner(
                store, clusters, front, name=worker_name(f"{host}-images"), words=image_words
            )
            supervisor.run("images", functools.partial(runner.run, stop))
        if bot.workers and ask_key is not None:  # the cluster work a web process asks for
            asks = functools.partial(serve_asks, store, clusters, stop, ask_key, redactor)
            supervisor.run("asks", asks)
        if "poller" in parts:
            supervisor.run("notifier", functools.partial(bot.notifier.run, stop))
            supervisor.watch_scheduler("poller", bot.poller.scheduler)
            bot.poller.start()
        if "poller" in parts and config.report is not None:
            report = config.report
            reporter = Reporter(
                store, front, channel=report.channel, cron=report.cron, days=report.days,
                top=report.top, owner=owner, clusters=list(config.clusters),
            )  # fmt: skip
            supervisor.watch_scheduler("report", reporter.scheduler)
            reporter.start()
            stack.callback(reporter.shutdown)

        async def shutdown() -> None:
            stop.set()
            bot.poller.shutdown()
            await supervisor.wait(15)
            await bot.poller.release()

        stack.push_async_callback(shutdown)
        log.info(
            "trainbot running as %s (role %s) with %d workers on %s",
            owner,
            role,
            workers,
            ", ".join(clusters.profiles),
        )
        yield bot
