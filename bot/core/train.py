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
from bot.gateway.asks import ClusterCalls
from bot.gateway.identity import People
from bot.gateway.on_cluster import Clusters
from bot.lifecycle import phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, recipe_key
from bot.planning import checkpoints, pipelines, start_from
from bot.planning.cost import (
    START_ESTIMATE_STALE_S,
    START_ESTIMATE_TIMEOUT_S,
    Appraisal,
    CostEstimate,
    StartEstimates,
    estimate_cost,
)
from bot.planning.planner import Planner
from bot.settings.logs import launch_fields
from bot.store.budgets import BudgetGuard, OverBudget, OverTeamBudget, TeamGuard
from bot.store.store import Store
from bot.text.front import Front, Incoming, Reply
from bot.text.mrkdwn import escape
from bot.wording import render, starting
from commands.access import is_custom_image, may_use_image
from commands.admission import Admission, Standing, admit
from commands.budget import budget_for, iso_week
from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.job_commands import parse_job_ref
from commands.placement import AUTO
from commands.request_fields import JobRef
from commands.requests import InteractiveRequest, TrainRequest
from commands.schedule import at_epoch

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
        # a shape's estimate, once known, never holds up an ack while it is asked again
        estimates = StartEstimates(stale_s=START_ESTIMATE_STALE_S)
        self.planner = Planner(
            store,
            clusters,
            calls,
            context,
            estimates,
            people.cluster_user,
            START_ESTIMATE_TIMEOUT_S,
        )

    async def train(
        self, request: TrainRequest | InteractiveRequest, incoming: Incoming, user: User
    ) -> Reply:
        """Estimate, admit, create, reply: the launch checked once (:func:`admit`) and
        stored within its limits, or the reason it is not."""
        active = await active_slowed_down(self.store, self.context, user.id)
        request, placed, starts_from = await self.auto_place(request, user)
        standing, cost = await self.standing(request, user, active)
        images = self.clusters.profile(request.cluster).images
        admission = admit(self.context.policy, request, user, images=images, standing=standing)
        if not admission.allowed:
            if admission.field:
                raise CommandError(admission.reason, field=admission.field)
            return Reply(admission.reason, error=True)
        cluster_user = await self.people.cluster_user(request.cluster, user)
        # Its thread goes where /train was typed: refuse now if no one could see it there.
        problem = await self.front.can_post(incoming.channel_id) if self.front else ""
        if problem:
            return Reply(problem, error=True)
        appraisal = await self.planner.appraise(
            request, user, account=admission.account or None, cluster_user=cluster_user,
            known=(cost, standing.charged_gpu_hours, standing.held_gpu_hours),
        )  # fmt: skip
        before = "\n" + "\n".join(escape(line) for line in appraisal.lines())
        if admission.budget is not None and not admission.budget.allowed:
            if not request.dry_run:
                return Reply(escape(admission.budget.reason) + before, error=True)
            before += f"\nA real launch would be refused: {escape(admission.budget.reason)}"
        launch = Launch(
            request=request, user_id=user.id, user_name=user.name, channel=incoming.channel_id
        )
        launch.image_secrets, launch.cluster_user = admission.image_secrets, cluster_user
        launch.slurm_account = admission.account
        launch.estimate_gpu_hours = appraisal.cost.gpu_hours
        launch.placed, launch.starts_from = placed, starts_from
        waits = await self.waits(launch, user)
        return await self.create(launch, admission, appraisal, before, waits, user)

    async def standing(
        self, request: TrainRequest | InteractiveRequest, user: User, active: int
    ) -> tuple[Standing, CostEstimate]:
        """What the store knows of the person for :func:`admit`: ``active`` launches, and
        on the launch's cluster this week their GPU-hours charged and held (read only where
        a budget covers them), and this launch's estimate (earlier runs of its recipe, else
        its time limit)."""
        now, cluster = time.time(), request.cluster
        charged = held = 0.0
        if budget_for(self.context.policy, user.id, user.groups, cluster) is not None:
            charged, held = await self.store.budgets.budget_use(user.id, cluster, iso_week(now))
        key = recipe_key(request)
        runs = await self.store.history.step_runs(cluster, key, request.nodes) if key else []
        cost = estimate_cost(request, self.clusters.profile(cluster), runs)
        standing = Standing(
            active_launches=active,
            charged_gpu_hours=charged,
            held_gpu_hours=held,
            estimate_gpu_hours=cost.gpu_hours,
            now=now,
        )
        return standing, cost

    async def create(
        self,
        launch: Launch,
        admission: Admission,
        appraisal: Appraisal,
        before: str,
        waits: dict[str, object],
        user: User,
    ) -> Reply:
        """Store the admitted launch within its limits (queued, or asking for approval)
        and the answer to /train; nothing is written when it no longer fits."""
        request, policy = launch.request, self.context.policy
        guard = (
            BudgetGuard(request.cluster, admission.week, admission.budget_total)
            if admission.budget is not None and not request.dry_run and not request.over_budget
            else None
        )
        teams = tuple(TeamGuard(t.team, t.window, t.limit) for t in admission.teams)

        async def stored(events: list[Event], *, enqueue: bool = True) -> str:
            """Store the launch, within the limits; "" or why not (nothing written then)."""
            try:
                if await self.store.launches.create(
                    launch, events, enqueue=enqueue, max_active=admission.limit, budget=guard,
                    teams=teams,
                ):  # fmt: skip
                    await usage.team_alerts(self.store, self.front, policy, user.id, teams)
                    return ""
            except (OverBudget, OverTeamBudget) as exc:  # another launch took the room
                return usage.refused(exc, appraisal, policy, launch) + before
            return _at_limit(admission.limit or 0, dry_run=request.dry_run)

        if admission.needs_approval:
            facts = phases.Facts(by=user.id, reason=admission.reason)
            _, events = phases.ask_approval(launch, facts)
            if refused := await stored(events, enqueue=False):
                return Reply(refused, error=True)
            return Reply(
                f"{launch.id} needs a second person's approval ({escape(admission.reason)}); "
                f"asked in its thread.{before}"
            )
        _, events = phases.queue(launch, phases.Facts(by=user.id, data=waits))
        if refused := await stored(events):
            return Reply(refused, error=True)
        log.info(
            "launch %s queued by %s: %s",
            launch.id,
            user.id,
            request.to_text(),
            extra=launch_fields(launch.id, cluster=launch.cluster),
        )
        profile = self.clusters.profiles.get(launch.cluster)
        return Reply(render.queued_reply(launch, profile) + before + starting.waits(waits))

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
            name, why, _ = await self.planner.place(
                request,
                user,
                only=None if parent is None else (parent.cluster,),
                left_out="from= needs the cluster of the launch it starts from",
            )
            request, placed = request.model_copy(update={"cluster": name}), f"{name} ({why})"
        if parent is not None and parent.cluster != request.cluster:
            raise CommandError(
                f"from={parent.id}: its checkpoints are on {parent.cluster}, so a launch "
                f"starting from them runs there. Give cluster={parent.cluster}.",
                field="cluster",
            )
        if parent is not None and isinstance(request, TrainRequest):
            if refused := start_from.start_refusal(self.context.policy, request, parent, user):
                raise CommandError(f"from={request.start_from}: {refused}", field="from")
        return request, placed, "" if parent is None else parent.id

    async def start_parent(
        self, request: TrainRequest | InteractiveRequest, user: User
    ) -> Launch | None:
        """``from=``: the launch to start from, which is the person's own (or
        ``policy.start_from`` names them), whose framework and workload this one can start
        from, which has ended (or ``from_running=yes`` says to start from a running one)
        and which has (or, still running, may yet have) a complete checkpoint; else
        CommandError saying why."""
        if not isinstance(request, TrainRequest) or request.start_from is None:
            return None
        known = None if request.cluster == AUTO else request.cluster
        ref = parse_job_ref(request.start_from, known, self.context)
        if not ref.is_launch_id:
            ref = JobRef(id=ref.id)  # a Slurm job id: on whichever cluster has it
        try:
            parent = await self.lookup.readable(ref, user)
            start_from.start_key(request, parent)
        except (CommandError, ValueError) as exc:
            raise CommandError(f"from={request.start_from}: {exc}", field="from") from None
        step = request.start_step
        if (
            step is not None
            and not parent.active
            and (why := checkpoints.missing_step(parent, step))
        ):
            raise CommandError(f"from={request.start_from}@{step}: {why}", field="from")
        if not parent.active and start_from.newest_checkpoint(parent) is None:
            raise CommandError(
                f"from={request.start_from}: {parent.id} ended "
                f"{parent.outcome or parent.phase.value} without a complete checkpoint "
                "(NO_CHECKPOINT), so there is nothing to start from. Leave from= out to start "
                "from the recipe's own weights, or give a launch that saved one.",
                field="from",
            )
        return parent

    async def waits(self, launch: Launch, user: User) -> dict[str, object]:
        """at= and after=: noted on the launch; what it waits for, where cluster=auto put it
        and what it starts from, as facts (the queue line's and the answer's: {} for none)."""
        launch.tz = user.tz
        launch.groups = sorted(user.groups)  # admitted again as it moves, should Slack not say
        request = launch.request
        if request.after:
            launch.waits_for = await self.parent_of(request, user)
        said: dict[str, object] = {"placed": launch.placed, "starts_from": launch.starts_from}
        if request.at:
            said |= {"at": at_epoch(request.at), "tz": launch.tz}  # the asker's own zone
        if launch.waits_for:
            until = "ends" if request.after_any or launch.sweep else "completes"
            said |= {"waits_for": launch.waits_for, "until": until}
        return {key: value for key, value in said.items() if value}

    async def parent_of(self, request: TrainRequest | InteractiveRequest, user: User) -> str:
        """after=: the launch id of the parent the person may see, or CommandError."""
        ref = parse_job_ref(str(request.after), request.cluster, self.context)
        if not ref.is_launch_id:
            ref = JobRef(id=ref.id)  # a Slurm job id: on whichever cluster has it
        try:
            parent = await pipelines.resolve_parent(
                lambda: self.lookup.readable(ref, user), self.store.launches.get
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
