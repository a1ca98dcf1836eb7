"""Work is never lost, doubled or stuck in the workers: one job per attempt whatever
stalls, backoff without sleeping, an unknown submit outcome looked up until Slurm
answers, a cancel that wins, a retry that cancels first, dead letters, and queue
groups that come back after Redis lost them.

Real Redis; the cluster side is scripted at trainbot's own seam (``Clusters``), so
each fault happens exactly when the test says.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bot.core.core import Core
from bot.engine import recovery, submit, worker
from bot.engine.babysit import used_gpu_hours
from bot.engine.holding import Hold
from bot.engine.tracking import apply_snapshot
from bot.engine.worker import Worker, worker_name
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.settings.config import parse_config
from bot.settings.env import Settings
from bot.settings.sections import Watch
from bot.store import keys
from bot.store.base import StoreError
from bot.store.store import Store
from bot.wording import thread
from cluster.errors import ClusterUnreachable, CommandTimeout, SlurmCommandFailed
from cluster.launching.jobs import FoundJob
from cluster.launching.launch import Submission
from cluster.launching.spec import LaunchSpec
from cluster.preflight.checks import PreflightResult
from cluster.ssh.pool import SSHPool
from cluster.watching.collector import JobSnapshot, LogChunk
from cluster.watching.diagnosis import diagnose
from cluster.watching.evidence import Evidence, EvidenceFile
from commands.context import User
from commands.requests import TrainRequest
from tests.bot.botkit import ended_with, stream_entries

CONFIG = """
clusters:
  a4:
    type: hcc-a4
    login: {host: 127.0.0.1, port: 2222, user: trainer}
    partition: a4
    max_nodes: 4
policy:
  rules:
    - {users: ["*"], clusters: ["*"], max_nodes: 4, max_concurrent: 4}
