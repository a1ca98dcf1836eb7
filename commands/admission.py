"""One answer to "may this person launch this, and on what terms": :func:`admit`.

/train asks it once, and every later move of a launch (a reroute, a launch that comes
due after ``at=``, ``after=``, a sweep's turn or an approval) asks it again with the
person's groups, the policy and the launch's cluster as they are then. Pure: what the
store knows of the person comes in as a :class:`Standing`, the answer goes out as an
:class:`Admission` whose texts are ready to show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from commands.access import is_custom_image, may_use_image, slurm_account
from commands.budget import budget_for, budget_window, check_budget, iso_week, team_budgets_for
from commands.context import User
from commands.policy import Decision, Policy, decide
from commands.requests import InteractiveRequest, TrainRequest

LaunchRequest = TrainRequest | InteractiveRequest


@dataclass(frozen=True)
class Standing:
    """What the store says of the person when they ask: their active launches, and on the
    launch's cluster this week the GPU-hours charged and held by launches still active
    (``held`` leaves out the launch being checked again), and this launch's estimate
    (None: no basis). ``recheck``: the launch exists already (its max_concurrent place
    and its approval were taken when it was made)."""

    active_launches: int = 0
    charged_gpu_hours: float = 0.0
    held_gpu_hours: float = 0.0
    estimate_gpu_hours: float | None = None
    now: float = 0.0
    recheck: bool = False


@dataclass(frozen=True)
class TeamPot:
    """A team budget the launch must fit: ``team`` (group:S0ML or account:proj) in its
    ``window`` (2026-W49 or 2026-12), at most ``limit`` GPU-hours."""

    team: str
    window: str
    limit: float


@dataclass(frozen=True)
class Admission:
    """The answer of :func:`admit`. ``allowed`` False: ``reason`` says why and ``field``
    names the key at fault ("" for the policy as a whole). A budget that has no room is
    not a refusal here but ``budget`` (a dry run says it and goes on)."""

    allowed: bool
    reason: str
    field: str = ""
    needs_approval: bool = False
    max_concurrent: int | None = None  # the limit the store holds the create to, atomically
    limit: int | None = None  # what the create holds to: max_concurrent, or dry runs at once
    account: str = ""  # policy.accounts: the person's Slurm account there ("": the cluster's)
    image_secrets: bool = True  # a custom image gets the job secrets only when policy says so
    budget: Decision | None = None  # None: no budget rule covers the person there
    budget_total: float = 0.0
    week: str = ""
    teams: tuple[TeamPot, ...] = ()

    @property
    def over_budget(self) -> bool:
        """Whether the person's own budget has no room for the launch."""
        return self.budget is not None and not self.budget.allowed


def _refused(reason: str, key: str = "") -> Admission:
    return Admission(allowed=False, reason=reason, field=key)


def admit(
    policy: Policy,
    request: LaunchRequest,
    user: User,
    *,
    images: Mapping[str, str],
    standing: Standing,
) -> Admission:
    """Whether ``user`` may launch ``request`` (its cluster named), with ``images`` the
    cluster's own (name to path) and ``standing`` what the store knows of them: the
    policy's rule (nodes, max_concurrent, approval), ``over_budget=``, a custom image,
    the Slurm account, the person's weekly budget and the team budgets it counts in."""
    active = 0 if standing.recheck else standing.active_launches
    decision = decide(
        policy, request, user_id=user.id, group_ids=user.groups, active_launches=active
    )
    if not decision.allowed:
        return _refused(decision.reason)
    admin = policy.is_admin(user.id, user.groups)
    if request.over_budget and not admin:
        return _refused(
            "over_budget=true is for trainbot admins only; leave it out (your launch is "
            "then checked against your weekly GPU-hour budget) or ask an admin.",
            "over_budget",
        )
    cluster = request.cluster
    image_secrets = True
    if is_custom_image(request.image, {*images, *images.values()}):
        allowed, image_secrets = may_use_image(
            policy,
            user_id=user.id,
            group_ids=user.groups,
            cluster=cluster,
            image=str(request.image),
            cluster_images=list(images),
        )
        if not allowed.allowed:
            return _refused(allowed.reason, "image")
    account = slurm_account(policy, user_id=user.id, group_ids=user.groups, cluster=cluster)
    total = budget_for(policy, user.id, user.groups, cluster)
    budget = None
    if total is not None:
        budget = check_budget(
            budget=total,
            charged=standing.charged_gpu_hours,
            active=standing.held_gpu_hours,
            estimate=standing.estimate_gpu_hours,
            cluster=cluster,
            override=request.over_budget,
        )
    teams: tuple[TeamPot, ...] = ()
    if not (request.dry_run or request.over_budget):
        teams = tuple(
            TeamPot(rule.team, budget_window(rule.window, standing.now), rule.gpu_hours)
            for rule in team_budgets_for(policy, user.groups, account or "", cluster)
        )
    needs_approval = decision.needs_approval and not standing.recheck
    limit = policy.limits.dry_runs_at_once if request.dry_run else decision.max_concurrent
    return Admission(
        allowed=True,
        reason=decision.reason,
        needs_approval=needs_approval,
        max_concurrent=decision.max_concurrent,
        limit=limit,
        account=account or "",
        image_secrets=image_secrets,
        budget=budget,
        budget_total=total or 0.0,
        week=iso_week(standing.now) if total is not None else "",
        teams=teams,
    )
