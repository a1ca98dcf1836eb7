"""/train (and /interactive): a launch checked against the policy, its budget and
Slurm's start estimate, placed (``cluster=auto``), and written to Redis to be queued,
or held for a second person's approval. A worker launches it."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from pydantic import ValidationError

from bot.core import usage
from bot.core.lookup import Lookup
from bot.core.rates import active_slowed_down
from bot.engine import pipelines, placement
from bot.engine.asks import ClusterCalls
from bot.engine.cost import (
    START_ESTIMATE_STALE_S,
    START_ESTIMATE_TIMEOUT_S,
    StartEstimates,
    appraise,
)
from bot.engine.identity import People
from bot.engine.on_cluster import Clusters
from bot.lifecycle import phases, render
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.settings.logs import launch_fields
from bot.store.budgets import BudgetGuard, OverBudget, OverTeamBudget
from bot.store.store import Store
from bot.text.front import Front, Incoming, Reply
from bot.text.mrkdwn import escape
from commands.access import is_custom_image, may_use_image, slurm_account
from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.job_commands import parse_job_ref
from commands.placement import AUTO
from commands.policy import decide
from commands.requests import InteractiveRequest, JobRef, TrainRequest

log = logging.getLogger(__name__)


def _at_limit(limit: int, *, dry_run: bool) -> str:
    """Why a launch (or dry run) was refused at its owner's limit."""
    if dry_run:
        return (
            f"You already have {limit} dry run{'s' if limit != 1 else ''} in flight "
            f"(at most {limit} at once). Wait a few seconds for one to finish."
        )
    return (
        f"You already have {limit} active launch{'es' if limit != 1 else ''} "
        f"(your limit is {limit}). Wait for one to finish or /cancel one."
    )


