"""A launch's authority, asked again whenever it moves: a reroute to another cluster, and a
launch that comes due (``at=``, ``after=``, a sweep member's turn, an approval) runs the
same :func:`commands.admission.admit` that ``/train`` ran, with the person's groups as
Slack says them now, the policy and identity map of this process's config, and the
Unix user, Slurm account and image secrets derived again for the cluster it goes to.

Nothing here trusts what the launch record says of its owner's standing: the record
gives the owner's Slack id and the request; the answer comes from the config.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from bot.gateway.identity import NoUser, People
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.launch import Launch, Terms
from bot.store.store import Store
from commands.access import may_view_logs
from commands.admission import Admission, Standing, admit
from commands.budget import budget_for, iso_week
from commands.context import User
from commands.errors import CommandError

log = logging.getLogger(__name__)

GroupsOf = Callable[[str], Awaitable[Collection[str]]]


@dataclass(frozen=True)
class Readmission:
    """The answer for a launch that moves: ``why`` (plain text, "" when it may go), ``ask``
    (for NO_USER: whom the person asks, as facts; see bot.gateway.identity.NoUser) and
    ``outcome`` (NOT_ALLOWED, NO_USER, OVER_BUDGET, or UNSURE: ask again later); when it
    may, the ``terms`` (Unix user, Slurm account, image secrets) it goes with there."""

    why: str = ""
    outcome: str = ""
    terms: Terms = Terms()
    ask: dict[str, Any] = field(default_factory=dict)

    def facts(self) -> dict[str, Any]:
        """The refusal as a thread line's facts (bot.wording.refusals words them)."""
        return {"reason": self.why, "ask": self.ask} if self.ask else {"reason": self.why}

    @property
    def allowed(self) -> bool:
        return not self.why

    def differs(self, launch: Launch) -> bool:
        """Whether the launch as recorded would go as someone else or on other terms."""
        return terms_of(launch) != self.terms

    def apply(self, launch: Launch) -> None:
        """The launch takes the terms derived now."""
        launch.cluster_user = self.terms.cluster_user
        launch.slurm_account = self.terms.slurm_account
        launch.image_secrets = self.terms.image_secrets


def terms_of(launch: Launch) -> Terms:
    """The terms the launch record holds now."""
    return Terms(
        cluster_user=launch.cluster_user,
        slurm_account=launch.slurm_account,
        image_secrets=launch.image_secrets,
    )


class Authority:
    """Asks :func:`admit` again for launches that move. ``groups_of``: the person's
    policy groups as Slack says them now (None: those recorded when it was made)."""

    def __init__(
        self,
        store: Store,
        clusters: Clusters,
        people: People,
        groups_of: GroupsOf | None = None,
        unsure: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        self.clusters = clusters
        self.people = people
        self.groups_of = groups_of
        # whether Slack failed to say some group's members just now: a "no" is then not
        # final (UNSURE: asked again later), so an outage of Slack ends no launch
        self.unsure = unsure

    async def user(self, launch: Launch) -> User:
        """The launch's owner as the policy sees them now."""
        groups = launch.groups
        if self.groups_of is not None:
            groups = sorted(await self.groups_of(launch.user_id))
        return User(id=launch.user_id, name=launch.user_name, groups=frozenset(groups))

    async def may_see(self, user_id: str, launch: Launch) -> bool:
        """Whether ``user_id`` may still see ``launch`` (its owner, an admin, a log viewer
        of its cluster), with their groups as Slack says them now: /watch as it acts."""
        groups = await self.groups_of(user_id) if self.groups_of is not None else ()
        seen = may_view_logs(
            self.clusters.config.policy,
            user_id=user_id,
            group_ids=frozenset(groups),
            owner_id=launch.user_id,
            cluster=launch.cluster,
        )
        if not seen.allowed:
            log.info("%s no longer hears about %s: %s", user_id, launch.id, seen.reason)
        return seen.allowed

    async def readmit(
        self, launch: Launch, cluster: str = "", follows: Launch | None = None
    ) -> Readmission:
        """Whether ``launch`` may still go, on ``cluster`` ("": its own), after ``follows``
        (``after=``: a launch of someone else must still be one the person may see); its
        own GPU-hour estimate, held since it was made, is not counted twice there."""
        target = cluster or launch.cluster
        request = launch.request
        if target != request.cluster:
            request = request.model_copy(update={"cluster": target})
        user = await self.user(launch)
        policy = self.clusters.config.policy
        if follows is not None:
            seen = may_view_logs(
                policy,
                user_id=user.id,
                group_ids=user.groups,
                owner_id=follows.user_id,
                cluster=follows.cluster,
            )
            if not seen.allowed:
                why = f"after={follows.id}: {seen.reason}"
                log.info("launch %s may not follow %s now: %s", launch.id, follows.id, why)
                return Readmission(why=why, outcome="NOT_ALLOWED")
        now = time.time()
        charged = held = 0.0
        if budget_for(policy, user.id, user.groups, target) is not None:
            charged, held = await self.store.budgets.budget_use(user.id, target, iso_week(now))
            if target == launch.cluster:
                held = max(held - (launch.estimate_gpu_hours or 0.0), 0.0)
        standing = Standing(
            charged_gpu_hours=charged,
            held_gpu_hours=held,
            estimate_gpu_hours=launch.estimate_gpu_hours,
            now=now,
            recheck=True,
        )
        profile = self.clusters.profile(target)
        answer = admit(policy, request, user, images=profile.images, standing=standing)
        if refused := _refusal(answer, request.dry_run):
            if refused[0] == "NOT_ALLOWED" and self.unsure is not None and self.unsure():
                log.warning("launch %s: Slack did not say all groups; asked again later", launch.id)
                why = "Slack did not say the person's groups just now"
                return Readmission(why=why, outcome="UNSURE")
            log.info("launch %s may not go on %s now: %s", launch.id, target, refused[1])
            return Readmission(why=refused[1], outcome=refused[0])
        try:
            cluster_user = await self.people.cluster_user(target, user)
        except NoUser as exc:
            log.info("launch %s: %s has no user on %s now: %s", launch.id, user.id, target, exc)
            return Readmission(why=exc.facts["reason"], outcome="NO_USER", ask=exc.facts["ask"])
        except CommandError as exc:
            return Readmission(why=str(exc), outcome="NO_USER")
        terms = Terms(
            cluster_user=cluster_user,
            slurm_account=answer.account,
            image_secrets=answer.image_secrets,
        )
        return Readmission(terms=terms)


def _refusal(answer: Admission, dry_run: bool) -> tuple[str, str] | None:
    """(outcome, reason) when the answer is now no; None when it may go."""
    if not answer.allowed:
        return "NOT_ALLOWED", answer.reason
    if answer.budget is not None and not answer.budget.allowed and not dry_run:
        return "OVER_BUDGET", answer.budget.reason
    return None
