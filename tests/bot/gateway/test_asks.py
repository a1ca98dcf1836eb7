"""Cluster work asked of the workers (bot.gateway.asks): what the web role's core gets back is
what a worker's own call gave, errors keep their kind, and an ask no worker takes fails
in its time saying so. Real Redis; the cluster side is scripted at trainbot's own seam
(``Clusters``)."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError

from bot.gateway.answering import Refused, error_answer, serve_asks
from bot.gateway.asks import WorkerAsks, error_of
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.launch import Attempt, Launch
from bot.settings.config import parse_config
from bot.settings.env import Settings
from bot.store.store import Store
from cluster.errors import ClusterError, ClusterUnreachable, CommandTimeout, SlurmCommandFailed
from cluster.preflight.discovery import ClusterCapacity
from cluster.site.accounts import Account
from cluster.site.nodes import NodeAction
from cluster.slurm.sbatch import JobShape, StartEstimate
from cluster.slurm.sinfo import PartitionInfo
from cluster.ssh.pool import SSHPool
from cluster.watching.tracking import Tracking
from commands.requests import TrainRequest
from support.workspace import ASK_KEY

KEY = ASK_KEY.encode()

CONFIG = """
clusters:
  a4:
    type: hcc-a4
    login: {host: 127.0.0.1, port: 2222, user: trainer}
    partition: a4
    max_nodes: 4
policy:
  rules: [{users: ["*"], clusters: ["*"], max_nodes: 4}]
