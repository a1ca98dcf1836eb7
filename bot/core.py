"""The bot's core: what each command and button does.

Fast paths only: parse, check policy, write to Redis and answer. Launching is
the workers' job and watching the poller's. A /train asks Slurm only when its job
would start (``sbatch --test-only``, one round trip, at most
``start_estimate_timeout_s``); /cancel, /logs, /attach and /clusters make one SSH
round trip.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import replace
from typing import Literal

from pydantic import ValidationError

from bot import answers, health, home, pipelines, render, usage, watching
from bot.clusters import Clusters
from bot.cost import START_ESTIMATE_TIMEOUT_S, StartEstimates, appraise
from bot.front import GROUP_EVENTS, HOME_EVENT, Front, Incoming, Reply
from bot.identity import NoUser, People
from bot.launches import Attempt, Launch, Phase
from bot.logs import launch_fields
from bot.redact import Redactor
from bot.slack_text import (
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
from bot.store import BudgetGuard, Event, OverBudget, OverTeamBudget, Store
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
from commands.jobs import parse_job_ref
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


CANCEL_CONFIRM_TRIES = 15  # seconds to wait for a cancelled job to leave the queue
HELD_RETRY_CHECK_S = 120.0  # a Retry interrupted before its old job was confirmed gone
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


class Core:
    def __init__(
        self, store: Store, clusters: Clusters, context: CommandContext, front: Front | None = None
    ) -> None:
        self.store = store
        self.clusters = clusters
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
        self.people = People(clusters, front)

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
        blocks = home.home_blocks(active, recent, capacity, links, now=now)
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
            *(self.clusters.capacity(name) for name in stale), return_exceptions=True
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
        if isinstance(request, CancelRequest):
            launch = await self.actable(request.job, user, "cancel")
            return answers.confirm_cancel(launch)
        if isinstance(request, LogsRequest):
            launch = await self.readable(request.job, user)
            await self.slow_down(user.id, "commands")
            if request.plot:
                return await answers.plot(launch)
            return await answers.logs(self.clusters, launch, request.lines or 50)
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
        if incoming.action_id == ACTION_CANCEL:
            return await self.cancel(await self.actable(ref, user, "cancel"), user)
        if incoming.action_id == ACTION_LOGS:
            launch = await self.readable(ref, user)
            await self.slow_down(user.id, "commands")
            return await answers.logs(self.clusters, launch, 50)
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
            asked = (now, asyncio.ensure_future(self.clusters.capacity(name)))
            self._clusters_asked[name] = asked
        return await asyncio.shield(asked[1])

    # -- /train ------------------------------------------------------------

    async def train(
        self, request: TrainRequest | InteractiveRequest, incoming: Incoming, user: User
    ) -> Reply:
        active, _ = await self.store.active_counts(user.id)
        decision = decide(
            self.context.policy,
            request,
            user_id=user.id,
            group_ids=user.groups,
            active_launches=active,
        )
        if not decision.allowed:
            return Reply(decision.reason, error=True)
        await self.slow_down(user.id, "launches")
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
        if launch.request.at or launch.request.after:  # its budget is checked again then
            launch.groups = sorted(user.groups)
        if launch.request.after:
            launch.waits_for = await self.parent_of(launch.request, user)
        text = pipelines.waits_text(launch)
        return f"\n⏳ It {text}." if text else ""

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
        if stored.cluster_user and not self.clusters.pool.act_as_people:
            # This process holds no key to act as the person (the web role): the poller,
            # which does, cancels the job at its next poll.
            return Reply(
                f"Cancelling Slurm job {job_id}: it is cancelled as {stored.cluster_user} at the "
                "next poll. The thread will show the final state."
            )
        try:
            await self.clusters.cancel(stored, [job_id])
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
        """Cancel the current attempt (a hang, say), confirm it is gone, then queue a new
        one, resuming. When the old job cannot be cancelled, nothing new is queued."""
        if launch.cancelled_by:
            return Reply(f"{launch.id} was cancelled by {health.canceller(launch)}.", error=True)
        if not launch.active or launch.phase not in (Phase.SUBMITTED, Phase.RUNNING):
            return Reply(
                f"{launch.id} is not running ({render.status_label(launch)[1]}).", error=True
            )
        old, before = launch.job_id, launch.phase

        def hold(stored: Launch) -> list[Event]:
            """A new attempt is on its way: stop following the old job (not queued yet)."""
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
                    from_step=stored.progress.step,
                )
            )
            stored.phase = Phase.RETRYING
            # Should this process die before the old job is confirmed gone, a worker takes
            # the launch up later and checks on the old job itself.
            later = {"due": time.time() + HELD_RETRY_CHECK_S}
            return [Event("update", stored.id), Event("enqueue", stored.id, data=later)]

        held, _ = await self.store.mutate(launch.id, hold)
        if held.phase != Phase.RETRYING or held.attempts[-1].job_id:
            return Reply(f"{launch.id} is not running any more.", error=True)
        why = await self._cancel_and_confirm(launch, old)
        if why:

            def revert(stored: Launch) -> list[Event]:
                if stored.phase != Phase.RETRYING or not stored.attempts[-1].held:
                    return []
                stored.attempts.pop()
                stored.phase = before
                text = (
                    f"⚠️ Retry asked for by <@{user.id}>, but job {old} could not be cancelled "
                    f"({escape(why)}); it keeps running and no second job was submitted."
                )
                return [Event("thread", stored.id, text), Event("update", stored.id)]

            await self.store.mutate(launch.id, revert)
            return Reply(
                f"Job {old} could not be cancelled ({escape(why)}); not retried.", error=True
            )

        def go(stored: Launch) -> list[Event]:
            if stored.phase != Phase.RETRYING or not stored.attempts[-1].held:
                return []  # a cancel meanwhile made it DONE: no new attempt
            stored.attempts[-1].held = False
            stored.attempts[-2].close(time.time())  # billed until now, not until the launch ends
            text = f"🔁 Retry asked for by <@{user.id}>: cancelled job {old}, submitting a new one."
            return [
                Event("thread", stored.id, text),
                Event("enqueue", stored.id),
                Event("update", stored.id),
            ]

        await self.store.mutate(launch.id, go)
        return Reply(f"Cancelled job {old}; a new attempt of {launch.id} is queued.")

    async def _cancel_and_confirm(self, launch: Launch, job_id: str) -> str:
        """``scancel`` the job and wait until Slurm shows it ended; "" or why not."""
        try:
            await self.clusters.cancel(launch, [job_id])
            for _ in range(CANCEL_CONFIRM_TRIES):
                jobs = {j.job_id: j for j in await self.clusters.find(launch)}
                if job_id not in jobs or not jobs[job_id].active:
                    return ""
                await asyncio.sleep(1.0)
        except ClusterError as exc:
            return str(exc)
        return f"Slurm still shows it running after {CANCEL_CONFIRM_TRIES} s"
