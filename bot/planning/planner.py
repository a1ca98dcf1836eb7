"""One :class:`Planner` per process part: what planning a launch needs, gathered once.

A /train, a sweep and the poller's reroute all ask the same two questions, where
``cluster=auto`` puts a launch (:func:`bot.planning.placement.place`) and what it would
cost and when it would start (:func:`bot.planning.cost.appraise`), and both need the same
seven things (the store, the clusters, who asks them, the policy, Slurm's shared start
estimates, who runs as whom, how long to wait). The planner holds those, built once by
its owner (the launcher of the web role, the poller), so each question names only the
launch and the person.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from bot.gateway.asks import ClusterCalls
from bot.gateway.on_cluster import Clusters
from bot.planning import cost, placement
from bot.planning.cost import START_ESTIMATE_TIMEOUT_S, Appraisal, CostEstimate, StartEstimates
from bot.planning.placement import PLACE_TIMEOUT_S, ClusterUser
from bot.store.store import Store
from commands.context import CommandContext, User
from commands.requests import InteractiveRequest, TrainRequest

Request = TrainRequest | InteractiveRequest


@dataclass
class Planner:
    """Where a launch goes and what it costs, for one process: ``calls`` asks the clusters
    (the clusters themselves, or a worker for a process without SSH keys); ``estimates``
    shares Slurm's start estimates among the askers; ``cluster_user`` says a person's Unix
    user on a cluster; ``timeout_s`` bounds a start estimate."""

    store: Store
    clusters: Clusters
    calls: ClusterCalls
    context: CommandContext
    estimates: StartEstimates
    cluster_user: ClusterUser
    timeout_s: float = START_ESTIMATE_TIMEOUT_S

    async def appraise(
        self,
        request: Request,
        user: User,
        *,
        account: str | None,
        cluster_user: str = "",
        known: tuple[CostEstimate, float, float] | None = None,
    ) -> Appraisal:
        """Start estimate, GPU-hour estimate and budget check (:func:`cost.appraise`)."""
        return await cost.appraise(
            self.store, self.clusters, self.calls, self.context.policy, request, user,
            account=account, estimates=self.estimates, cluster_user=cluster_user,
            timeout_s=self.timeout_s, known=known,
        )  # fmt: skip

    async def place(
        self,
        request: Request,
        user: User,
        *,
        only: Collection[str] | None = None,
        left_out: str = "",
        timeout_s: float | None = None,
    ) -> tuple[str, str, bool]:
        """The cluster ``cluster=auto`` picks, why, and whether it would start now
        (:func:`placement.place`); each cluster's answer waited for ``timeout_s`` at most
        (the longer of the planner's and :data:`PLACE_TIMEOUT_S` when not given)."""
        return await placement.place(
            self.clusters, self.calls, self.context, self.estimates, request, user,
            self.cluster_user, only=only, left_out=left_out,
            timeout_s=max(self.timeout_s, PLACE_TIMEOUT_S) if timeout_s is None else timeout_s,
        )  # fmt: skip
