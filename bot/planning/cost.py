"""Before a launch: when Slurm expects it to start, about how many GPU-hours it will
use, and what is left of the person's weekly budget.

The GPU-hour estimate is the launch's steps times the median step time of earlier
runs of the same recipe at the same size on that cluster (trainbot's own record,
:meth:`bot.store.history.History.step_runs`), capped by the time limit; with no earlier run,
the time limit itself. The start estimate is Slurm's own (``sbatch --test-only``),
asked in one round trip with a short timeout so the answer to /train is not held up.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.gateway.asks import ClusterCalls
from bot.lifecycle import measures
from bot.lifecycle.launch import StepRun
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import slurm_time_seconds
from cluster.slurm.sbatch import JobShape, StartEstimate
from commands.budget import check_budget
from commands.policy import Decision
from commands.requests import InteractiveRequest, TrainRequest

START_ESTIMATE_TIMEOUT_S = 1.5  # the answer to /train waits at most this for Slurm
START_ESTIMATE_TTL_S = 10.0  # one shape's estimate serves the /train answers this long
START_ESTIMATE_STALE_S = 30.0  # then, while it is asked again, /train says the last one
NOW_TOLERANCE_S = 2.0  # Slurm's start time has whole seconds, read after the clock was
STEP_KEYS = ("max_steps", "max_num_steps")  # overrides that say how many steps a run takes


@dataclass(frozen=True)
class CostEstimate:
    """About how many GPU-hours a launch will use (None: no basis), and on what basis."""

    gpu_hours: float | None
    basis: str


def requested_steps(request: TrainRequest) -> int | None:
    """The steps a ``...max_steps=N`` or ``...max_num_steps=N`` override asks for."""
    for key, value in request.overrides:
        if key.rsplit(".", 1)[-1] in STEP_KEYS and value.isdigit():
            return int(value)
    return None


def estimate_cost(
    request: TrainRequest | InteractiveRequest,
    profile: ClusterProfile,
    runs: Sequence[StepRun],
) -> CostEstimate:
    """GPU-hours for ``request`` from earlier ``runs`` (newest first), else its time limit."""
    gpus = request.nodes * profile.gpus_per_node
    size = f"{request.nodes} node{'s' if request.nodes != 1 else ''} × {profile.name}"
    limit = request.time or profile.time_limit
    limit_h = slurm_time_seconds(limit) / 3600 if limit else None
    steps = requested_steps(request) if isinstance(request, TrainRequest) else None
    timed = [run for run in runs if run.step_time_s > 0]
    if isinstance(request, TrainRequest) and timed:
        steps = steps or next((run.steps for run in timed if run.steps), None)
    if isinstance(request, TrainRequest) and timed and steps:
        step_s = statistics.median(run.step_time_s for run in timed)
        hours = steps * step_s / 3600
        earlier = "run" if len(timed) == 1 else f"{len(timed)} runs"
        basis = (
            f"{steps:,} steps × {step_s:.3g} s/step, the median of the last {earlier} of "
            f"{request.workload} {request.model} on {size}"
        )
        if limit_h is not None and hours > limit_h:
            hours = limit_h
            basis += f", capped by the {measures.duration(limit_h * 3600)} time limit"
        return CostEstimate(hours * gpus, basis)
    if limit_h is not None:
        why = (
            "an interactive allocation"
            if isinstance(request, InteractiveRequest)
            else f"no earlier run of {request.workload} {request.model} on {size} to go by"
        )
        return CostEstimate(
            limit_h * gpus,
            f"at most: the whole {measures.duration(limit_h * 3600)} time limit; {why}",
        )
    return CostEstimate(None, "no time limit and no earlier run to go by")


def wait_words(estimate: StartEstimate) -> str:
    """``now``, ``in about 25 min``, or ``n/a`` when Slurm cannot place such a job."""
    wait = estimate.wait_s
    if estimate.start is None:
        return "n/a"
    if wait is None:
        return "at " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(estimate.start))
    if wait <= NOW_TOLERANCE_S:
        return "now"
    return f"in about {measures.duration(wait)}"


def start_text(estimate: StartEstimate | None, problem: str = "") -> str:
    """The expected-start sentence: Slurm's estimate, honestly worded."""
    if estimate is None:
        return f"Expected start: start estimate unavailable ({problem})."
    if estimate.start is None:
        return f"Expected start: Slurm cannot place it now ({estimate.error})."
    where = f" on {estimate.nodes}" if estimate.nodes else ""
    words = wait_words(estimate)
    if words == "now":
        return f"Expected start: now{where}, if submitted now (Slurm's estimate)."
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(estimate.start))
    return f"Expected start: {words} (at {at}){where}, Slurm's estimate."