class Launcher:
    """New launches: checked, placed and stored for the workers."""

    def __init__(
        self,
        store: Store,
        clusters: Clusters,
        calls: ClusterCalls,
        context: CommandContext,
        front: Front | None,
        people: People,
        lookup: Lookup,
    ) -> None:
        self.store = store
        self.clusters = clusters
        self.calls = calls
        self.context = context
        self.front = front
        self.people = people
        self.lookup = lookup
        self.start_estimate_timeout_s = START_ESTIMATE_TIMEOUT_S
        # a shape's estimate, once known, never holds up an ack while it is asked again
        self.start_estimates = StartEstimates(stale_s=START_ESTIMATE_STALE_S)

    async def train(
        self, request: TrainRequest | InteractiveRequest, incoming: Incoming, user: User
    ) -> Reply:
        active = await active_slowed_down(self.store, self.context, user.id)
        request, placed, starts_from = await self.auto_place(request, user)
        decision = decide(
            self.context.policy,
            request,
            user_id=user.id,
            group_ids=user.groups,
            active_launches=active,
        )
        if not decision.allowed:
            return Reply(decision.reason, error=True)
        image_secrets = self.check_image(request, user)
        cluster_user = await self.people.cluster_user(request.cluster, user)
        # Its thread goes where /train was typed: refuse now if no one could see it there.
        problem = await self.front.can_post(incoming.channel_id) if self.front else ""
        if problem:
            return Reply(problem, error=True)
        account = slurm_account(
            self.context.policy, user_id=user.id, group_ids=user.groups, cluster=request.cluster
        )
        if request.over_budget and not self.context.policy.is_admin(user.id, user.groups):
            raise CommandError(
                "over_budget=true is for trainbot admins only; leave it out (your launch is "
                "then checked against your weekly GPU-hour budget) or ask an admin.",
                field="over_budget",
            )
        appraisal = await appraise(
            self.store,
            self.clusters,
            self.calls,
            self.context.policy,
            request,
            user,
            account=account,
            estimates=self.start_estimates,
            cluster_user=cluster_user,
            timeout_s=self.start_estimate_timeout_s,
        )
        before = "\n" + "\n".join(escape(line) for line in appraisal.lines())
        budget = appraisal.budget
        if budget is not None and not budget.allowed:
            if not request.dry_run:
                return Reply(escape(budget.reason) + before, error=True)
            before += f"\nA real launch would be refused: {escape(budget.reason)}"
        launch = Launch(
            request=request, user_id=user.id, user_name=user.name, channel=incoming.channel_id
        )
        launch.image_secrets = image_secrets
        launch.cluster_user = cluster_user
        launch.slurm_account = account or ""
        launch.estimate_gpu_hours = appraisal.cost.gpu_hours
        launch.placed, launch.starts_from = placed, starts_from
        waits = await self.waits(launch, user)
        limits = self.context.policy.limits
        limit = limits.dry_runs_at_once if request.dry_run else decision.max_concurrent
        guard = (
            BudgetGuard(request.cluster, appraisal.week, appraisal.budget_total)
            if budget is not None and not request.dry_run and not request.over_budget
            else None
        )
        teams = usage.team_guards(self.context.policy, user, account or "", request, time.time())

        async def create(events: list[Event], *, enqueue: bool = True) -> str:
            """Store the launch, within the limits; "" or why not (nothing written then)."""
            try:
                if await self.store.create(
                    launch, events, enqueue=enqueue, max_active=limit, budget=guard, teams=teams
                ):
                    policy = self.context.policy
                    await usage.team_alerts(self.store, self.front, policy, user.id, teams)
                    return ""
            except (OverBudget, OverTeamBudget) as exc:  # another launch took the room
                return usage.refused(exc, appraisal, self.context.policy, launch) + before
            return _at_limit(limit or 0, dry_run=request.dry_run)

        what = render.request_text(launch)
        if decision.needs_approval:
            facts = phases.Facts(by=user.id, text=what, reason=decision.reason)
            _, events = phases.ask_approval(launch, facts)
            if refused := await create(events, enqueue=False):
                return Reply(refused, error=True)
            return Reply(
                f"{launch.id} needs a second person's approval ({escape(decision.reason)}); "
                f"asked in its thread.{before}"
            )
        before += waits
        _, events = phases.queue(launch, phases.Facts(by=user.id, text=what + waits))
        if refused := await create(events):
            return Reply(refused, error=True)
        log.info(
            "launch %s queued by %s: %s",
            launch.id,
            user.id,
            request.to_text(),
            extra=launch_fields(launch.id, cluster=launch.cluster),
        )
        profile = self.clusters.profiles.get(launch.cluster)
        return Reply(render.queued_reply(launch, profile) + before)

    async def use_partition(self, incoming: Incoming, user: User) -> Reply:
        """The [Use a4] button under a refused launch: the same request on that partition."""
        launch_id, _, partition = incoming.action_value.partition(":")
        launch = await self.lookup.owned(
            parse_job_ref(launch_id, None, self.context), user, "re-run"
        )
        request = launch.request.model_copy(update={"partition": partition})
        try:  # the value came back from outside: check it as if typed
            again = type(launch.request).model_validate(request.model_dump())
        except ValidationError:
            raise CommandError(f"{partition!r} is not a partition name.") from None
        return await self.train(again, replace(incoming, channel_id=launch.channel), user)

    def check_image(self, request: TrainRequest | InteractiveRequest, user: User) -> bool:
        """Refuse a custom ``image=`` the policy does not allow; whether it gets job secrets."""
        profile = self.clusters.profile(request.cluster)
        known = {*profile.images, *profile.images.values()}
        if not is_custom_image(request.image, known):
            return True
        decision, secrets = may_use_image(
            self.context.policy,
            user_id=user.id,
            group_ids=user.groups,
            cluster=request.cluster,
            image=str(request.image),
            cluster_images=list(profile.images),
        )
        if not decision.allowed:
            raise CommandError(decision.reason, field="image")
        return secrets

    async def auto_place(
        self, request: TrainRequest | InteractiveRequest, user: User
    ) -> tuple[TrainRequest | InteractiveRequest, str, str]:
        """``cluster=auto``: the request on the cluster where Slurm starts it first, and
        why ("" and the request as it is for a named cluster); ``from=``: the parent it
        starts from, which holds it to the parent's cluster ("": none)."""
        parent = await self.start_parent(request, user)
        placed = ""
        if request.cluster == AUTO:
            name, why, _ = await placement.place(
                self.clusters,
                self.calls,
                self.context,
                self.start_estimates,
                request,
                user,
                self.people.cluster_user,
                only=None if parent is None else (parent.cluster,),
                left_out="from= needs the cluster of the launch it starts from",
                timeout_s=max(self.start_estimate_timeout_s, placement.PLACE_TIMEOUT_S),
            )
            request, placed = request.model_copy(update={"cluster": name}), f"{name} ({why})"
        if parent is not None and parent.cluster != request.cluster:
            raise CommandError(
                f"from={parent.id}: its checkpoints are on {parent.cluster}, so a launch "
                f"starting from them runs there. Give cluster={parent.cluster}.",
                field="cluster",
            )
        return request, placed, "" if parent is None else parent.id

    async def start_parent(
        self, request: TrainRequest | InteractiveRequest, user: User
    ) -> Launch | None:
        """``from=``: the launch to start from, which the person may see, whose framework
        and workload this one can start from, and which has (or, still running, may yet
        have) a complete checkpoint; else CommandError saying why."""
        if not isinstance(request, TrainRequest) or request.start_from is None:
            return None
        known = None if request.cluster == AUTO else request.cluster
        ref = parse_job_ref(request.start_from, known, self.context)
        if not ref.is_launch_id:
            ref = JobRef(id=ref.id)  # a Slurm job id: on whichever cluster has it
        try:
            parent = await self.lookup.readable(ref, user)
            pipelines.start_key(request, parent)
        except (CommandError, ValueError) as exc:
            raise CommandError(f"from={request.start_from}: {exc}", field="from") from None
        if not parent.active and pipelines.newest_checkpoint(parent) is None:
            raise CommandError(
                f"from={request.start_from}: {parent.id} ended "
                f"{parent.outcome or parent.phase.value} without a complete checkpoint "
                "(NO_CHECKPOINT), so there is nothing to start from. Leave from= out to start "
                "from the recipe's own weights, or give a launch that saved one.",
                field="from",
            )
        return parent

    async def waits(self, launch: Launch, user: User) -> str:
        """at= and after=: noted on the launch; what it waits for, as a line ("": nothing)."""
        launch.tz = user.tz
        if launch.request.at or launch.request.after or launch.placed:  # checked again then
            launch.groups = sorted(user.groups)
        if launch.request.after:
            launch.waits_for = await self.parent_of(launch.request, user)
        text = pipelines.waits_text(launch, own_zone=True)  # only the asker sees it
        where = (
            f"\n📍 cluster=auto chose {escape(launch.placed)}: Slurm starts it there first."
            if launch.placed
            else ""
        )
        if launch.starts_from:
            where += (
                f"\n▶️ It starts from {launch.starts_from}'s newest complete checkpoint; its "
                "thread says which when it goes."
            )
        return where + (f"\n⏳ It {text}." if text else "")

    async def parent_of(self, request: TrainRequest | InteractiveRequest, user: User) -> str:
        """after=: the launch id of the parent the person may see, or CommandError."""
        ref = parse_job_ref(str(request.after), request.cluster, self.context)
        if not ref.is_launch_id:
            ref = JobRef(id=ref.id)  # a Slurm job id: on whichever cluster has it
        try:
            parent = await pipelines.resolve_parent(
                lambda: self.lookup.readable(ref, user), self.store.get
            )
        except ValueError as exc:
            raise CommandError(f"after={request.after}: {exc}", field="after") from None
        except CommandError as exc:
            raise CommandError(f"after={request.after}: {exc}", field="after") from None
        if not parent.active and not pipelines.parent_ok(parent.outcome, request.after_any):
            raise CommandError(
                f"after={request.after}: {parent.id} already ended "
                f"{parent.outcome or parent.phase.value}, so this launch would never start. "
                f"Use after={parent.id}:any to start it anyway, or leave after= out.",
                field="after",
            )
        return parent.id
