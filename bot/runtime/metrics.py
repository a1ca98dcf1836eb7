"""``GET /metrics``: Prometheus metrics of one bot, every name prefixed ``trainbot_``.

Each bot has its own :class:`~prometheus_client.CollectorRegistry` (several bots
run in one test process). Three kinds of numbers:

- events this process saw, as counters and histograms fed by hooks: launches
  that ended (by outcome and cause), retries and pages (by cause), poll and SSH
  round-trip durations (by cluster), Slack API errors (by method and code),
  outbox delivery latency;
- what Redis holds, read at scrape time (:meth:`Metrics.expose`) and reported by
  a custom collector: queue depth and oldest entry age, deferred entries, the
  outbox backlog, dead letters (one ``source`` label per place that keeps them:
  the queue's, and any other registered with :meth:`Metrics.add_dead_letters`);
- the counters of earlier versions (``trainbot_launches_processed_total``,
  ``trainbot_messages_delivered_total``, ``trainbot_queue_dead_letters_total``,
  ``trainbot_polls_total``, ``trainbot_ssh_round_trips_total``), kept by name.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.store.base import Change
from bot.store.streams import Backlog

log = logging.getLogger(__name__)

# SSH commands take from milliseconds (a cached `true`) to a minute (a launcher).
SSH_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
POLL_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
DELIVERY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
NONE = "none"  # the label value when there is no cause

DeadLetterCount = Callable[[], Awaitable[int]]


@dataclass
class Counts:
    """This process's running totals that earlier versions exposed by name."""

    processed: Callable[[], int] = lambda: 0
    delivered: Callable[[], int] = lambda: 0
    queue_dead_letters: Callable[[], int] = lambda: 0
    polls: Callable[[], int] = lambda: 0
    ssh_round_trips: Callable[[], dict[str, int]] = dict


@dataclass
class _Snapshot:
    backlog: Backlog | None = None
    dead_letters: dict[str, int] = field(default_factory=dict)
    read_at: float = 0.0


class _ScrapeCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self.metrics.scrape_families()


