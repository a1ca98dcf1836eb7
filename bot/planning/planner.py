"""One :class:`Planner` per process part: what planning a launch needs, gathered once.

A /train, a sweep and the poller's reroute all ask the same two questions: where
``cluster=auto`` puts a launch (:meth:`Planner.place`: each cluster that could take it
asked when Slurm would start it, ``sbatch --test-only``, all at once, nothing submitted,
and the first picked by :func:`commands.placement.choose`, ties going to the config's
order) and what it would cost and when it would start (:meth:`Planner.appraise`: Slurm's
start estimate, the GPU-hour estimate of :mod:`bot.planning.cost`, the budget check). Both
need the same things (the store, the clusters, who asks them, the policy, Slurm's shared
start estimates, who runs as whom, how long to wait): the planner holds those, built once
by its owner (the launcher of the web role, the poller), so each question names only the
launch and the person.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from bot.gateway.asks import ClusterCalls
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.launch import recipe_key
from bot.planning.cost import (
    START_ESTIMATE_TIMEOUT_S,
    Appraisal,
    CostEstimate,
    StartEstimates,
    estimate_cost,
    estimate_shape,
    start_text,
)
from bot.store.store import Store
from cluster.errors import ClusterError, CommandTimeout
from commands.access import slurm_account
from commands.budget import budget_for, check_budget, iso_week
from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.placement import NOW_TOLERANCE_S, Answer, choose
from commands.requests import InteractiveRequest, TrainRequest
from commands.train import auto_fits

Request = TrainRequest | InteractiveRequest
ClusterUser = Callable[[str, User], Awaitable[str]]  # (cluster, person) -> their Unix user there

PLACE_TIMEOUT_S = 10.0  # cluster=auto: each cluster's answer is waited for at most this long


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
        """Start estimate (one SSH round trip by ``calls``, as the person's Unix user,
        ``cluster_user``, where it logs in as people; at most ``timeout_s``; shared by the
        same shape for a few seconds), GPU-hour estimate and budget check for ``request``
        by ``user``. ``known``: the GPU-hour estimate and the GPU-hours charged and held
        this week, already read from the store (not read again)."""
        profile = self.clusters.profile(request.cluster)
        task = self.estimates.ask(
            self.calls,
            request.cluster,
            estimate_shape(request, profile, account),
            user_id=user.id,
            cluster_user=cluster_user,
            timeout_s=self.timeout_s,
            groups=user.groups,
        )
        asking = asyncio.ensure_future(asyncio.shield(task))  # one asker leaving stops no one
        try:
            cost, used = known[0] if known else None, known[1:] if known else None
            if cost is None:
                key = recipe_key(request)
                history = self.store.history
                runs = await history.step_runs(request.cluster, key, request.nodes) if key else []
                cost = estimate_cost(request, profile, runs)
            budget = budget_for(self.context.policy, user.id, user.groups, request.cluster)
            decision, left, week = None, None, ""
            if budget is not None:
                week = iso_week(time.time())
                if used is None:
                    used = await self.store.budgets.budget_use(user.id, request.cluster, week)
                charged, active = used
                decision = check_budget(
                    budget=budget,
                    charged=charged,
                    active=active,
                    estimate=cost.gpu_hours,
                    cluster=request.cluster,
                    override=request.over_budget,
                )
                left = budget - charged - active - (cost.gpu_hours or 0.0)
        except BaseException:
            asking.cancel()
            raise
        try:
            start = start_text(await asking)
        except CommandTimeout:
            start = start_text(None, f"Slurm did not answer within {self.timeout_s:g} s")
        except ClusterError as exc:
            start = start_text(None, str(exc))
        return Appraisal(
            start=start,
            cost=cost,
            budget=decision,
            left_after=left,
            budget_total=budget or 0.0,
            week=week,
            cluster=request.cluster,
        )

    async def place(
        self,
        request: Request,
        user: User,
        *,
        only: Collection[str] | None = None,
        left_out: str = "",
        timeout_s: float | None = None,
    ) -> tuple[str, str, bool]:
        """The cluster ``cluster=auto`` picks for ``request``, why ("a3u: now; a4: in
        2 h 10 min") and whether Slurm would start it there now; CommandError saying why
        none. ``only``: the clusters it may pick from, ``left_out`` saying why the others
        are not (``from=`` needs its parent's; a reroute, another). Each cluster's answer
        is waited for ``timeout_s`` at most (the longer of the planner's and
        :data:`PLACE_TIMEOUT_S` when not given)."""
        wait_s = max(self.timeout_s, PLACE_TIMEOUT_S) if timeout_s is None else timeout_s
        found = auto_fits(self.context, user, nodes=request.nodes, image=request.image)
        names = [f.cluster for f in found if not f.why and (only is None or f.cluster in only)]
        if not names:
            why = "; ".join(f"{f.cluster}: {f.why or left_out}" for f in found)
            raise CommandError(
                f"cluster=auto: no cluster can take this launch ({why}). Give cluster=<name>.",
                field="cluster",
            )
        answers = await asyncio.gather(*(self.ask(request, user, n, wait_s) for n in names))
        chosen = choose(answers)
        if chosen is None:
            why = "; ".join(f"{a.cluster}: {a.problem}" for a in answers)
            raise CommandError(
                f"cluster=auto: Slurm can place this launch on none of the clusters you may "
                f"use ({why}). Give cluster=<name> to queue it on one anyway.",
                field="cluster",
            )
        name, why = chosen
        best = next(a for a in answers if a.cluster == name)
        return name, why, best.wait_s is not None and best.wait_s <= NOW_TOLERANCE_S

    async def ask(self, request: Request, user: User, name: str, timeout_s: float) -> Answer:
        """When Slurm would start ``request`` on cluster ``name`` (as the person's Unix
        user there, with their Slurm account), or why it cannot say."""
        try:
            unix_user = await self.cluster_user(name, user)
        except CommandError as exc:
            return Answer(name, None, str(exc).rstrip("."))
        profile = self.clusters.profile(name)
        policy = self.context.policy
        account = slurm_account(policy, user_id=user.id, group_ids=user.groups, cluster=name)
        task = self.estimates.ask(
            self.calls,
            name,
            estimate_shape(request, profile, account),
            user_id=user.id,
            cluster_user=unix_user,
            timeout_s=timeout_s,
            groups=user.groups,
        )
        try:
            estimate = await asyncio.shield(task)
        except CommandTimeout:
            return Answer(name, None, f"no answer within {timeout_s:g} s")
        except ClusterError as exc:
            return Answer(name, None, str(exc)[:200])
        if estimate.start is None:
            return Answer(name, None, estimate.error or "Slurm cannot place it")
        wait = estimate.wait_s
        return Answer(name, wait if wait is not None else max(0.0, estimate.start - time.time()))
