"""Who may launch what: the policy model and the pure decision over it.

Rules are tried in order; the first whose people (Slack user ids, user group
ids, or ``*``) and clusters both match decides. No matching rule means denied.
Admins pass every rule (the cluster's own ``max_nodes`` still applies, at
parsing) and never need approval. ``max_concurrent`` counts the asking user's
active launches. Launches with more nodes than ``approval_above_nodes`` (of the
rule, else of the policy) wait for a second person's approval: an admin or one
of ``approvers`` (:mod:`commands.rules` holds the rules for approvers, log viewers,
custom images, ``from=`` and on-call; :mod:`commands.access` decides over them).
``workspaces`` lists the Slack team ids served (empty: any).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from commands.placement import Placement
from commands.requests import InteractiveRequest, Request, TrainRequest
from commands.rules import (
    ANY,
    AccountRule,
    ApproverRule,
    ClusterPattern,
    ImageRule,
    PrincipalId,
    StartFromRule,
    TeamId,
    ViewerRule,
)


class Principals(BaseModel):
    """Slack user ids (``U...``) and user group ids (``S...``); ``*`` means everyone."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    users: tuple[PrincipalId, ...] = ()
    """Slack user ids (`U...`); in a rule, `"*"` is everyone."""
    groups: tuple[PrincipalId, ...] = ()
    """Slack user group ids (`S...`) whose members count."""

    def includes(self, user_id: str, group_ids: Collection[str]) -> bool:
        return (
            ANY in self.users
            or user_id in self.users
            or ANY in self.groups
            or any(group in self.groups for group in group_ids)
        )


class PolicyRule(Principals):
    """Who (``users``/``groups``) may launch where (``clusters``), and how much."""

    clusters: tuple[ClusterPattern, ...] = (ANY,)
    """Cluster names it covers, or `"*"`."""
    max_nodes: int | None = Field(default=None, ge=1)
    """The most nodes per launch; null: the cluster's `max_nodes`."""
    max_concurrent: int | None = Field(default=None, ge=1)
    """The most active launches per person; null: no limit."""
    approval_above_nodes: int | None = Field(default=None, ge=0)
    """Launches with more nodes than this need a second person's approval; overrides the policy-wide
    value."""

    def covers(self, user_id: str, group_ids: Collection[str], cluster: str) -> bool:
        in_cluster = ANY in self.clusters or cluster in self.clusters
        return in_cluster and self.includes(user_id, group_ids)


class BudgetRule(Principals):
    """Who (``users``/``groups``) gets how many GPU-hours a week, each, where
    (``clusters``); see :mod:`commands.budget`."""

    clusters: tuple[ClusterPattern, ...] = (ANY,)
    """Cluster names it covers, or `"*"`."""
    gpu_hours_per_week: float = Field(ge=0)
    """GPU-hours each person covered may use per ISO week (Monday 00:00 UTC on) on each cluster
    covered."""

    def covers(self, user_id: str, group_ids: Collection[str], cluster: str) -> bool:
        in_cluster = ANY in self.clusters or cluster in self.clusters
        return in_cluster and self.includes(user_id, group_ids)


class TeamBudgetRule(BaseModel):
    """A shared GPU-hour pot of a Slack user group (``group``) or a Slurm account
    (``account``) per ``window`` (ISO week or calendar month, UTC), on ``clusters``;
    checked beside each person's own budget (the tighter wins)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    group: PrincipalId | None = None
    """The team as a Slack user group id (`S...`); give this or `account`."""
    account: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,64}$")
    """The team as a Slurm account (as `policy.accounts` gives it); give this or `group`."""
    clusters: tuple[ClusterPattern, ...] = (ANY,)
    """Cluster names it covers, or `"*"`."""
    gpu_hours: float = Field(ge=0)
    """GPU-hours the team may use per window on the clusters covered."""
    window: Literal["week", "month"] = "week"
    """`week` (ISO week) or `month` (calendar month), UTC."""

    @model_validator(mode="after")
    def _one_owner(self) -> TeamBudgetRule:
        if (self.group is None) == (self.account is None):
            raise ValueError("give one of group (a Slack user group id) or account (Slurm)")
        return self

    @property
    def groups(self) -> tuple[str, ...]:
        """The user group the bot must know the members of (see Policy.group_ids)."""
        return (self.group,) if self.group else ()

    @property
    def team(self) -> str:
        """``group:S0ML`` or ``account:proj``: the pot's name in the store."""
        return f"group:{self.group}" if self.group else f"account:{self.account}"

    def covers(self, group_ids: Collection[str], account: str, cluster: str) -> bool:
        in_cluster = ANY in self.clusters or cluster in self.clusters
        mine = self.group in group_ids if self.group else self.account == account
        return in_cluster and mine


class Team(BaseModel):
    """A team for ``/usage``: a Slack user group and the people who lead it (they see
    its members' usage)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    group: PrincipalId
    """The team's Slack user group id (`S...`)."""
    leads: tuple[PrincipalId, ...] = ()
    """Slack user ids of its leads: they see its members' usage and get its budget's warnings."""


