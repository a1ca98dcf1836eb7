"""The bot's core: what each command and button does.

Fast paths only: parse, check policy, write to Redis and answer. Launching is
the workers' job and watching the poller's. A /train asks Slurm only when its job
would start (``sbatch --test-only``, one round trip, at most
``start_estimate_timeout_s``); /cancel, /logs and /clusters make one SSH round trip.
Each goes through ``calls`` (:class:`bot.engine.asks.ClusterCalls`): this process's own keys,
or in the web role, which holds none, a worker's.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import replace
from typing import Literal

from pydantic import ValidationError

from bot.core import answers, home, sweep_answers, usage, watching
from bot.core.redact import Redactor
from bot.engine import pipelines, placement, sweeps
from bot.engine.asks import ClusterCalls
from bot.engine.cost import START_ESTIMATE_TIMEOUT_S, StartEstimates, appraise
from bot.engine.identity import NoUser, People
from bot.engine.on_cluster import Clusters
from bot.engine.sweeps import ACTION_CANCEL_MEMBER
from bot.lifecycle import health, render
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase, Sweep
from bot.settings.logs import launch_fields
from bot.store.budgets import BudgetGuard, OverBudget, OverTeamBudget
from bot.store.store import Store
from bot.text.front import GROUP_EVENTS, HOME_EVENT, Front, Incoming, Reply
from bot.text.mrkdwn import (
    ACTION_APPROVE,
    ACTION_ATTACH,
    ACTION_CANCEL,
    ACTION_LOGS,
    ACTION_PREFS,
    ACTION_REJECT,
    ACTION_RETRY,
    ACTION_USE_PARTITION,
    escape,
)
from cluster.discovery import ClusterCapacity
from cluster.errors import ClusterError, TrainbotError
from commands.access import (
    is_custom_image,
    may_act_as_oncall,
    may_approve,
    may_reject,
    may_use_image,
    may_view_logs,
    slurm_account,
)
from commands.context import CommandContext, User
from commands.dispatch import parse_command
from commands.errors import CommandError
from commands.help import help_text, recipes_text
from commands.job_commands import parse_job_ref
from commands.placement import AUTO
from commands.policy import decide, may_manage
from commands.requests import (
    AttachRequest,
    CancelRequest,
    ClustersRequest,
    HelpRequest,
    InteractiveRequest,
    JobRef,
    JobsRequest,
    LogsRequest,
    RecipesRequest,
    SweepRequest,
    TrainRequest,
    UnwatchRequest,
    UsageRequest,
    WatchRequest,
)

log = logging.getLogger(__name__)

GROUPS_TTL_S = 300.0
# Groups that grant power (admins, approvers, on-call) are asked again sooner, so
# a removal takes effect within this; subteam_members_changed forgets at once.
PRIVILEGED_GROUPS_TTL_S = 20.0
UNCONFIRMED_GROUPS = (
    "\nTrainbot could not confirm your group membership with Slack just now (an admin, "
    "approver or on-call group), so it counts none of those: if you are in one, try again "
    "in a minute."
)


HOME_MIN_INTERVAL_S = 5.0  # an App Home opened again sooner is left as it is
CAPACITY_TTL_S = 60.0  # cluster capacity shown on App Homes is at most this old
RATE_WINDOW_S = 60.0  # the rate limits of policy ``limits`` count over this window


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


def _sweep_first_events(sweep: Sweep, first_id: str, approval: str | None) -> list[Event]:
    """The sweep's parent and first thread line: queued, or the one approval it asks."""
    if approval is None:
        said = f"Queued by <@{sweep.user_id}>: `{escape(sweep.text)}`"
        return [Event("parent", first_id), Event("thread", first_id, said)]
    ask = (
        f"✋ <@{sweep.user_id}> asks for sweep {sweep.id} ({len(sweep.members)} launches): "
        f"`{escape(sweep.text)}`. {escape(approval)} A trainbot admin or an approver can "
        "approve the whole sweep."
    )
    return [
        Event("parent", first_id),
        Event("thread", first_id, ask, data={"buttons": ["approve", "reject"], "sweep": sweep.id}),
    ]