"""
ALICE = User(id="U0ALICE", name="alice")


class ScriptedClusters(Clusters):
    """The real spec building; pre-flight, submit, find and cancel as the test scripts them."""

    def __init__(self, pool: SSHPool) -> None:
        super().__init__(parse_config(CONFIG), Settings.from_environ({}), pool)
        self.submits: list[str] = []
        self.cancelled: list[str] = []
        self.jobs: dict[str, list[FoundJob]] = {}  # launch id -> jobs Slurm has for it
        self.on_submit: Callable[[LaunchSpec], Any] | None = None
        self.before_sbatch: Callable[[LaunchSpec], Any] | None = None  # the launcher's start
        self.find_error: Exception | None = None
        self.cancel_error: Exception | None = None
        self.preflight_started = asyncio.Event()
        self.preflight_gate: asyncio.Event | None = None
        self.preflight_error: Exception | None = None

    async def preflight(self, spec: LaunchSpec) -> PreflightResult:
        self.preflight_started.set()
        if self.preflight_gate is not None:
            await self.preflight_gate.wait()
        if self.preflight_error is not None:
            raise self.preflight_error
        return PreflightResult(cluster=spec.cluster, checks=())

    async def submit(self, spec: LaunchSpec) -> Submission:
        if self.before_sbatch is not None:
            await self.before_sbatch(spec)
        job_id = str(100 + len(self.submits))
        self.submits.append(job_id)
        self.jobs.setdefault(spec.launch_id, []).append(
            FoundJob(job_id, spec.job_name, "PENDING", True)
        )
        if self.on_submit is not None:
            await self.on_submit(spec)
        output = (
            f"{job_id}\n"
            if spec.framework == "nemo-rl"
            else (f"- Job id: {job_id}\n- Local Directory: /x/{job_id}\n")
        )
        return Submission(
            spec.launch_id, spec.cluster, spec.job_name, spec.fw.tracking(spec, output)
        )

    async def find(self, launch: Launch) -> list[FoundJob]:
        if self.find_error is not None:
            raise self.find_error
        return list(self.jobs.get(launch.id, []))

    async def cancel(
        self, launch: Launch, job_ids: list[str], *, pending_only: bool = False
    ) -> None:
        if self.cancel_error is not None:
            raise self.cancel_error
        self.cancelled += job_ids
        for jobs in self.jobs.values():
            jobs[:] = [
                FoundJob(j.job_id, j.name, "CANCELLED", False) if j.job_id in job_ids else j
                for j in jobs
            ]


@pytest.fixture
async def clusters() -> AsyncIterator[ScriptedClusters]:
    async with SSHPool() as pool:
        yield ScriptedClusters(pool)


async def queued(store: Store, **request: object) -> Launch:
    fields: dict[str, object] = {
        "workload": "dpo", "model": "llama3p1_8b", "framework": "nemo-rl", "cluster": "a4",
    }  # fmt: skip
    launch = Launch(
        request=TrainRequest(**{**fields, **request}),
        user_id=ALICE.id,
        channel="C1",
        parent_ts="1700000000.000100",  # the notifier posted its thread
    )
    await store.launches.create(launch, [Event("thread", launch.id, "Queued.")])
    return launch


async def thread_texts(store: Store, launch_id: str) -> list[str]:
    entries = await stream_entries(store.redis)
    decoded = [Event.decode(i, f) for i, f in entries]
    mine = [e for e in decoded if e.launch_id == launch_id]
    return [thread.line(e) if e.kind == "thread" else e.text for e in mine]


def test_worker_names_are_unique_per_process_and_instance() -> None:
    names = {worker_name("host-worker-0") for _ in range(50)}
    assert len(names) == 50 and all(n.startswith("host-worker-0-") for n in names)


async def test_a_stalled_worker_that_lost_the_launch_writes_nothing(
    store: Store, clusters: ScriptedClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker A stalls in its launcher before sbatch reached Slurm, past its lock; B takes
    the launch over and finds no job yet. A submit may still be in flight, so B submits
    nothing until it must have ended. A's job then lands, A's write is refused by the
    fence, and B, looking again, adopts it: one job, recorded once."""
    monkeypatch.setattr(recovery, "SUBMIT_TIMEOUT_S", 0.5)
    monkeypatch.setattr(recovery, "SUBMIT_SETTLE_S", 0.2)
    launch = await queued(store)
    slow, fast = Worker(store, clusters, name="a"), Worker(store, clusters, name="b")
    gate, stalled, calls = asyncio.Event(), asyncio.Event(), []

    async def stall(spec: LaunchSpec) -> None:
        calls.append(spec.launch_id)
        if len(calls) == 1:  # A's launcher, before its sbatch reached Slurm
            stalled.set()
            await gate.wait()

    clusters.before_sbatch = stall
    first = asyncio.create_task(slow.process(launch.id))
    await asyncio.wait_for(stalled.wait(), 5)
    await store.leases.release(f"launch:{launch.id}", "a")  # A's lock expired while it stalled
    assert await fast.process(launch.id)  # B: SUBMITTING, and Slurm has no job yet
    assert clusters.submits == [] and len(calls) == 1  # B waits for A's submit to end
    gate.set()
    assert not await first  # A's job landed; its write was refused: it stops
    assert clusters.submits == ["100"]
    await asyncio.sleep(0.8)  # until any submit in flight must have ended
    assert await store.queue.promote_due() == 1
    assert await fast.process(launch.id)
    stored = await store.launches.get(launch.id)
    assert stored is not None and clusters.submits == ["100"]
    assert stored.phase == Phase.SUBMITTED and [a.job_id for a in stored.attempts] == ["100"]
    texts = await thread_texts(store, launch.id)
    assert sum("Slurm job 100" in t for t in texts) == 1, texts


class StallsAfterSubmitting(Hold):
    """A worker's hold that stalls right after it marked the launch SUBMITTING, before its
    last check (as a process paused there would)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stalled, self.gate = asyncio.Event(), asyncio.Event()

    async def mutate(
        self, launch_id: str, change: Callable[[Launch], list[Event]]
    ) -> tuple[Launch, list[Event]]:
        result = await super().mutate(launch_id, change)
        if result[0].phase == Phase.SUBMITTING and not self.stalled.is_set():
            self.stalled.set()
            await self.gate.wait()
        return result


async def test_a_stalled_worker_checks_the_fence_not_a_free_lock_before_sbatch(
    store: Store, clusters: ScriptedClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A marked the launch SUBMITTING and stalled past its lock; B took the launch (raising
    the fence), found no job, and let the lock go while it waits for A's possible submit.
    A wakes to a free lock: taking it again would let it submit beside B's later one; its
    fence is stale, so it submits nothing."""
    monkeypatch.setattr(recovery, "SUBMIT_TIMEOUT_S", 0.5)
    monkeypatch.setattr(recovery, "SUBMIT_SETTLE_S", 0.2)
    launch = await queued(store)
    a = Worker(store, clusters, name="a")
    a.hold = stalls = StallsAfterSubmitting(store, clusters, name="a")
    first = asyncio.create_task(a.process(launch.id))
    await asyncio.wait_for(stalls.stalled.wait(), 5)
    await store.leases.release(f"launch:{launch.id}", "a")  # A's lock expired while it stalled
    b = Worker(store, clusters, name="b")
    assert await b.process(launch.id)
    assert await store.leases.lease_holder(f"launch:{launch.id}") == ""
    stalls.gate.set()
    assert not await first
    assert clusters.submits == []
    await asyncio.sleep(0.8)
    assert await store.queue.promote_due() == 1
    assert await b.process(launch.id)  # nothing in Slurm after any submit must have ended
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.phase == Phase.SUBMITTED
    assert clusters.submits == ["100"] and stored.job_id == "100"