class UsagePolicy(BaseModel):
    """Who leads which team, and what a GPU-hour costs for ``/usage`` (no price: GPU-hours
    only). ``price_per_gpu_hour`` is keyed by a cluster's name, its type (``hcc-a4``) or
    its GPU model (``H100``), tried in that order after the cluster's own
    ``clusters.<name>.price_per_gpu_hour``."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    teams: tuple[Team, ...] = ()
    """Teams whose leads see their members' usage in `/usage`."""
    price_per_gpu_hour: dict[str, float] = Field(default_factory=dict)
    """A price per GPU-hour by cluster name, type (`hcc-a4: 10.5`) or GPU model (`H100: 4.0`),
    tried in that order after `clusters.<name>.price_per_gpu_hour`: `/usage` then shows cost."""
    currency: str = Field(default="USD", pattern=r"^[A-Za-z$€£]{1,8}$")
    """The currency the prices are in."""

    def led_by(self, user_id: str) -> list[str]:
        """The user groups ``user_id`` leads."""
        return [team.group for team in self.teams if user_id in team.leads]


class Limits(BaseModel):
    """What one person may cost the system, whoever they are (admins included).

    ``launches_per_minute`` counts ``/train`` (dry runs too: each costs a record, a
    thread and an SSH round trip) and the Retry button; ``commands_per_minute`` the
    other costly commands: those that ask a cluster (``/logs``, ``/clusters``, the Logs
    button) and ``/usage`` (its chart takes seconds to draw). Both
    are sliding windows of 60 s kept in Redis, shared by every bot process; ``null``
    turns one off. A cancel is never refused. ``dry_runs_at_once`` caps a person's dry
    runs in flight; dry runs do not count against ``max_concurrent`` (a dry run checks
    the next launch while the others run). ``clusters_cache_s``: how long a cluster's
    ``/clusters`` answer is reused for everyone."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    launches_per_minute: int | None = Field(default=10, ge=1, le=10_000)
    """`/train` (dry runs too) and Retry per person per minute; null: no limit."""
    commands_per_minute: int | None = Field(default=30, ge=1, le=10_000)
    """`/logs`, `/clusters` and the Logs button (they ask a cluster) per person per minute; null: no
    limit."""
    dry_runs_at_once: int = Field(default=2, ge=1, le=100)
    """Dry runs in flight per person (they do not count against `max_concurrent`)."""
    clusters_cache_s: float = Field(default=10.0, ge=0, le=600)
    """Seconds a cluster's `/clusters` answer is shared between people."""