class Metrics:
    """The registry, the hooks that feed it, and the Redis numbers read at scrape time."""

    def __init__(self, backlog: Callable[[], Awaitable[Backlog]], counts: Counts) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._backlog = backlog
        self.counts = counts
        self._dead_letters: dict[str, DeadLetterCount] = {}
        self._snapshot = _Snapshot()
        reg = self.registry
        self.launches = Counter(
            "trainbot_launches",
            "Launches that ended, by outcome (Slurm's word or why it was not submitted) "
            "and cause (the diagnosis key of the last failure).",
            ["outcome", "cause"],
            registry=reg,
        )
        self.retries = Counter(
            "trainbot_retries",
            "New attempts of a launch, by the cause of the failure they retry "
            "(manual: a person pressed Retry).",
            ["cause"],
            registry=reg,
        )
        self.pages = Counter(
            "trainbot_pages", "Pages to on-call written, by cause.", ["cause"], registry=reg
        )
        self.poll_seconds = Histogram(
            "trainbot_poll_duration_seconds",
            "One poll of a cluster: every tracked job read and applied.",
            ["cluster"],
            buckets=POLL_BUCKETS_S,
            registry=reg,
        )
        self.ssh_seconds = Histogram(
            "trainbot_ssh_round_trip_seconds",
            "One command on a login node, channel to exit.",
            ["cluster"],
            buckets=SSH_BUCKETS_S,
            registry=reg,
        )
        self.slack_errors = Counter(
            "trainbot_slack_api_errors",
            "Slack Web API calls that failed, by method and error code.",
            ["method", "code"],
            registry=reg,
        )
        self.delivery_seconds = Histogram(
            "trainbot_outbox_delivery_latency_seconds",
            "From an outbox entry's write to its delivery to the front end.",
            buckets=DELIVERY_BUCKETS_S,
            registry=reg,
        )
        self.store_retries = Counter(
            "trainbot_store_retries",
            "Redis calls tried again while the store rode through a failover, by reason "
            "(connection, timeout, readonly, masterdown, loading, noreplicas).",
            ["reason"],
            registry=reg,
        )
        self.store_failovers = Counter(
            "trainbot_store_failovers",
            "Episodes of the store riding through a failover (from the first retry until a "
            "call succeeds again).",
            registry=reg,
        )
        self.loop_restarts = Counter(
            "trainbot_loop_restarts",
            "Long-running loops started again after they raised (asks, notifier, workers), "
            "and scheduled jobs whose run raised (the next run is their restart), by loop.",
            ["loop"],
            registry=reg,
        )
        reg.register(_ScrapeCollector(self))

    # -- hooks --------------------------------------------------------------

    def add_dead_letters(self, source: str, count: DeadLetterCount) -> None:
        """A place that keeps dead letters (``queue``; the notifier's own, ...), read at
        scrape time as ``trainbot_dead_letters{source=...}``."""
        self._dead_letters[source] = count

    def observe_store_retry(self, reason: str, episode: bool) -> None:
        """A store call tried again (``episode``: the first retry since the store worked)."""
        self.store_retries.labels(reason).inc()
        if episode:
            self.store_failovers.inc()

    def observe_loop_restart(self, loop: str) -> None:
        """A loop failed and is started again (bot.runtime.supervise)."""
        self.loop_restarts.labels(loop).inc()

    def observe_change(self, change: Change) -> None:
        """A launch written by this process: count its end, a new attempt, its pages."""
        launch = change.launch
        if change.was_active and not launch.active:
            self.launches.labels(launch.outcome or str(launch.phase), _cause(launch)).inc()
        if change.attempts_before and len(launch.attempts) > change.attempts_before:
            failed = launch.attempts[change.attempts_before - 1]
            self.retries.labels(failed.cause_key or "manual").inc()
        for event in change.events:
            self.observe_event(event)

    def observe_event(self, event: Event) -> None:
        if event.kind == "oncall":
            self.pages.labels(str(event.data.get("cause_key") or NONE)).inc()

    def observe_poll(self, cluster: str, seconds: float) -> None:
        self.poll_seconds.labels(cluster).observe(seconds)

    def observe_ssh(self, cluster: str, seconds: float) -> None:
        self.ssh_seconds.labels(cluster or NONE).observe(seconds)

    def observe_slack_error(self, method: str, code: str) -> None:
        code = "unreachable" if code.startswith("unreachable") else code
        self.slack_errors.labels(method, code or "unknown").inc()

    def observe_delivery(self, entry_id: str) -> None:
        """``entry_id`` is a Redis stream id: its first part is when it was written (ms)."""
        try:
            written_ms = int(entry_id.split("-", 1)[0])
        except ValueError:
            return
        self.delivery_seconds.observe(max(time.time() - written_ms / 1000, 0.0))

    # -- scrape ---------------------------------------------------------------

    async def expose(self) -> str:
        """The text exposition, with what Redis holds read now."""
        snapshot = _Snapshot(read_at=time.time())
        try:
            snapshot.backlog = await self._backlog()
            for source, count in self._dead_letters.items():
                snapshot.dead_letters[source] = await count()
        except Exception as exc:  # Redis down: say so, expose the rest
            log.warning("metrics: Redis not read: %s", exc)
        self._snapshot = snapshot
        return generate_latest(self.registry).decode()

    def scrape_families(self) -> Iterator[Metric]:
        snap = self._snapshot
        up = GaugeMetricFamily("trainbot_redis_up", "Whether Redis answered at this scrape.")
        up.add_metric([], 1.0 if snap.backlog is not None else 0.0)
        yield up
        if snap.backlog is not None:
            yield from _backlog_families(snap.backlog, snap.read_at)
        dead = GaugeMetricFamily(
            "trainbot_dead_letters",
            "Entries set aside after failing repeatedly, kept in Redis, by where they are kept.",
            labels=["source"],
        )
        for source, count in sorted(snap.dead_letters.items()):
            dead.add_metric([source], count)
        yield dead
        yield from self._legacy_families()

    def _legacy_families(self) -> Iterator[Metric]:
        counts = self.counts
        simple = (
            ("trainbot_launches_processed", "Queue entries handled by workers.", counts.processed),
            (
                "trainbot_messages_delivered",
                "Outbox entries delivered to the front end.",
                counts.delivered,
            ),
            (
                "trainbot_queue_dead_letters",
                "Queue entries this process set aside after failing inside trainbot.",
                counts.queue_dead_letters,
            ),
            ("trainbot_polls", "Collector polls run.", counts.polls),
        )
        for name, text, value in simple:
            family = CounterMetricFamily(name, text)
            family.add_metric([], value())
            yield family
        trips = CounterMetricFamily(
            "trainbot_ssh_round_trips", "SSH commands run, by cluster.", labels=["cluster"]
        )
        for cluster, count in sorted(counts.ssh_round_trips().items()):
            trips.add_metric([cluster], count)
        yield trips


def _backlog_families(backlog: Backlog, now: float) -> Iterator[Metric]:
    def gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, text)
        family.add_metric([], value)
        return family

    def age(written: float | None) -> float:
        return max(now - written, 0.0) if written else 0.0

    yield gauge("trainbot_queue_depth", "Launch queue entries not yet done.", backlog.queue)
    yield gauge(
        "trainbot_queue_oldest_age_seconds",
        "Age of the oldest launch queue entry not yet done (0 when empty).",
        age(backlog.queue_oldest),
    )
    yield gauge(
        "trainbot_deferred",
        "Deferred retries and lookups waiting in Redis for their time.",
        backlog.deferred,
    )
    yield gauge(
        "trainbot_deferred_overdue",
        "Deferred entries already due but not yet back on the queue.",
        backlog.deferred_due,
    )
    yield gauge("trainbot_outbox_backlog", "Outbox entries not yet delivered.", backlog.outbox)
    yield gauge(
        "trainbot_outbox_oldest_age_seconds",
        "Age of the oldest undelivered outbox entry (0 when empty).",
        age(backlog.outbox_oldest),
    )


def _cause(launch: Launch) -> str:
    for attempt in reversed(launch.attempts):
        if attempt.cause_key:
            return attempt.cause_key
    return NONE