async def test_a_failed_lock_renewal_stops_the_submit_before_sbatch(
    store: Store, clusters: ScriptedClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis refuses the renewal (an error, not "someone else has it"): the worker cannot
    know it still holds the launch, so it stops before sbatch and leaves the entry pending."""
    monkeypatch.setattr(worker, "LOCK_RENEW_S", 0.1)
    launch = await queued(store)
    clusters.preflight_gate = asyncio.Event()
    w = Worker(store, clusters, name="a")
    real_acquire = store.leases.acquire

    async def failing(name: str, owner: str, ttl_ms: int) -> bool:
        if clusters.preflight_started.is_set():
            raise StoreError("Redis: connection reset by peer")
        return await real_acquire(name, owner, ttl_ms)

    monkeypatch.setattr(store.leases, "acquire", failing)
    task = asyncio.create_task(w.process(launch.id))
    await clusters.preflight_started.wait()
    await asyncio.sleep(0.3)  # a renewal or two fail meanwhile
    clusters.preflight_gate.set()
    assert not await asyncio.wait_for(task, 5)  # left pending for a later look
    assert clusters.submits == []


async def test_a_worker_that_died_before_its_submit_reached_slurm_is_not_repeated_in_the_thread(
    store: Store, clusters: ScriptedClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker A passed pre-flight and said so, then died before sbatch reached Slurm. B looks
    the launch up once A's submit must have ended (nothing), runs pre-flight again and
    submits: one job, and "Pre-flight ok" once in the thread."""
    monkeypatch.setattr(recovery, "SUBMIT_TIMEOUT_S", 0.3)
    monkeypatch.setattr(recovery, "SUBMIT_SETTLE_S", 0.1)
    launch = await queued(store)
    dead = asyncio.Event()  # never set: A never comes back

    async def die_before_slurm(spec: LaunchSpec) -> None:
        if len(clusters.submits) == 1:
            clusters.jobs.pop(spec.launch_id)  # the submit never reached Slurm
            await dead.wait()

    clusters.on_submit = die_before_slurm
    first = asyncio.create_task(Worker(store, clusters, name="a").process(launch.id))
    while not clusters.submits:
        await asyncio.sleep(0.05)
    await store.leases.release(f"launch:{launch.id}", "a")  # A's lock expired: it is gone
    b = Worker(store, clusters, name="b")
    assert await b.process(launch.id)
    assert len(clusters.submits) == 1  # not before A's submit must have ended
    await asyncio.sleep(0.5)
    assert await store.queue.promote_due() == 1
    assert await b.process(launch.id)
    first.cancel()
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.phase == Phase.SUBMITTED
    assert [a.job_id for a in stored.attempts] == ["101"]
    texts = await thread_texts(store, launch.id)
    assert sum(t.startswith("Pre-flight ok") for t in texts) == 1, texts
    assert sum("Slurm job 101" in t for t in texts) == 1, texts


async def test_the_lock_is_renewed_while_a_worker_works(
    store: Store, clusters: ScriptedClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker, "LAUNCH_LOCK_MS", 600)
    monkeypatch.setattr(worker, "LOCK_RENEW_S", 0.15)
    launch = await queued(store)

    async def slow(spec: LaunchSpec) -> None:
        await asyncio.sleep(1.5)  # well past the lock's 0.6 s

    clusters.on_submit = slow
    task = asyncio.create_task(Worker(store, clusters, name="a").process(launch.id))
    await asyncio.sleep(1.0)
    assert not await store.leases.acquire(f"launch:{launch.id}", "b", 600)  # still A's
    assert await task
    assert clusters.submits == ["100"]


async def test_backoff_is_a_deferred_entry_not_a_sleep(
    store: Store, clusters: ScriptedClusters
) -> None:
    """Two launches in backoff: the worker is done with each at once, and both come back
    onto the queue when due."""
    launches = [await queued(store) for _ in range(2)]
    for launch in launches:

        def backoff(stored: Launch) -> list[Event]:
            stored.phase = Phase.RETRYING
            stored.attempts += [
                Attempt(number=1, job_id="9"),
                Attempt(number=2, not_before=time.time() + 1.0),
            ]
            return []

        await store.launches.mutate(launch.id, backoff)
    w = Worker(store, clusters, name="a")
    started = time.monotonic()
    for launch in launches:
        assert await w.process(launch.id)
    assert time.monotonic() - started < 0.5 and clusters.submits == []
    assert await store.queue.deferred_count() == 2
    assert await store.queue.promote_due() == 0
    await asyncio.sleep(1.1)
    assert await store.queue.promote_due() == 2 and await store.queue.deferred_count() == 0
    for launch in launches:
        assert await w.process(launch.id)
    assert len(clusters.submits) == 2


async def test_a_submit_that_timed_out_is_looked_up_not_dropped(
    store: Store, clusters: ScriptedClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recovery, "SUBMIT_SETTLE_S", 0.2)
    launch = await queued(store)

    async def timeout(spec: LaunchSpec) -> None:
        raise CommandTimeout("bash -l -s: no answer in 120 s", cluster="a4")

    clusters.on_submit = timeout  # the job did reach Slurm; the answer did not come back
    w = Worker(store, clusters, name="a")
    assert await w.process(launch.id)
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.phase == Phase.SUBMITTING and stored.active
    assert await store.queue.deferred_count() == 1
    # The cluster stays unreachable for a while: keep looking, say so once.
    clusters.on_submit = None
    clusters.find_error = ClusterUnreachable("connection refused", cluster="a4")
    for _ in range(3):
        assert await w.process(launch.id)
        stored = await store.launches.get(launch.id)
        assert stored is not None and stored.phase == Phase.SUBMITTING
    texts = await thread_texts(store, launch.id)
    assert sum("cannot be reached" in t for t in texts) == 1, texts
    assert any("did not finish" in t and "may exist" in t for t in texts)
    clusters.find_error = None  # Slurm answers: the job is there
    assert await w.process(launch.id)
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.phase == Phase.SUBMITTED
    assert clusters.submits == ["100"] and stored.job_id == "100"


async def test_cancel_during_preflight_submits_nothing(
    store: Store, clusters: ScriptedClusters
) -> None:
    launch = await queued(store)
    core = Core(store, clusters, parse_config(CONFIG).command_context(), front=None)
    clusters.preflight_gate = asyncio.Event()
    task = asyncio.create_task(Worker(store, clusters, name="a").process(launch.id))
    await clusters.preflight_started.wait()
    current = await store.launches.get(launch.id)
    assert current is not None
    await core.decisions.cancel(current, ALICE)
    clusters.preflight_gate.set()
    assert await task
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.outcome == "CANCELLED" and clusters.submits == []


async def test_a_cancel_while_the_submit_outcome_is_unknown_cancels_the_job_that_landed(
    store: Store, clusters: ScriptedClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submit timed out (its job did reach Slurm), then the person cancels: the job is
    found by the launch id and cancelled, and the thread says so."""
    monkeypatch.setattr(recovery, "SUBMIT_SETTLE_S", 0.2)
    monkeypatch.setattr(recovery, "SUBMIT_TIMEOUT_S", 0.3)
    launch = await queued(store)
    core = Core(store, clusters, parse_config(CONFIG).command_context(), front=None)

    async def timeout(spec: LaunchSpec) -> None:
        raise CommandTimeout("bash -l -s: no answer in 120 s", cluster="a4")

    clusters.on_submit = timeout
    w = Worker(store, clusters, name="a")
    assert await w.process(launch.id)
    current = await store.launches.get(launch.id)
    assert current is not None and current.phase == Phase.SUBMITTING
    reply = await core.decisions.cancel(current, ALICE)
    assert "Cancelled" in reply.text
    for _ in range(50):  # the worker takes the entries the cancel and the timeout left
        await store.queue.promote_due()
        for entry_id, fields in await store.queue.read("a", block_ms=10):
            await w.handle(entry_id, fields)
        stored = await store.launches.get(launch.id)
        assert stored is not None
        if not stored.submit_started_at:
            break
        await asyncio.sleep(0.1)
    assert stored is not None and stored.outcome == "CANCELLED" and not stored.submit_started_at
    assert clusters.submits == ["100"] and clusters.cancelled == ["100"]
    texts = await thread_texts(store, launch.id)
    assert any("A submission was in flight" in t for t in texts), texts
    assert sum("Slurm job 100 appeared after the launch was cancelled" in t for t in texts) == 1


async def test_a_launcher_that_fails_after_its_sbatch_worked_is_followed_not_refused(
    store: Store, clusters: ScriptedClusters
) -> None:
    launch = await queued(store)

    async def fail_after_sbatch(spec: LaunchSpec) -> None:
        raise SlurmCommandFailed(
            command="bash -l -s", returncode=1, stderr="Traceback ...\nKeyError: 'status'"
        )

    clusters.on_submit = fail_after_sbatch  # the job is in Slurm; the launcher then failed
    assert await Worker(store, clusters, name="a").process(launch.id)
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.phase == Phase.SUBMITTED and stored.job_id == "100"
    texts = await thread_texts(store, launch.id)
    assert not any("Slurm refused" in t for t in texts), texts
    assert any("KeyError" in t for t in texts), texts


async def test_a_launcher_that_failed_with_no_job_in_slurm_is_refused(
    store: Store, clusters: ScriptedClusters
) -> None:
    launch = await queued(store)

    async def refused(spec: LaunchSpec) -> None:
        clusters.jobs.pop(spec.launch_id)  # sbatch itself refused: no job
        raise SlurmCommandFailed(
            command="bash -l -s", returncode=1, stderr="sbatch: error: invalid partition"
        )

    clusters.on_submit = refused
    assert await Worker(store, clusters, name="a").process(launch.id)
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.phase == Phase.REJECTED
    assert stored.outcome == "SUBMIT_FAILED" and not stored.submit_started_at
    texts = await thread_texts(store, launch.id)
    assert any("Slurm refused" in t and "invalid partition" in t for t in texts), texts


async def test_a_worker_that_loses_its_lock_stops_before_submitting(
    store: Store, clusters: ScriptedClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker, "LAUNCH_LOCK_MS", 600)
    monkeypatch.setattr(worker, "LOCK_RENEW_S", 0.1)
    launch = await queued(store)
    clusters.preflight_gate = asyncio.Event()
    a = Worker(store, clusters, name="a")
    task = asyncio.create_task(a.process(launch.id))
    await clusters.preflight_started.wait()
    lock = f"launch:{launch.id}"
    await store.leases.release(lock, "a")  # A stalled past its lock, and B took the launch
    assert await store.leases.acquire(lock, "b", 60_000)
    await asyncio.sleep(0.3)  # A's next renewal finds the lock gone
    clusters.preflight_gate.set()
    assert not await asyncio.wait_for(task, 5)  # A stops cleanly, its entry left pending
    assert clusters.submits == []
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.phase == Phase.PREFLIGHT


async def test_a_worker_whose_lock_was_taken_does_not_submit_even_before_renewing(
    store: Store, clusters: ScriptedClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stalled past its lock; B took the lock but has not raised the fence yet. A's
    renewal has not come round either: the check right before sbatch stops A."""
    monkeypatch.setattr(worker, "LOCK_RENEW_S", 3600.0)
    launch = await queued(store)
    clusters.preflight_gate = asyncio.Event()
    task = asyncio.create_task(Worker(store, clusters, name="a").process(launch.id))
    await clusters.preflight_started.wait()
    lock = f"launch:{launch.id}"
    await store.leases.release(lock, "a")
    assert await store.leases.acquire(lock, "b", 60_000)
    clusters.preflight_gate.set()
    assert not await asyncio.wait_for(task, 5)
    assert clusters.submits == []


async def test_nothing_is_submitted_before_the_launch_has_a_thread(
    store: Store, clusters: ScriptedClusters
) -> None:
    """The /train check could not tell (Slack slow), and the parent is not posted yet:
    the launch waits for its thread; once posted, it goes."""
    launch = await queued(store)

    def no_thread_yet(stored: Launch) -> list[Event]:
        stored.parent_ts = ""
        return []

    await store.launches.mutate(launch.id, no_thread_yet)
    w = Worker(store, clusters, name="a")
    assert await w.process(launch.id)
    assert clusters.submits == [] and await store.queue.deferred_count() == 1

    def posted(stored: Launch) -> list[Event]:
        stored.parent_ts = "1700000000.000200"
        return []

    await store.launches.mutate(launch.id, posted)
    assert await w.process(launch.id)
    assert clusters.submits == ["100"]


async def test_a_channel_that_refuses_the_bot_gets_no_job(
    store: Store, clusters: ScriptedClusters
) -> None:
    """The parent could not be posted (the notifier dead-lettered it as a channel problem
    and told the person by DM): the launch ends with nothing submitted."""
    launch = await queued(store)

    def no_thread(stored: Launch) -> list[Event]:
        stored.parent_ts = ""
        return []

    await store.launches.mutate(launch.id, no_thread)
    await store.marks.mark_bad_channel(launch.id, "not_in_channel")
    assert await Worker(store, clusters, name="a").process(launch.id)
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.phase == Phase.REJECTED
    assert stored.outcome == "NO_THREAD" and "not_in_channel" in ended_with(stored)
    assert clusters.submits == []


async def test_a_job_that_appears_after_cancel_is_cancelled_too(
    store: Store, clusters: ScriptedClusters
) -> None:
    launch = await queued(store)
    core = Core(store, clusters, parse_config(CONFIG).command_context(), front=None)

    async def cancel_meanwhile(spec: LaunchSpec) -> None:
        current = await store.launches.get(launch.id)
        assert current is not None and current.phase == Phase.SUBMITTING
        await core.decisions.cancel(current, ALICE)

    clusters.on_submit = cancel_meanwhile
    assert await Worker(store, clusters, name="a").process(launch.id)
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.outcome == "CANCELLED" and not stored.active
    assert clusters.submits == ["100"] and clusters.cancelled == ["100"]
    texts = await thread_texts(store, launch.id)
    assert any("appeared after the launch was cancelled" in t for t in texts)
    assert any(t == "Cancelled Slurm job 100." for t in texts)


async def test_retry_holds_and_queues_and_a_worker_reverts_it_when_the_old_job_stays(
    store: Store, clusters: ScriptedClusters
) -> None:
    """Retry's one rule: the button holds the launch and queues it, asking no cluster; the
    worker cancels the old job, and when that fails the launch goes back to following it
    and nothing new is submitted."""
    launch = await queued(store)
    core = Core(store, clusters, parse_config(CONFIG).command_context(), front=None)
    w = Worker(store, clusters, name="a")
    assert await w.process(launch.id)
    running = await store.launches.get(launch.id)
    assert running is not None and running.phase == Phase.SUBMITTED
    clusters.cancel_error = ClusterUnreachable("connection refused", cluster="a4")
    reply = await core.decisions.retry(running, ALICE)
    assert not reply.error and "being cancelled" in reply.text, reply.text
    assert clusters.cancelled == []  # the click asked no cluster
    held = await store.launches.get(launch.id)
    assert held is not None and held.phase == Phase.RETRYING and held.attempts[-1].held
    assert await store.queue.length() == 2  # the first launch's entry and the Retry's
    assert await w.process(launch.id)
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.phase == Phase.SUBMITTED and len(stored.attempts) == 1
    texts = await thread_texts(store, launch.id)
    assert any("Job 100 could not be cancelled" in t for t in texts), texts[-1]
    assert clusters.submits == ["100"]
    clusters.cancel_error = None
    assert not (await core.decisions.retry(stored, ALICE)).error
    assert await w.process(launch.id)  # cancels job 100 and looks again a second later
    assert clusters.cancelled == ["100"] and clusters.submits == ["100"]
    assert await w.process(launch.id)  # gone: the new attempt goes
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.job_id == "101" and len(stored.attempts) == 2
    assert clusters.submits == ["100", "101"]


async def test_an_entry_that_keeps_failing_inside_trainbot_goes_to_the_dead_letters(
    store: Store, clusters: ScriptedClusters
) -> None:
    launch = await queued(store)

    clusters.preflight_error = KeyError("a bug")
    w = Worker(store, clusters, name="a")
    for delivery in range(worker.MAX_DELIVERIES):
        if delivery:  # redelivered: claimed back after it sat unacknowledged
            entries = await store.queue.claim_stale("a", min_idle_ms=0)
        else:
            entries = await store.queue.read("a", block_ms=100)
        assert len(entries) == 1
        await w.handle(*entries[0])
    assert await store.queue.dead_letter_count() == 1 and w.dead_letters == 1
    assert await store.queue.length() == 0
    stored = await store.launches.get(
        launch.id
    )  # set aside, to be replayed (tests/bot/e2e/test_outage.py)
    assert stored is not None and stored.active and await store.queue.retrying_count() == 1
    texts = await thread_texts(store, launch.id)
    assert any("failed inside trainbot" in t and "tried again" in t for t in texts), texts


async def test_queue_groups_come_back_after_redis_lost_them(store: Store) -> None:
    await store.redis.delete(keys.QUEUE, keys.OUTBOX)  # as after a restart without its data
    assert not await store.groups_ok()
    assert await store.queue.read("a", block_ms=10) == []
    assert await store.groups_ok()
    await store.queue.requeue("L-1")
    entries = await store.queue.read("a", block_ms=100)
    assert [f["launch"] for _, f in entries] == ["L-1"]


@pytest.mark.parametrize("old_job_gone", [False, True])
async def test_a_held_retry_whose_old_job_outlasts_the_wait_goes_back_to_it(
    store: Store, clusters: ScriptedClusters, old_job_gone: bool
) -> None:
    """A held Retry that a worker takes up only after the wait (the workers were down, say):
    if Slurm shows the old job gone, the new attempt goes; else the launch follows it."""
    launch = await queued(store)
    w = Worker(store, clusters, name="a")
    assert await w.process(launch.id)
    if old_job_gone:
        await clusters.cancel(launch, ["100"])
    late = time.time() - recovery.RETRY_CANCEL_WAIT_S - 1

    def held(stored: Launch) -> list[Event]:  # what Core.retry writes, that long ago
        stored.attempts.append(Attempt(number=2, resume=True, held=True, held_at=late))
        stored.phase = Phase.RETRYING
        return []

    await store.launches.mutate(launch.id, held)
    assert await w.process(launch.id)
    stored = await store.launches.get(launch.id)
    assert stored is not None
    if old_job_gone:
        assert stored.phase == Phase.SUBMITTED and stored.job_id == "101"
        assert clusters.submits == ["100", "101"]
        assert stored.attempts[0].ended_at > 0  # closed: not billed until the launch ends
    else:
        assert stored.phase == Phase.SUBMITTED and stored.job_id == "100"
        assert clusters.submits == ["100"] and len(stored.attempts) == 1
        texts = await thread_texts(store, launch.id)
        assert any("Job 100 could not be cancelled (Slurm still shows it" in t for t in texts)


async def test_a_retry_closes_the_old_attempt(store: Store, clusters: ScriptedClusters) -> None:
    """A 4-node job retried after 1 h whose new job runs 10 h more used 4 x 8 x 11 GPU-hours:
    the Retry ends the old attempt when its job is confirmed gone, so the old one is not
    counted until the launch ends (4 x 8 x 21)."""
    launch = await queued(store, nodes=4)
    core = Core(store, clusters, parse_config(CONFIG).command_context(), front=None)
    assert await Worker(store, clusters, name="a").process(launch.id)

    def ran_an_hour(stored: Launch) -> list[Event]:
        stored.attempts[0].started_at, stored.phase = time.time() - 3600, Phase.RUNNING
        return []

    running, _ = await store.launches.mutate(launch.id, ran_an_hour)
    asked = time.time()
    reply = await core.decisions.retry(running, ALICE)
    assert not reply.error, reply.text
    w = Worker(store, clusters, name="a")
    assert await w.process(launch.id) and await w.process(launch.id)  # cancel; then gone
    stored = await store.launches.get(launch.id)
    assert stored is not None and len(stored.attempts) == 2
    old, new = stored.attempts
    assert asked <= old.ended_at <= time.time() and old.slurm_state == "CANCELLED"
    new.started_at, new.ended_at = old.ended_at, old.ended_at + 10 * 3600
    gpu_hours = used_gpu_hours(stored, clusters.profile("a4"), now=new.ended_at)
    assert gpu_hours == pytest.approx(4 * 8 * 11, rel=1e-3)


async def test_a_cancel_cancels_the_job_a_worker_recorded_after_the_cancel_read_the_launch(
    store: Store, clusters: ScriptedClusters
) -> None:
    """The cancel read the launch while its submit was under way; the worker then recorded
    job 100. The cancel's write comes after: the job it cancels is read from that write."""
    launch = await queued(store)
    core = Core(store, clusters, parse_config(CONFIG).command_context(), front=None)
    read_before = await store.launches.get(launch.id)  # what the cancel looked at
    assert await Worker(store, clusters, name="a").process(launch.id)
    assert read_before is not None and not read_before.job_id
    reply = await core.decisions.cancel(read_before, ALICE)
    assert not reply.error, reply.text
    assert clusters.cancelled == ["100"], reply.text
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.cancelled_by == ALICE.id and stored.cancelled_at


def failed_after_cancel(stored: Launch) -> list[Event]:
    """What the poller writes when the cancelled job ended and its log showed an NCCL
    watchdog timeout (a cause that is retried when nobody cancelled)."""
    watchdog = (
        "[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds"
    )
    found = diagnose(Evidence(job_id=stored.job_id, files=(EvidenceFile("log", watchdog, 1),)))
    assert found is not None and found.key == "nccl_timeout"
    none = LogChunk("", "", 0, -1)
    snap = JobSnapshot(stored.job_id, "CANCELLED", queue=None, acct=None, restart=0, log=none)
    profile = parse_config(CONFIG).clusters["a4"]
    return apply_snapshot(stored, snap, profile, Watch(), now=time.time(), diagnosis=found)


async def test_a_cancelled_job_whose_log_shows_a_retryable_cause_is_not_retried(
    store: Store, clusters: ScriptedClusters
) -> None:
    launch = await queued(store)
    core = Core(store, clusters, parse_config(CONFIG).command_context(), front=None)
    assert await Worker(store, clusters, name="a").process(launch.id)
    running = await store.launches.get(launch.id)
    assert running is not None
    await core.decisions.cancel(running, ALICE)
    stored, _ = await store.launches.mutate(launch.id, failed_after_cancel)
    assert stored.phase == Phase.DONE and stored.outcome == "CANCELLED"
    assert len(stored.attempts) == 1 and await store.queue.deferred_count() == 0
    texts = await thread_texts(store, launch.id)
    assert any("after <@U0ALICE> cancelled it; not retried" in t for t in texts), texts
    assert not any("Retrying" in t for t in texts), texts
    assert (await core.decisions.retry(stored, ALICE)).error


async def test_a_cancel_during_the_retry_backoff_is_final(
    store: Store, clusters: ScriptedClusters
) -> None:
    launch = await queued(store)
    core = Core(store, clusters, parse_config(CONFIG).command_context(), front=None)

    def backoff(stored: Launch) -> list[Event]:
        stored.phase = Phase.RETRYING
        stored.attempts += [
            Attempt(number=1, job_id="9", ended_at=time.time()),
            Attempt(number=2, not_before=time.time() + 0.3),
        ]
        return [Event("enqueue", stored.id, data={"due": stored.attempts[-1].not_before})]

    await store.launches.mutate(launch.id, backoff)
    current = await store.launches.get(launch.id)
    assert current is not None
    reply = await core.decisions.cancel(current, ALICE)
    assert not reply.error and clusters.cancelled == []  # job 9 had already ended
    await asyncio.sleep(0.4)
    await store.queue.promote_due()
    w = Worker(store, clusters, name="a")
    for entry_id, fields in await store.queue.read("a", block_ms=10):
        await w.handle(entry_id, fields)
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.outcome == "CANCELLED" and clusters.submits == []
    assert stored.cancelled_by == ALICE.id


async def test_a_cancel_while_awaiting_approval_is_final(
    store: Store, clusters: ScriptedClusters
) -> None:
    launch = await queued(store)
    core = Core(store, clusters, parse_config(CONFIG).command_context(), front=None)

    def awaiting(stored: Launch) -> list[Event]:
        stored.phase = Phase.AWAITING_APPROVAL
        return []

    await store.launches.mutate(launch.id, awaiting)
    current = await store.launches.get(launch.id)
    assert current is not None
    await core.decisions.cancel(current, ALICE)
    admin = User(id="U0ADMIN", name="admin", groups=frozenset())
    assert (await core.decisions.approve(current, admin, True)).text  # answered, whatever it says
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.outcome == "CANCELLED" and not stored.active
    assert await store.queue.length() == 1  # only the entry of its creation
    assert await Worker(store, clusters, name="a").process(launch.id)
    assert clusters.submits == []


async def test_a_cancel_during_a_deferred_start_is_final(
    store: Store, clusters: ScriptedClusters
) -> None:
    """The launch waits for its thread (a deferred entry); it is cancelled meanwhile, and the
    thread then appears: nothing is ever submitted."""
    launch = await queued(store)
    core = Core(store, clusters, parse_config(CONFIG).command_context(), front=None)

    def no_thread_yet(stored: Launch) -> list[Event]:
        stored.parent_ts = ""
        return []

    await store.launches.mutate(launch.id, no_thread_yet)
    w = Worker(store, clusters, name="a")
    assert await w.process(launch.id)
    assert await store.queue.deferred_count() == 1 and clusters.submits == []
    current = await store.launches.get(launch.id)
    assert current is not None
    assert not (await core.decisions.cancel(current, ALICE)).error

    def posted(stored: Launch) -> list[Event]:
        stored.parent_ts = "1700000000.000200"
        return []

    await store.launches.mutate(launch.id, posted)
    await asyncio.sleep(submit.THREAD_WAIT_S + 0.1)
    assert await store.queue.promote_due() == 1
    for entry_id, fields in await store.queue.read("a", block_ms=10):
        await w.handle(entry_id, fields)
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.outcome == "CANCELLED" and clusters.submits == []
    assert stored.cancelled_by == ALICE.id