class Policy(BaseModel):
    """The launch policy. The default (no rules) lets only admins launch."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    admins: Principals = Principals()
    """Who may launch anywhere (up to each cluster's `max_nodes`) without approval, and cancel
    anyone's launch."""
    rules: tuple[PolicyRule, ...] = ()
    """Who may launch where, tried in order: the first rule matching the person and the cluster
    decides; none: refused, with the reason."""
    approval_above_nodes: int | None = Field(default=None, ge=0)
    """Launches with more nodes than this need a second person's approval; null: never."""
    approvers: tuple[ApproverRule, ...] = ()
    """Who besides admins may approve and reject launches waiting for approval, per cluster and
    size."""
    log_viewers: tuple[ViewerRule, ...] = ()
    """Who besides a launch's owner and the admins may read its logs, per cluster."""
    start_from: tuple[StartFromRule, ...] = ()
    """Who besides a launch's owner may start a launch from its checkpoints (`from=`), per
    cluster; reading its logs is not enough. None: only the owner (admins only when named)."""
    custom_images: tuple[ImageRule, ...] = ()
    """Who may run a custom image (`image=<path to a .sqsh>`), from which directories; none: only
    the clusters' images."""
    accounts: tuple[AccountRule, ...] = ()
    """The Slurm account people's launches are charged to, per person or group and cluster: the
    first rule covering them wins."""
    oncall_may_act: bool = True
    """Whether members of `alerts.oncall_usergroup` may press Retry and Cancel on a launch that
    paged them while its alert is open."""
    workspaces: tuple[TeamId, ...] = ()
    """The Slack workspace (team) ids this bot serves; others are refused. Empty: any."""
    budgets: tuple[BudgetRule, ...] = ()
    """Weekly GPU-hour budgets per person and cluster: the first rule covering the person and the
    cluster applies; none: no limit there."""
    team_budgets: tuple[TeamBudgetRule, ...] = ()
    """Team budgets beside each person's own (a launch must fit both), per user group or Slurm
    account, per week or month."""
    limits: Limits = Limits()
    """What one person may cost the system per minute, shared by every bot process."""
    usage: UsagePolicy = UsagePolicy()
    """`/usage`: teams and their leads, prices."""
    max_sweep: int = Field(default=8, ge=1, le=256)
    """The most launches one sweep may make; a longer sweep is refused before anything runs."""
    placement: Placement = Placement()
    """Where a launch without `cluster=` goes, per team, and when `cluster=auto` may move a pending
    launch."""

    def is_admin(self, user_id: str, group_ids: Collection[str]) -> bool:
        return self.admins.includes(user_id, group_ids)

    def group_ids(self) -> frozenset[str]:
        """Every user group any part of the policy names (``*`` excluded): the groups
        whose members the bot must know to apply it. Walks every field that holds
        rules, so a new kind of rule cannot be forgotten here."""
        found: set[str] = set()
        for name in type(self).model_fields:
            value = getattr(self, name)
            for rule in value if isinstance(value, tuple) else (value,):
                found.update(getattr(rule, "groups", ()))
        return frozenset(found - {ANY})

    def rule_for(
        self, user_id: str, group_ids: Collection[str], cluster: str
    ) -> tuple[int, PolicyRule] | None:
        """The first matching rule and its 1-based number, or None."""
        for number, rule in enumerate(self.rules, start=1):
            if rule.covers(user_id, group_ids, cluster):
                return number, rule
        return None

    def max_nodes_for(self, user_id: str, group_ids: Collection[str], cluster: str) -> int | None:
        """The user's node limit on ``cluster``, or None when the policy sets none."""
        if self.is_admin(user_id, group_ids):
            return None
        found = self.rule_for(user_id, group_ids, cluster)
        return found[1].max_nodes if found else None


class Decision(BaseModel):
    """The outcome of :func:`decide`; ``reason`` is ready to show to the user."""

    model_config = ConfigDict(frozen=True)

    allowed: bool
    reason: str
    needs_approval: bool = False
    max_concurrent: int | None = None  # the limit the create must hold to, atomically


def decide(
    policy: Policy,
    request: Request,
    *,
    user_id: str,
    group_ids: Collection[str],
    active_launches: int,
) -> Decision:
    """Whether ``user_id`` (in ``group_ids``, with ``active_launches`` running) may do ``request``.

    Only launches (:class:`TrainRequest`, :class:`InteractiveRequest`) are
    limited. A dry run is checked for access and nodes but neither counts
    against ``max_concurrent`` nor waits for approval.
    """
    if not isinstance(request, TrainRequest | InteractiveRequest):
        return Decision(allowed=True, reason="Allowed: not a launch.")
    if policy.is_admin(user_id, group_ids):
        return Decision(allowed=True, reason="Allowed: you are a trainbot admin.")
    cluster, nodes = request.cluster, request.nodes
    found = policy.rule_for(user_id, group_ids, cluster)
    if found is None:
        return Decision(
            allowed=False,
            reason=f"You may not launch on {cluster}: no policy rule covers you there. "
            "Ask a trainbot admin for access.",
        )
    number, rule = found
    if rule.max_nodes is not None and nodes > rule.max_nodes:
        return Decision(
            allowed=False,
            reason=f"nodes={nodes} is more than you may use on {cluster} "
            f"(max {rule.max_nodes} for you). Give nodes={rule.max_nodes} or fewer.",
        )
    threshold = (
        rule.approval_above_nodes
        if rule.approval_above_nodes is not None
        else policy.approval_above_nodes
    )
    over = threshold is not None and nodes > threshold
    if request.dry_run:
        note = f" A real launch of {nodes} nodes would need approval." if over else ""
        return Decision(allowed=True, reason=f"Allowed (dry run) by policy rule {number}.{note}")
    if rule.max_concurrent is not None and active_launches >= rule.max_concurrent:
        return Decision(
            allowed=False,
            reason=f"You already have {_launches(active_launches)} active "
            f"(your limit is {rule.max_concurrent}). Wait for one to finish or /cancel one.",
        )
    if over:
        return Decision(
            allowed=True,
            needs_approval=True,
            max_concurrent=rule.max_concurrent,
            reason=f"{nodes} nodes is more than {threshold}, so a second person must approve "
            "this launch first.",
        )
    return Decision(
        allowed=True, reason=f"Allowed by policy rule {number}.", max_concurrent=rule.max_concurrent
    )


def may_manage(
    policy: Policy,
    *,
    user_id: str,
    group_ids: Collection[str],
    owner_id: str,
    owner_name: str = "",
    launch_id: str,
    verb: str,
) -> Decision:
    """Whether ``user_id`` may ``verb`` (cancel, attach to, retry, ...) the launch
    ``launch_id`` of ``owner_id``: only its owner or a trainbot admin may."""
    if user_id == owner_id:
        return Decision(allowed=True, reason="Allowed: it is your launch.")
    if policy.is_admin(user_id, group_ids):
        return Decision(allowed=True, reason="Allowed: you are a trainbot admin.")
    who = owner_name or owner_id
    return Decision(
        allowed=False,
        reason=f"Only {who} (who launched {launch_id}) or a trainbot admin may {verb} it.",
    )


def _launches(count: int) -> str:
    return f"{count} launch" if count == 1 else f"{count} launches"
