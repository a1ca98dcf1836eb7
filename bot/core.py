"""The bot's core: what each command and button does.

Fast paths only: parse, check policy, write to Redis and answer. Launching is
the workers' job and watching the poller's; this module never waits on Slurm
for a /train. /cancel, /logs, /attach and /clusters make one SSH round trip.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from pydantic import ValidationError

from bot import answers, render
from bot.clusters import Clusters
from bot.front import Front, Incoming, Reply
from bot.launches import Attempt, Launch, Phase
from bot.slack_text import (
    ACTION_APPROVE,
    ACTION_ATTACH,
    ACTION_CANCEL,
    ACTION_LOGS,
    ACTION_REJECT,
    ACTION_RETRY,
    ACTION_USE_PARTITION,
    escape,
)
from bot.store import Event, Store
from cluster.errors import TrainbotError
from commands.context import CommandContext, User
from commands.dispatch import parse_command
from commands.errors import CommandError
from commands.help import help_text, recipes_text
from commands.policy import decide, may_approve
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
)

log = logging.getLogger(__name__)

INLINE_LOG_CHARS = 2800
GROUPS_TTL_S = 300.0


class Core:
    def __init__(
        self, store: Store, clusters: Clusters, context: CommandContext, front: Front | None = None
    ) -> None:
        self.store = store
        self.clusters = clusters
        self.context = context
        self.front = front
        self._groups: dict[str, tuple[float, set[str]]] = {}

    async def __call__(self, incoming: Incoming) -> Reply:
        try:
            if incoming.action_id:
                return await self.on_action(incoming)
            return await self.on_command(incoming)
        except CommandError as exc:  # its text may quote what the user typed
            return Reply(escape(str(exc)), error=True)
        except TrainbotError as exc:
            log.warning("command %s failed: %s", incoming.command or incoming.action_id, exc)
            return Reply(f"That did not work: {escape(str(exc))}", error=True)

    async def user(self, incoming: Incoming) -> User:
        return User(
            id=incoming.user_id,
            name=incoming.user_name,
            groups=frozenset(await self.groups_of(incoming.user_id)),
        )

    async def groups_of(self, user_id: str) -> set[str]:
        """The policy's user groups this user is in (members asked of the front end, cached)."""
        policy = self.context.policy
        wanted = {g for rule in policy.rules for g in rule.groups if g != "*"} | set(
            policy.admins.groups
        ) - {"*"}
        found = set()
        for group in wanted:
            stamp, members = self._groups.get(group, (0.0, set()))
            if time.monotonic() - stamp > GROUPS_TTL_S and self.front is not None:
                try:
                    members = set(await self.front.usergroup_members(group))
                except Exception:  # the group stays as last known
                    log.warning("could not list members of user group %s", group)
                self._groups[group] = (time.monotonic(), members)
            if user_id in members:
                found.add(group)
        return found

    async def on_command(self, incoming: Incoming) -> Reply:
        user = await self.user(incoming)
        request = parse_command(incoming.command, incoming.text, user=user, context=self.context)
        if isinstance(request, TrainRequest | InteractiveRequest):
            return await self.train(request, incoming, user)
        if isinstance(request, HelpRequest):
            return Reply(help_text(self.context, request.topic))
        if isinstance(request, RecipesRequest):
            return Reply(recipes_text(self.context, request.workload))
        if isinstance(request, JobsRequest):
            return await answers.jobs(self.store, user, all_users=request.all_users)
        if isinstance(request, ClustersRequest):
            return await answers.cluster_list(self.clusters, request.cluster)
        if isinstance(request, CancelRequest):
            launch = await self.owned(request.job, user, "cancel")
            return answers.confirm_cancel(launch)
        if isinstance(request, LogsRequest):
            if request.plot:
                return answers.plot(await self.find(request.job))
            return await answers.logs(
                self.clusters, await self.find(request.job), request.lines or 50
            )
        if isinstance(request, AttachRequest):
            return answers.attach(self.clusters, await self.owned(request.job, user, "attach to"))
        raise CommandError("That command is not handled yet.")

    async def on_action(self, incoming: Incoming) -> Reply:
        user = await self.user(incoming)
        if incoming.action_id == ACTION_USE_PARTITION:
            return await self.use_partition(incoming, user)
        ref = JobRef(id=incoming.action_value)
        if incoming.action_id == ACTION_CANCEL:
            return await self.cancel(await self.owned(ref, user, "cancel"), user)
        if incoming.action_id == ACTION_LOGS:
            return await answers.logs(self.clusters, await self.find(ref), 50)
        if incoming.action_id == ACTION_ATTACH:
            return answers.attach(self.clusters, await self.owned(ref, user, "attach to"))
        if incoming.action_id in (ACTION_APPROVE, ACTION_REJECT):
            return await self.approve(
                await self.find(ref), user, incoming.action_id == ACTION_APPROVE
            )
        if incoming.action_id == ACTION_RETRY:
            return await self.retry(await self.owned(ref, user, "retry"), user)
        return Reply(f"That button ({escape(incoming.action_id)}) is not handled yet.", error=True)

    # -- /train ------------------------------------------------------------

    async def train(
        self, request: TrainRequest | InteractiveRequest, incoming: Incoming, user: User
    ) -> Reply:
        active = await self.store.active_count(user.id)
        decision = decide(
            self.context.policy,
            request,
            user_id=user.id,
            group_ids=user.groups,
            active_launches=active,
        )
        if not decision.allowed:
            return Reply(decision.reason, error=True)
        # Its thread goes where /train was typed: refuse now if no one could see it there.
        problem = await self.front.can_post(incoming.channel_id) if self.front else ""
        if problem:
            return Reply(problem, error=True)
        launch = Launch(
            request=request, user_id=user.id, user_name=user.name, channel=incoming.channel_id
        )
        if decision.needs_approval:
            launch.phase = Phase.AWAITING_APPROVAL
            ask = (
                f"✋ <@{user.id}> asks for {render.request_text(launch)}. "
                f"{escape(decision.reason)} An admin, or anyone else who may launch on "
                f"{launch.cluster}, can approve it."
            )
            events = [
                Event("parent", launch.id),
                Event("thread", launch.id, ask, data={"buttons": ["approve", "reject"]}),
            ]
            await self.store.create(launch, events, enqueue=False)
            return Reply(
                f"{launch.id} needs a second person's approval ({escape(decision.reason)}); "
                "asked in its thread."
            )
        queued = f"Queued by <@{user.id}>: {render.request_text(launch)}"
        await self.store.create(
            launch, [Event("parent", launch.id), Event("thread", launch.id, queued)]
        )
        log.info("launch %s queued by %s: %s", launch.id, user.id, request.to_text())
        return Reply(render.queued_reply(launch, self.clusters.profiles.get(launch.cluster)))

    # -- finding launches ----------------------------------------------------

    async def find(self, ref: JobRef) -> Launch:
        if ref.is_launch_id:
            launch = await self.store.get(ref.id)
            if launch is None:
                raise CommandError(f"No launch {ref.id}. /jobs lists yours.")
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
            raise CommandError(f"Launch {found[0][1]} is gone.")
        return launch

    async def owned(self, ref: JobRef, user: User, verb: str) -> Launch:
        launch = await self.find(ref)
        if launch.user_id != user.id and not self.context.policy.is_admin(user.id, user.groups):
            who = launch.user_name or launch.user_id
            raise CommandError(
                f"Only {who} (who launched {launch.id}) or a trainbot admin may {verb} it."
            )
        return launch

    # -- /jobs, /clusters --------------------------------------------------------

    # -- /cancel, /logs, /attach -------------------------------------------------

    async def cancel(self, launch: Launch, user: User) -> Reply:
        if not launch.active:
            return Reply(f"{launch.id} has already ended ({render.status_label(launch)[1]}).")
        job_ids = [a.job_id for a in launch.attempts if a.job_id]
        if job_ids:
            await self.clusters.cancel(launch.cluster, job_ids[-1:])

        def cancelled(stored: Launch) -> list[Event]:
            text = f"🚫 Cancelled by <@{user.id}>."
            if stored.phase in (Phase.QUEUED, Phase.PREFLIGHT, Phase.RETRYING) or not stored.job_id:
                stored.phase, stored.outcome, stored.detail = Phase.DONE, "CANCELLED", text
            return [Event("thread", stored.id, text), Event("update", stored.id)]

        await self.store.mutate(launch.id, cancelled)
        what = f"Slurm job {job_ids[-1]}" if job_ids else launch.id
        return Reply(f"Cancelled {what}. The thread will show the final state.")

    async def use_partition(self, incoming: Incoming, user: User) -> Reply:
        """The [Use a4] button under a refused launch: the same request on that partition."""
        launch_id, _, partition = incoming.action_value.partition(":")
        launch = await self.owned(JobRef(id=launch_id), user, "re-run")
        request = launch.request.model_copy(update={"partition": partition})
        try:  # the value came back from outside: check it as if typed
            again = type(launch.request).model_validate(request.model_dump())
        except ValidationError:
            raise CommandError(f"{escape(partition)!r} is not a partition name.") from None
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
            )
        else:  # the asker may withdraw; others need the same standing as to approve
            decision = may_approve(
                self.context.policy,
                user_id=user.id,
                group_ids=user.groups,
                owner_id="",
                cluster=launch.cluster,
            )
        if not decision.allowed:
            return Reply(escape(decision.reason), error=True)

        def decide_launch(stored: Launch) -> list[Event]:
            if stored.phase != Phase.AWAITING_APPROVAL:
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
        """Cancel the current attempt (a hang, say) and queue a new one, resuming."""
        if not launch.active or launch.phase not in (Phase.SUBMITTED, Phase.RUNNING):
            return Reply(
                f"{launch.id} is not running ({render.status_label(launch)[1]}).", error=True
            )
        old = launch.job_id

        def again(stored: Launch) -> list[Event]:
            if stored.job_id != old or stored.phase not in (Phase.SUBMITTED, Phase.RUNNING):
                return []
            stored.attempts.append(
                Attempt(
                    number=len(stored.attempts) + 1,
                    reason=f"retry asked for by {user.name or user.id}",
                    resume=True,
                    checkpoints_at_start=len(stored.checkpoints),
                )
            )
            stored.phase = Phase.RETRYING
            text = f"🔁 Retry asked for by <@{user.id}>: cancelled job {old}, submitting a new one."
            return [
                Event("thread", stored.id, text),
                Event("enqueue", stored.id),
                Event("update", stored.id),
            ]

        # The new attempt first, so the poller never takes the cancelled job for the end.
        await self.store.mutate(launch.id, again)
        await self.clusters.cancel(launch.cluster, [old])
        return Reply(f"Cancelled job {old}; a new attempt of {launch.id} is queued.")