"""
LOG = "~/vertex-oss-training/nemo/logs/log-x_42_0.out"
CAPACITY = ClusterCapacity(
    "a4",
    (PartitionInfo("a4", True, True, 4, 4, 32, 8, 8),),
    (("a4", 1, 2),),
    (("a4", 2, StartEstimate(1_800_000_000.0, "dev[0-1]", "a4", "", 1_799_999_000.0)),),
)


class ScriptedClusters(Clusters):
    """The cluster calls as the test scripts them; what each was asked is kept."""

    def __init__(self, pool: SSHPool) -> None:
        super().__init__(parse_config(CONFIG), Settings.from_environ({}), pool)
        self.asked: list[tuple[object, ...]] = []
        self.error: Exception | None = None

    async def capacity(self, cluster: str) -> ClusterCapacity:
        self.asked.append(("capacity", cluster))
        if self.error is not None:
            raise self.error
        return CAPACITY

    async def tail(self, launch: Launch, path: str, lines: int) -> str:
        self.asked.append(("tail", launch.id, path, lines))
        return "step 1\nstep 2"

    async def cancel(
        self, launch: Launch, job_ids: list[str], *, pending_only: bool = False
    ) -> None:
        self.asked.append(("cancel", launch.id, tuple(job_ids)))

    async def account(self, cluster: str, name: str) -> Account:
        self.asked.append(("account", cluster, name))
        return Account(name, 1500)

    async def start_estimate(
        self,
        cluster: str,
        shape: JobShape,
        *,
        user_id: str,
        cluster_user: str,
        timeout_s: float,
        groups: frozenset[str] = frozenset(),
    ) -> StartEstimate:
        self.asked.append(("estimate", cluster, shape, user_id, cluster_user))
        return StartEstimate(None, error="Requested node configuration is not available")


async def test_each_call_answers_what_the_workers_own_call_gave(store: Store) -> None:
    async with SSHPool() as pool:
        clusters = ScriptedClusters(pool)
        stop = asyncio.Event()
        worker = asyncio.create_task(serve_asks(store, clusters, stop, KEY))
        try:
            asks = WorkerAsks(store, KEY)
            launch = Launch(
                request=TrainRequest(
                    workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4"
                ),
                user_id="U0ALICE",
                channel="C1",
                cancelled_by="U0ALICE",
                attempts=[Attempt(number=1, job_id="42", tracking=Tracking(
                    framework="nemo", job_id="42", log_path=LOG
                ))],
            )  # fmt: skip
            await store.launches.create(launch, [], enqueue=False)
            assert await asks.capacity("a4") == CAPACITY
            # the path and job ids given here are not sent: the worker reads the record's
            assert await asks.tail(launch, "~/x.log", 7) == "step 1\nstep 2"
            await asks.cancel(launch, ["77"])
            assert await asks.account("a4", "alice") == Account("alice", 1500)
            shape = JobShape(nodes=2, partition="a4", time_limit="01:00:00")
            estimate = await asks.start_estimate(
                "a4", shape, user_id="U0ALICE", cluster_user="alice", timeout_s=5
            )
            assert estimate.start is None and "not available" in estimate.error
            clusters.error = ClusterUnreachable("connection refused", cluster="a4")
            with pytest.raises(ClusterUnreachable) as caught:
                await asks.capacity("a4")
            assert str(caught.value) == "a4: connection refused"
        finally:
            stop.set()
            await worker
    assert clusters.asked == [
        ("capacity", "a4"),
        ("tail", launch.id, LOG, 7),
        ("cancel", launch.id, ("42",)),
        ("account", "a4", "alice"),
        ("estimate", "a4", shape, "U0ALICE", ""),  # as whom is the config's word
        ("capacity", "a4"),
    ]


async def test_an_ask_no_worker_takes_fails_in_its_time_saying_so(store: Store) -> None:
    asks = WorkerAsks(store, KEY)
    shape = JobShape(nodes=1, partition="a4")
    started = asyncio.get_running_loop().time()
    with pytest.raises(CommandTimeout) as caught:
        await asks.start_estimate("a4", shape, user_id="U0", cluster_user="", timeout_s=0.3)
    assert asyncio.get_running_loop().time() - started < 2.0
    assert str(caught.value) == "a4: no worker answered within 0.3 s (is a worker running?)"
    async with SSHPool() as pool:  # a worker that starts later drops the ask: its time is up
        clusters = ScriptedClusters(pool)
        stop = asyncio.Event()
        worker = asyncio.create_task(serve_asks(store, clusters, stop, KEY))
        await asyncio.sleep(1.5)
        stop.set()
        await worker
    assert clusters.asked == []


class NodeClusters(ScriptedClusters):
    async def update_node(
        self,
        cluster: str,
        node: str,
        action: NodeAction,
        reason: str = "",
        *,
        user_id: str,
        cluster_user: str,
        groups: frozenset[str] = frozenset(),
    ) -> str:
        self.asked.append(("node", cluster, node, action, reason, user_id, cluster_user))
        return "drained"


async def test_a_node_ask_is_done_only_for_on_call_and_as_the_config_says(store: Store) -> None:
    """The worker asks again whether the person may drain (the on-call group the ask names),
    and runs it as the config's user for them, whatever the ask says of a Unix user."""
    config = CONFIG + "alerts: {oncall_usergroup: S0ONCALL}\n"
    async with SSHPool() as pool:
        clusters = NodeClusters(pool)
        clusters.config = parse_config(config)
        stop = asyncio.Event()
        worker = asyncio.create_task(serve_asks(store, clusters, stop, KEY))
        try:
            asks = WorkerAsks(store, KEY)
            done = await asks.update_node(
                "a4", "dev3", "drain", "Xid 79 twice", user_id="U0BOB", cluster_user="root",
                groups=frozenset({"S0ONCALL"}),
            )  # fmt: skip
            assert done == "drained"
            with pytest.raises(ClusterError, match="U0ALICE is neither on-call nor an admin"):
                await asks.update_node(
                    "a4", "dev3", "resume", user_id="U0ALICE", cluster_user="trainer"
                )
            with pytest.raises(ValidationError):  # never leaves the web role
                await asks.update_node(
                    "a4", "dev3;id", "drain", "x", user_id="U0BOB", cluster_user="",
                    groups=frozenset({"S0ONCALL"}),
                )  # fmt: skip
        finally:
            stop.set()
            await worker
    assert clusters.asked == [("node", "a4", "dev3", "drain", "Xid 79 twice", "U0BOB", "")]


@pytest.mark.parametrize(
    "error",
    [
        SlurmCommandFailed(
            command="sbatch --test-only", returncode=1, stderr="x\nbad", cluster="a4"
        ),
        CommandTimeout("no answer within 1.5 s", cluster="a4"),
        ClusterUnreachable("the login node did not answer", cluster="a3m"),
        ClusterError("something else", cluster="a4"),
    ],
)
def test_a_workers_error_reaches_the_asker_as_the_same_error(error: ClusterError) -> None:
    """What a worker answers for a cluster error is raised on the asker's side as the
    same kind with the same words (a failed Slurm command used to become a TypeError)."""
    answer = json.loads(json.dumps(error_answer(error)))  # as it crosses Redis
    again = error_of(answer)
    assert type(again) is type(error)
    assert str(again) == str(error) and again.cluster == error.cluster


def test_a_refusal_reaches_the_asker_as_a_cluster_error() -> None:
    again = error_of(json.loads(json.dumps(error_answer(Refused("not the launch's log")))))
    assert type(again) is ClusterError and "not the launch's log" in str(again)