class Core:
    def __init__(
        self,
        store: Store,
        clusters: Clusters,
        context: CommandContext,
        front: Front | None = None,
        *,
        calls: ClusterCalls | None = None,
    ) -> None:
        """``calls``: how this process asks the clusters (by default itself, with its own
        keys; the web role asks the workers: :class:`bot.engine.asks.WorkerAsks`)."""
        self.store = store
        self.clusters = clusters
        self.calls: ClusterCalls = calls or clusters
        self.context = context
        self.front = front
        self._groups: dict[str, tuple[float, set[str]]] = {}
        self._unconfirmed: set[str] = set()  # privileged groups Slack did not answer for
        self._home_shown: dict[str, float] = {}  # user -> when their App Home was last built
        self._capacity_at: dict[str, tuple[float, ClusterCapacity | str]] = {}
        self._clusters_asked: dict[str, tuple[float, asyncio.Future[ClusterCapacity]]] = {}
        self.redactor = Redactor()  # set by the service: secret values out of replies
        self.start_estimate_timeout_s = START_ESTIMATE_TIMEOUT_S
        self.start_estimates = StartEstimates()
        self.people = People(clusters, front, self.calls)

    async def __call__(self, incoming: Incoming) -> Reply:
        reply = await self._answer(incoming)
        if reply.error and self._unconfirmed:  # a refusal may be for want of a group
            reply = replace(reply, text=reply.text + UNCONFIRMED_GROUPS)
        if not self.redactor:
            return reply
        return replace(
            reply,
            text=self.redactor(reply.text),
            blocks=self.redactor.data(reply.blocks),
            file_content=self.redactor.blob(reply.file_content),
        )

    async def _answer(self, incoming: Incoming) -> Reply:
        try:
            if incoming.event == HOME_EVENT:
                return await self.home(incoming.user_id)
            if incoming.event:
                return self.on_event(incoming)
            if incoming.action_id:
                return await self.on_action(incoming)
            return await self.on_command(incoming)
        except NoUser as exc:  # names the admins to ask, as mentions
            return Reply(exc.mrkdwn, error=True)
        except CommandError as exc:  # its text may quote what the user typed
            return Reply(escape(str(exc)), error=True)
        except TrainbotError as exc:
            log.warning("command %s failed: %s", incoming.command or incoming.action_id, exc)
            return Reply(f"That did not work: {escape(str(exc))}", error=True)

    def on_event(self, incoming: Incoming) -> Reply:
        """A user group's members changed: ask Slack again at the next check."""
        if incoming.event in GROUP_EVENTS and incoming.action_value:
            self._groups.pop(incoming.action_value, None)
            log.info("user group %s changed; membership will be asked again", incoming.action_value)
        return Reply("")

    async def home(self, user_id: str) -> Reply:
        """The person's App Home: their active and recent launches, and the clusters.
        Cheap when many open it: cluster capacity is asked at most once a minute for
        everyone, and a person opening it again within seconds gets nothing new."""
        now = time.time()
        if now - self._home_shown.get(user_id, 0.0) < HOME_MIN_INTERVAL_S:
            return Reply("")
        self._home_shown[user_id] = now
        ids = await self.store.active_ids(user_id)
        found = await asyncio.gather(*(self.store.get(i) for i in ids))
        active = sorted((item for item in found if item), key=lambda item: item.created_at)
        recent = await self.store.history(user_id=user_id, limit=home.RECENT_SHOWN)
        links = {item.id: item.permalink for item in active}
        links |= {entry.id: entry.permalink for entry in recent}
        capacity = await self._capacity(now)
        sweep_ids = sorted({item.sweep for item in active if item.sweep})
        found_sweeps = await asyncio.gather(*(self.store.get_sweep(i) for i in sweep_ids))
        in_sweeps = {sweep.id: sweep for sweep in found_sweeps if sweep}
        blocks = home.home_blocks(active, recent, capacity, links, sweeps=in_sweeps, now=now)
        blocks += home.prefs_blocks(await self.store.prefs(user_id))
        if self.context.policy.is_admin(user_id, await self.groups_of(user_id)):
            retrying = await self.store.retrying_letters()
            owed = home.dead_letter_text(retrying, await self.store.given_up_count())
            blocks += home.dead_letter_blocks(owed)
        return Reply("App Home", blocks=blocks)

    async def _capacity(self, now: float) -> dict[str, ClusterCapacity | str]:
        """Every cluster's capacity, asked again only when older than a minute."""
        stale = [
            name
            for name in self.clusters.profiles
            if now - self._capacity_at.get(name, (0.0, ""))[0] >= CAPACITY_TTL_S
        ]
        answers_ = await asyncio.gather(
            *(self.calls.capacity(name) for name in stale), return_exceptions=True
        )
        for name, answer in zip(stale, answers_, strict=True):
            value: ClusterCapacity | str = (
                f"{type(answer).__name__}: {answer}"
                if isinstance(answer, BaseException)
                else answer
            )
            self._capacity_at[name] = (now, value)
        return {name: self._capacity_at[name][1] for name in self.clusters.profiles}

    async def user(self, incoming: Incoming) -> User:
        return User(
            id=incoming.user_id,
            name=incoming.user_name,
            groups=frozenset(await self.groups_of(incoming.user_id)),
            # at= is read in the person's time zone (asked of the front only then)
            tz=await self.people_tz(incoming.user_id) if "at=" in incoming.text.lower() else "",
        )

    async def groups_of(self, user_id: str) -> set[str]:
        """The policy's user groups this user is in (members asked of the front end, cached)."""
        policy = self.context.policy
        privileged = {g for rule in policy.approvers for g in rule.groups} | set(
            policy.admins.groups
        )
        oncall = self.clusters.config.alerts.oncall_usergroup
        if oncall and policy.oncall_may_act:
            privileged.add(oncall)
        wanted = policy.group_ids() | privileged
        found = set()
        for group in wanted:
            stamp, members = self._groups.get(group, (0.0, set()))
            ttl_s = PRIVILEGED_GROUPS_TTL_S if group in privileged else GROUPS_TTL_S
            if time.monotonic() - stamp > ttl_s and self.front is not None:
                try:
                    members = set(await self.front.usergroup_members(group))
                except Exception:  # never marked fresh: asked again next time
                    log.warning("could not list members of user group %s", group)
                    if group in privileged:  # fail closed: a removed admin keeps nothing
                        self._unconfirmed.add(group)
                        continue
                else:
                    self._groups[group] = (time.monotonic(), members)
                    self._unconfirmed.discard(group)
            if user_id in members:
                found.add(group)
        return found

    async def on_command(self, incoming: Incoming) -> Reply:  # noqa: C901 - one branch a command
        user = await self.user(incoming)
        request = parse_command(incoming.command, incoming.text, user=user, context=self.context)
        if isinstance(request, TrainRequest | InteractiveRequest):
            return await self.train(request, incoming, user)
        if isinstance(request, SweepRequest):
            return await self.sweep(request, incoming, user)
        if isinstance(request, HelpRequest):
            return Reply(help_text(self.context, request.topic))
        if isinstance(request, RecipesRequest):
            return Reply(recipes_text(self.context, request.workload))
        if isinstance(request, JobsRequest) and request.watching:
            return await watching.listing(self.store, user)
        if isinstance(request, WatchRequest):  # who may see its logs may watch it
            return await watching.watch(self.store, await self.readable(request.job, user), user)
        if isinstance(request, UnwatchRequest):
            return await watching.unwatch(self.store, (await self.find(request.job)).id, user)
        if isinstance(request, JobsRequest) and request.history:
            if request.all_users and not self.context.policy.is_admin(user.id, user.groups):
                raise CommandError(
                    "Only trainbot admins see everyone's history; /jobs history shows yours."
                )
            return await answers.history(
                self.store,
                user,
                all_users=request.all_users,
                cluster=request.cluster,
                days=request.days,
            )
        if isinstance(request, JobsRequest):
            return await answers.jobs(
                self.store, user, all_users=request.all_users, cluster=request.cluster
            )
        if isinstance(request, ClustersRequest):
            return await self.cluster_list(request.cluster, user)
        if isinstance(request, CancelRequest) and request.job.is_sweep_id:
            members = await self.sweep_members(request.job.id, user, "cancel")
            return sweep_answers.confirm_cancel(*members)
        if isinstance(request, CancelRequest):
            launch = await self.actable(request.job, user, "cancel")
            return answers.confirm_cancel(launch)
        if isinstance(request, LogsRequest):
            launch = await self.readable(request.job, user)
            await self.slow_down(user.id, "commands")
            if request.plot:
                return await answers.plot(launch)
            return await answers.logs(self.calls, launch, request.lines or 50)
        if isinstance(request, AttachRequest):
            return answers.attach(self.clusters, await self.owned(request.job, user, "attach to"))
        if isinstance(request, UsageRequest):
            return await usage.answer(
                self.store,
                self.context.policy,
                self.context.clusters,
                user,
                request,
                self.team_members,
            )
        raise CommandError("That command is not handled yet.")

    async def team_members(self, group: str) -> list[str]:
        """The members of a Slack user group, as Slack says now (none without a front)."""
        return [] if self.front is None else list(await self.front.usergroup_members(group))

    async def cluster_list(self, only: str | None, user: User) -> Reply:
        """/clusters: the clusters the person may launch on (admins: all), each answer
        shared for a few seconds."""
        policy = self.context.policy
        names = [only] if only else list(self.clusters.profiles)
        if not policy.is_admin(user.id, user.groups):
            names = [n for n in names if policy.rule_for(user.id, user.groups, n)]
        if not names:
            where = f"on {only}" if only else "on any cluster"
            raise CommandError(
                f"You may not launch {where}, so /clusters has nothing to show you. "
                "Ask a trainbot admin for access."
            )
        await self.slow_down(user.id, "commands")
        return await answers.cluster_list(self.clusters, names, ask=self.cluster_capacity)

    async def on_action(self, incoming: Incoming) -> Reply:
        user = await self.user(incoming)
        if incoming.action_id == ACTION_USE_PARTITION:
            return await self.use_partition(incoming, user)
        if incoming.action_id.startswith(ACTION_PREFS):  # App Home: built again after it
            self._home_shown.pop(user.id, None)
            tz = await self.people_tz(user.id)
            return await watching.change_prefs(self.store, user.id, incoming.action_value, tz)
        ref = parse_job_ref(incoming.action_value, None, self.context)  # as if typed
        if ref.is_sweep_id:
            return await self.on_sweep_action(incoming.action_id, ref.id, user)
        if incoming.action_id == ACTION_CANCEL_MEMBER:
            return answers.confirm_cancel(await self.actable(ref, user, "cancel"))
        if incoming.action_id == ACTION_CANCEL:
            return await self.cancel(await self.actable(ref, user, "cancel"), user)
        if incoming.action_id == ACTION_LOGS:
            launch = await self.readable(ref, user)
            await self.slow_down(user.id, "commands")
            return await answers.logs(self.calls, launch, 50)
        if incoming.action_id == ACTION_ATTACH:
            return answers.attach(self.clusters, await self.owned(ref, user, "attach to"))
        if incoming.action_id in (ACTION_APPROVE, ACTION_REJECT):
            return await self.approve(
                await self.find(ref), user, incoming.action_id == ACTION_APPROVE
            )
        if incoming.action_id == ACTION_RETRY:
            launch = await self.actable(ref, user, "retry")
            await self.slow_down(user.id, "launches")
            return await self.retry(launch, user)
        return Reply(f"That button ({escape(incoming.action_id)}) is not handled yet.", error=True)

    async def on_sweep_action(self, action_id: str, sweep_id: str, user: User) -> Reply:
        """Cancel a whole sweep (after its confirm dialog), or approve or reject it whole."""
        verb = "cancel" if action_id == ACTION_CANCEL else ""  # approvers: checked per member
        sweep, members = await self.sweep_members(sweep_id, user, verb)
        live = [m for m in members if m is not None and m.active]
        if action_id == ACTION_CANCEL:
            for member in live:
                await self.actable(JobRef(id=member.id), user, "cancel")
            replies = [await self.cancel(member, user) for member in live]
            failed = [r.text for r in replies if r.error]
            said = f"Cancelled sweep {sweep.id}: {len(live)} active member(s), one cancel each."
            return Reply("\n".join([said, *failed]), error=bool(failed))
        if action_id in (ACTION_APPROVE, ACTION_REJECT):
            waiting = [m for m in live if m.phase == Phase.AWAITING_APPROVAL]
            if not waiting:
                return Reply(f"Sweep {sweep.id} is not waiting for approval any more.", error=True)
            approved = action_id == ACTION_APPROVE
            if approved:  # all or none: one member past the approver's limit stops the sweep
                for member in waiting:
                    decision = may_approve(
                        self.context.policy, user_id=user.id, group_ids=user.groups,
                        owner_id=member.user_id, cluster=member.cluster,
                        nodes=member.request.nodes,
                    )  # fmt: skip
                    if not decision.allowed:
                        return Reply(escape(decision.reason), error=True)
            for member in waiting:
                reply = await self.approve(member, user, approved)
                if reply.error:
                    return reply
            word = "Approved" if approved else "Rejected"
            return Reply(f"{word} sweep {sweep.id} ({len(waiting)} launches).")
        return Reply(f"That button does not apply to sweep {sweep.id}.", error=True)

    async def sweep_members(
        self, sweep_id: str, user: User, verb: str = ""
    ) -> tuple[Sweep, list[Launch | None]]:
        """The sweep and its members' records; CommandError when it is unknown, or (with
        ``verb``) not the person's to act on, as for one of its launches."""
        sweep = await self.store.get_sweep(sweep_id)
        members = [] if sweep is None else await self.store.get_many(sweep.members)
        first = next((m for m in members if m is not None), None)
        if sweep is None or first is None:
            raise CommandError(f"No sweep {sweep_id} (it may have expired). /jobs lists yours.")
        if verb:
            await self.actable(JobRef(id=first.id), user, verb)
        return sweep, members

    async def slow_down(self, user_id: str, kind: Literal["launches", "commands"]) -> None:
        """Count a costly request against the person's limit (policy ``limits``), or refuse
        it, saying how long to wait."""
        limits = self.context.policy.limits
        limit = limits.launches_per_minute if kind == "launches" else limits.commands_per_minute
        if limit is None:
            return
        wait_s = await self.store.take_rate(kind, user_id, limit=limit, window_s=RATE_WINDOW_S)
        if wait_s <= 0:
            return
        plural = "" if limit == 1 else ("es" if kind == "launches" else "s")
        what = (
            f"started {limit} launch{plural}"
            if kind == "launches"
            else f"ran {limit} command{plural} that ask a cluster"
        )
        raise CommandError(
            f"Slow down: you {what} in the last minute; try again in {math.ceil(wait_s)} s."
        )

    async def cluster_capacity(self, name: str) -> ClusterCapacity:
        """A cluster's capacity for /clusters: one question at a time per cluster, its
        answer (or error) reused for everyone for ``limits.clusters_cache_s``."""
        ttl_s = self.context.policy.limits.clusters_cache_s
        now = time.monotonic()
        asked = self._clusters_asked.get(name)
        if asked is None or (asked[1].done() and now - asked[0] >= ttl_s):
            asked = (now, asyncio.ensure_future(self.calls.capacity(name)))
            self._clusters_asked[name] = asked
        return await asyncio.shield(asked[1])

    # -- /train ------------------------------------------------------------

    async def train(
        self, request: TrainRequest | InteractiveRequest, incoming: Incoming, user: User
    ) -> Reply:
        active, _ = await self.store.active_counts(user.id)
        await self.slow_down(user.id, "launches")
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
        cluster_user = await self.cluster_user(request.cluster, user)
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

        if decision.needs_approval:
            launch.phase = Phase.AWAITING_APPROVAL
            ask = (
                f"✋ asks for {render.request_text(launch)}. "
                f"{escape(decision.reason)} A trainbot admin or an approver for "
                f"{launch.cluster} can approve it."
            )
            events = [
                Event("parent", launch.id),
                Event("thread", launch.id, ask, data={"buttons": ["approve", "reject"]}),
            ]
            if refused := await create(events, enqueue=False):
                return Reply(refused, error=True)
            return Reply(
                f"{launch.id} needs a second person's approval ({escape(decision.reason)}); "
                f"asked in its thread.{before}"
            )
        queued = f"Queued by <@{user.id}>: {render.request_text(launch)}{waits}"
        before += waits
        if refused := await create(
            [Event("parent", launch.id), Event("thread", launch.id, queued)]
        ):
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

    async def sweep(self, request: SweepRequest, incoming: Incoming, user: User) -> Reply:
        """A sweep: every member checked as its own launch, one approval, one budget check
        of the total, all members written at once; those past the person's room under
        ``max_concurrent`` each wait for an earlier member to end, in order."""
        policy = self.context.policy
        members = request.members
        first = members[0]
        _one_launch_keys(first)
        active, _ = await self.store.active_counts(user.id)
        decisions = [
            decide(policy, m, user_id=user.id, group_ids=user.groups, active_launches=active)
            for m in members
        ]
        if refused := next((d for d in decisions if not d.allowed), None):
            return Reply(refused.reason, error=True)
        await self.slow_down(user.id, "launches")
        image_secrets = self.check_image(first, user)
        cluster_user = await self.cluster_user(first.cluster, user)
        problem = await self.front.can_post(incoming.channel_id) if self.front else ""
        if problem:
            return Reply(problem, error=True)
        account = slurm_account(
            policy, user_id=user.id, group_ids=user.groups, cluster=first.cluster
        )
        if first.over_budget and not policy.is_admin(user.id, user.groups):
            raise CommandError(
                "over_budget=true is for trainbot admins only; leave it out (the sweep is "
                "then checked against your weekly GPU-hour budget) or ask an admin.",
                field="over_budget",
            )
        appraisals = [
            await appraise(
                self.store, self.clusters, self.calls, policy, member, user, account=account,
                estimates=self.start_estimates, cluster_user=cluster_user,
                timeout_s=self.start_estimate_timeout_s,
            )
            for member in members
        ]  # fmt: skip
        known = [a.cost.gpu_hours for a in appraisals if a.cost.gpu_hours is not None]
        total = sum(known) if len(known) == len(appraisals) else None
        whole = replace(
            appraisals[0], cost=replace(appraisals[0].cost, gpu_hours=total, basis="all members")
        )
        sweep = Sweep(
            user_id=user.id,
            channel=incoming.channel_id,
            title=f"{first.workload} · {first.model}",
            text=request.to_text(),
            where=sweeps.where(request),
            keys=[key for key, _ in request.axes],
            values=[[v for _, v in request.values_of(i)] for i in range(len(members))],
            estimate_gpu_hours=total,
        )
        each = "" if total is None else f", about {total:,.1f} GPU-hours in all"
        said = (
            f"Sweep {sweep.id}: {len(members)} launches of {escape(sweep.title)} on "
            f"{escape(sweep.where)}{each}.\n{escape(appraisals[0].start)}"
        )
        budget = None
        if whole.budget_total and total is not None and not first.over_budget:
            charged, held = await self.store.budget_use(user.id, first.cluster, whole.week)
            if charged + held + total > whole.budget_total:
                return Reply(f"{said}\n{escape(whole.refusal(charged, held))}", error=True)
            budget = BudgetGuard(first.cluster, whole.week, whole.budget_total)
        if request.dry_run:
            lines = [f"{i + 1}. {escape(sweep.label(i))}" for i in range(len(members))]
            return Reply(f"{said}\nMembers:\n" + "\n".join(lines) + "\nNothing was launched.")
        approval = next((d for d in decisions if d.needs_approval), None)
        room = max(1, (decisions[0].max_concurrent or len(members)) - active)
        launches = [
            Launch(request=m, user_id=user.id, user_name=user.name, channel=incoming.channel_id)
            for m in members
        ]
        for index, (launch, appraisal) in enumerate(zip(launches, appraisals, strict=True)):
            launch.sweep = sweep.id
            launch.image_secrets, launch.cluster_user = image_secrets, cluster_user
            launch.slurm_account = account or ""
            launch.estimate_gpu_hours = appraisal.cost.gpu_hours
            launch.tz, launch.groups = user.tz, sorted(user.groups)
            if index >= room:  # max_concurrent: each waits for the member ``room`` before it
                launch.waits_for = launches[index - room].id
            if approval is not None:
                launch.phase = Phase.AWAITING_APPROVAL
        sweep.members = [launch.id for launch in launches]
        events = _sweep_first_events(
            sweep, launches[0].id, None if approval is None else approval.reason
        )
        teams = usage.team_guards(policy, user, account or "", first, time.time())
        try:
            await self.store.create_sweep(
                sweep, launches, events, enqueue=approval is None, budget=budget, teams=teams
            )
        except (OverBudget, OverTeamBudget) as exc:  # another launch took the room
            return Reply(usage.refused(exc, whole, policy, launches[0]) + "\n" + said, error=True)
        log.info("sweep %s queued by %s: %s", sweep.id, user.id, sweep.text)
        if approval is not None:
            return Reply(f"{said}\nIt needs a second person's approval; asked in its thread.")
        waits = (
            f" {len(members) - room} wait their turn (your max_concurrent)."
            if len(members) > room
            else ""
        )
        return Reply(f"{said}\nQueued; the table in its thread follows every member.{waits}")

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
                self.cluster_user,
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
            parent = await self.readable(ref, user)
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

    async def people_tz(self, user_id: str) -> str:
        """The person's time zone (Slack's users.info ``tz``); "": this machine's own."""
        ask = getattr(self.front, "user_tz", None)
        if ask is None:
            return ""
        try:
            return str(await ask(user_id) or "")
        except Exception:  # said back with the zone used, so a wrong guess shows
            log.warning("could not read the time zone of %s", user_id)
            return ""

    async def waits(self, launch: Launch, user: User) -> str:
        """at= and after=: noted on the launch; what it waits for, as a line ("": nothing)."""
        launch.tz = user.tz
        if launch.request.at or launch.request.after or launch.placed:  # checked again then
            launch.groups = sorted(user.groups)
        if launch.request.after:
            launch.waits_for = await self.parent_of(launch.request, user)
        text = pipelines.waits_text(launch)
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
                lambda: self.readable(ref, user), self.store.get
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

    async def cluster_user(self, cluster: str, user: User) -> str:
        """The Unix user ``user``'s launches run as on ``cluster`` ("": the shared account);
        a CommandError when the cluster's identity maps no one to them and refuses."""
        return await self.people.cluster_user(cluster, user)

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

    # -- finding launches ----------------------------------------------------

    async def readable(self, ref: JobRef, user: User) -> Launch:
        """The launch, when ``user`` may read its logs (owner, admin, log viewer)."""
        launch = await self.find(ref)
        decision = may_view_logs(
            self.context.policy,
            user_id=user.id,
            group_ids=user.groups,
            owner_id=launch.user_id,
            cluster=launch.cluster,
        )
        if not decision.allowed:
            raise CommandError(decision.reason)
        return launch

    async def actable(self, ref: JobRef, user: User, verb: str) -> Launch:
        """Like ``owned``, but on-call may also retry or cancel a launch that paged them."""
        launch = await self.find(ref)
        if may_act_as_oncall(
            self.context.policy,
            group_ids=user.groups,
            oncall_group=self.clusters.config.alerts.oncall_usergroup,
            paged=bool(launch.open_alerts),
        ):
            return launch
        return await self.owned(ref, user, verb)

    async def find(self, ref: JobRef) -> Launch:
        if ref.is_sweep_id:
            raise CommandError(
                f"{ref.id} is a sweep: give one of its launch ids here (its table and "
                "/jobs list them); /cancel takes the whole sweep."
            )
        if ref.is_launch_id:
            launch = await self.store.get(ref.id)
            if launch is None:
                raise CommandError(await self._gone(ref.id))
            return launch
        found = await self.store.find_job(ref.id)
        if ref.cluster:
            found = [f for f in found if f[0] == ref.cluster]
        if not found:
            where = f" on {ref.cluster}" if ref.cluster else ""
            raise CommandError(
                f"No launch of trainbot has Slurm job {ref.id}{where}. /jobs lists yours."
            )
        if len(found) > 1:
            clusters = ", ".join(c for c, _ in found)
            raise CommandError(
                f"Slurm job {ref.id} exists on {clusters}. "
                f"Add cluster=<name>, e.g. cluster={found[0][0]}."
            )
        launch = await self.store.get(found[0][1])
        if launch is None:
            raise CommandError(await self._gone(found[0][1]))
        return launch

    async def _gone(self, launch_id: str) -> str:
        """Why there is no record of ``launch_id``: unknown, or ended longer ago than kept."""
        entry = await self.store.finished(launch_id)
        if entry is None:
            return f"No launch {launch_id}. /jobs lists yours."
        days = self.clusters.config.retention.launches_days
        return (
            f"{launch_id} ended on {time.strftime('%Y-%m-%d', time.gmtime(entry.ended_at))} "
            f"({entry.outcome or entry.phase}); its details are kept {days:g} days."
        )

    async def owned(self, ref: JobRef, user: User, verb: str) -> Launch:
        launch = await self.find(ref)
        decision = may_manage(
            self.context.policy,
            user_id=user.id,
            group_ids=user.groups,
            owner_id=launch.user_id,
            owner_name=launch.user_name,
            launch_id=launch.id,
            verb=verb,
        )
        if not decision.allowed:
            raise CommandError(decision.reason)
        return launch

    # -- /cancel, /logs, /attach -------------------------------------------------

    async def cancel(self, launch: Launch, user: User) -> Reply:
        """A cancel is final. The person's intent is written first (who, when); from then on
        the launch ends CANCELLED whatever its job's log shows, and nothing is retried. The
        job to ``scancel`` is read from the record after that write, so a job a worker
        recorded meanwhile is cancelled too; one a worker records later, it cancels itself."""
        if not launch.active:
            return Reply(f"{launch.id} has already ended ({render.status_label(launch)[1]}).")

        def cancelled(stored: Launch) -> list[Event]:
            if not stored.active:
                return []
            text = f"🚫 Cancelled by <@{user.id}>."
            events = []
            if not stored.cancelled_by:
                stored.cancelled_by, stored.cancelled_at = user.id, time.time()
            if stored.phase not in (Phase.SUBMITTED, Phase.RUNNING) or not stored.job_id:
                stored.phase, stored.outcome, stored.detail = Phase.DONE, "CANCELLED", text
            if stored.submit_started_at:  # a worker looks the job up and cancels it
                text += (
                    " A submission was in flight: trainbot looks the job up by the launch id "
                    "and cancels it if Slurm has it."
                )
                events.append(Event("enqueue", stored.id))
            return [Event("thread", stored.id, text), Event("update", stored.id), *events]

        stored, events = await self.store.mutate(launch.id, cancelled)
        if not events:
            return Reply(f"{launch.id} has already ended ({render.status_label(stored)[1]}).")
        job_id = stored.job_id if stored.phase in (Phase.SUBMITTED, Phase.RUNNING) else ""
        if stored.attempts and stored.attempts[-1].held and len(stored.attempts) > 1:
            job_id = stored.attempts[-2].job_id  # a Retry was cancelling it: make sure
        if not job_id:
            return Reply(f"Cancelled {launch.id}. The thread will show the final state.")
        try:
            await self.calls.cancel(stored, [job_id])  # as its person, by a worker if need be
        except ClusterError as exc:
            text = (
                f"⚠️ Could not cancel Slurm job {job_id} now ({escape(str(exc))}). The launch "
                f"stays cancelled and will not be retried; trainbot sends the cancel again at "
                f"each poll until the job ends (by hand: `scancel {job_id}` on "
                f"{escape(stored.cluster)})."
            )
            await self.store.mutate(launch.id, lambda s: [Event("thread", s.id, text)])
            return Reply(text, error=True)
        return Reply(f"Cancelled Slurm job {job_id}. The thread will show the final state.")

    async def use_partition(self, incoming: Incoming, user: User) -> Reply:
        """The [Use a4] button under a refused launch: the same request on that partition."""
        launch_id, _, partition = incoming.action_value.partition(":")
        launch = await self.owned(parse_job_ref(launch_id, None, self.context), user, "re-run")
        request = launch.request.model_copy(update={"partition": partition})
        try:  # the value came back from outside: check it as if typed
            again = type(launch.request).model_validate(request.model_dump())
        except ValidationError:
            raise CommandError(f"{partition!r} is not a partition name.") from None
        return await self.train(again, replace(incoming, channel_id=launch.channel), user)

    async def approve(self, launch: Launch, user: User, approved: bool) -> Reply:
        """A second person lets a launch above the node threshold go (or not)."""
        if launch.phase != Phase.AWAITING_APPROVAL:
            return Reply(f"{launch.id} is not waiting for approval any more.", error=True)
        if approved:
            decision = may_approve(
                self.context.policy,
                user_id=user.id,
                group_ids=user.groups,
                owner_id=launch.user_id,
                cluster=launch.cluster,
                nodes=launch.request.nodes,
            )
        else:  # the asker may withdraw; others must be admins or approvers
            decision = may_reject(
                self.context.policy,
                user_id=user.id,
                group_ids=user.groups,
                owner_id=launch.user_id,
                cluster=launch.cluster,
            )
        if not decision.allowed:
            return Reply(escape(decision.reason), error=True)

        def decide_launch(stored: Launch) -> list[Event]:
            if stored.phase != Phase.AWAITING_APPROVAL or stored.cancelled_by:
                return []
            if approved:
                stored.phase = Phase.QUEUED
                text = f"✅ Approved by <@{user.id}>. Queued."
                return [
                    Event("thread", stored.id, text),
                    Event("update", stored.id),
                    Event("enqueue", stored.id),
                ]
            stored.phase, stored.outcome = Phase.REJECTED, "NOT_APPROVED"
            stored.detail = f"Not approved by <@{user.id}>."
            return [
                Event("thread", stored.id, f"⛔ {stored.detail} Nothing was submitted."),
                Event("update", stored.id),
            ]

        await self.store.mutate(launch.id, decide_launch)
        return Reply(f"{'Approved' if approved else 'Rejected'} {launch.id}.")

    async def retry(self, launch: Launch, user: User) -> Reply:
        """Hold the launch for a new attempt, resuming, and queue it: a worker cancels the
        current attempt's job (a hang, say), and submits the new one once Slurm shows the
        old one gone (the worker's one retry rule; when it cannot be
        cancelled, the launch goes back to following it). Nothing here asks a cluster."""
        if launch.cancelled_by:
            return Reply(f"{launch.id} was cancelled by {health.canceller(launch)}.", error=True)
        if not launch.active or launch.phase not in (Phase.SUBMITTED, Phase.RUNNING):
            return Reply(
                f"{launch.id} is not running ({render.status_label(launch)[1]}).", error=True
            )
        old = launch.job_id

        def hold(stored: Launch) -> list[Event]:
            """A new attempt is on its way: stop following the old job, and queue it."""
            running = stored.phase in (Phase.SUBMITTED, Phase.RUNNING)
            if stored.job_id != old or not running or stored.cancelled_by:  # a cancel is final
                return []
            stored.attempts.append(
                Attempt(
                    number=len(stored.attempts) + 1,
                    reason=f"retry asked for by {user.name or user.id}",
                    resume=True,
                    checkpoints_at_start=len(stored.checkpoints),
                    held=True,
                    held_at=time.time(),
                    from_step=stored.progress.step,
                )
            )
            stored.phase = Phase.RETRYING
            text = (
                f"🔁 Retry asked for by <@{user.id}>: cancelling job {old}; a new attempt is "
                "submitted once Slurm shows it gone."
            )
            return [
                Event("thread", stored.id, text),
                Event("update", stored.id),
                Event("enqueue", stored.id),
            ]

        held, _ = await self.store.mutate(launch.id, hold)
        if held.phase != Phase.RETRYING or held.attempts[-1].job_id:
            return Reply(f"{launch.id} is not running any more.", error=True)
        return Reply(
            f"Retrying {launch.id}: job {old} is being cancelled, and a new attempt follows "
            "once it is gone. The thread shows each step."
        )


def _one_launch_keys(first: TrainRequest) -> None:
    """CommandError for a key that makes sense for one launch only, given to a sweep."""
    if first.cluster == AUTO:
        raise CommandError(
            "cluster=auto places one launch, not a sweep: give the sweep a cluster "
            "(cluster=a4), or start its members one by one with cluster=auto.",
            field="cluster",
        )
    if first.start_from is not None:
        raise CommandError(
            f"from={first.start_from} starts one launch from a checkpoint, not a sweep: "
            "leave from= out, or start each value as a launch of its own.",
            field="from",
        )