@dataclass(frozen=True)
class Appraisal:
    """What the answer to /train says before the launch, and whether the budget lets it go."""

    start: str
    cost: CostEstimate
    budget: Decision | None = None  # None: no budget rule covers the person there
    left_after: float | None = None  # GPU-hours left this week once this launch is counted
    budget_total: float = 0.0
    week: str = ""
    cluster: str = ""

    def refusal(self, charged: float, held: float) -> str:
        """Why the launch does not fit the budget after all, with ``charged`` and ``held``
        as the store found them when it wrote (another launch may have come first)."""
        return check_budget(
            budget=self.budget_total,
            charged=charged,
            active=held,
            estimate=self.cost.gpu_hours,
            cluster=self.cluster,
            override=False,
        ).reason

    def lines(self) -> list[str]:
        cost = self.cost
        used = (
            f"Estimated use: about {cost.gpu_hours:,.1f} GPU-hours ({cost.basis})."
            if cost.gpu_hours is not None
            else f"Estimated use: unknown ({cost.basis})."
        )
        lines = [self.start, used]
        if self.budget is not None and self.left_after is not None:
            lines.append(
                f"Budget on {self.cluster}: {max(self.left_after, 0):,.1f} of "
                f"{self.budget_total:,.1f} GPU-hours left this week ({self.week}) "
                "with this launch counted."
            )
            if self.budget.allowed and self.left_after < 0:
                lines.append(self.budget.reason)  # an admin's over_budget=true
        return lines


class StartEstimates:
    """Slurm's start estimate per job shape and Unix user, asked once and shared for
    ``ttl_s``: a burst of /train of one shape costs one ``sbatch --test-only``, and every
    answer in it says the same. An estimate that failed is asked again next time.

    With ``stale_s``, once ``ttl_s`` has passed the next call asks again but nobody
    waits for it: until the new answer comes, calls get the last estimate that came
    (if it was asked less than ``stale_s`` ago). So only the first /train of a shape
    waits for Slurm (through a worker, for the web role); the others are answered at
    once instead of every /train in a refresh's round trip waiting for it."""

    def __init__(self, ttl_s: float = START_ESTIMATE_TTL_S, stale_s: float = 0.0) -> None:
        self.ttl_s = ttl_s
        self.stale_s = stale_s
        self._asked: dict[tuple[object, ...], tuple[float, asyncio.Task[StartEstimate]]] = {}
        self._last: dict[tuple[object, ...], tuple[float, StartEstimate]] = {}

    def ask(
        self,
        calls: ClusterCalls,
        cluster: str,
        shape: JobShape,
        *,
        user_id: str,
        cluster_user: str,
        timeout_s: float,
        groups: frozenset[str] = frozenset(),
    ) -> asyncio.Future[StartEstimate]:
        """The estimate for ``shape`` on ``cluster``, asked as ``cluster_user`` where
        ``calls`` logs in as people (else as the shared account, for everyone)."""
        now = time.monotonic()
        self._asked = {k: v for k, v in self._asked.items() if now - v[0] < self.ttl_s}
        as_user = cluster_user if calls.acts_as_people else ""
        key = (cluster, as_user, shape)
        found = self._asked.get(key)
        if found is not None:
            task = found[1]
            if not task.done() or (not task.cancelled() and task.exception() is None):
                return task if task.done() else self._last_or(key, task, now)
        task = asyncio.create_task(
            calls.start_estimate(
                cluster,
                shape,
                user_id=user_id,
                cluster_user=as_user,
                timeout_s=timeout_s,
                groups=groups,
            )  # fmt: skip
        )
        task.add_done_callback(lambda done: self._keep(key, now, done))
        self._asked[key] = (now, task)
        return self._last_or(key, task, now)

    def _keep(self, key: tuple[object, ...], asked_at: float, task: asyncio.Task[Any]) -> None:
        if self.stale_s > 0 and not task.cancelled() and task.exception() is None:
            if asked_at >= self._last.get(key, (0.0, None))[0]:
                self._last[key] = (asked_at, task.result())

    def _last_or(
        self, key: tuple[object, ...], task: asyncio.Task[StartEstimate], now: float
    ) -> asyncio.Future[StartEstimate]:
        """The last estimate of ``key`` as an answered future while ``task`` asks anew,
        when it is recent enough; else ``task`` itself (to be waited for)."""
        self._last = {k: v for k, v in self._last.items() if now - v[0] < self.stale_s}
        last = self._last.get(key)
        if last is None:
            return task
        answered: asyncio.Future[StartEstimate] = asyncio.get_running_loop().create_future()
        answered.set_result(last[1])
        return answered


def estimate_shape(
    request: TrainRequest | InteractiveRequest, profile: ClusterProfile, account: str | None
) -> JobShape:
    """The shape the start estimate asks about: the one the launch will submit (the
    person's Slurm ``account`` from ``policy.accounts``, else the cluster's)."""
    return profile.job_shape(
        request.nodes, partition=request.partition, time_limit=request.time, account=account
    )
