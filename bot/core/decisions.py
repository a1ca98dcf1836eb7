"""What a person's word does to a launch already made: cancel it, approve or reject
it, retry it; for a sweep, cancel, approve or reject it whole."""

from __future__ import annotations

import time

from bot.core.lookup import Lookup
from bot.gateway.asks import ClusterCalls
from bot.lifecycle import phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.store.store import Store
from bot.text.actions import ACTION_APPROVE, ACTION_CANCEL, ACTION_REJECT
from bot.text.front import Reply
from bot.text.mrkdwn import escape
from bot.wording import endings, render, thread
from cluster.errors import ClusterError
from commands.access import may_approve, may_reject
from commands.context import CommandContext, User
from commands.request_fields import JobRef


class Decisions:
    """Cancel, approve, reject and retry, each written to the launch's record first."""

    def __init__(
        self, store: Store, calls: ClusterCalls, context: CommandContext, lookup: Lookup
    ) -> None:
        self.store = store
        self.calls = calls
        self.context = context
        self.lookup = lookup

    async def cancel(self, launch: Launch, user: User) -> Reply:
        """A cancel is final. The person's intent is written first (who, when); from then on
        the launch ends CANCELLED whatever its job's log shows, and nothing is retried. The
        job to ``scancel`` is read from the record after that write, so a job a worker
        recorded meanwhile is cancelled too; one a worker records later, it cancels itself."""
        if not launch.active:
            return Reply(f"{launch.id} has already ended ({render.status_label(launch)[1]}).")

        facts = phases.Facts(now=time.time(), by=user.id)
        stored, events = await self.store.launches.mutate(
            launch.id, phases.step(phases.cancel, facts)
        )
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
            failed = {"move": "cancel_failed", "job": job_id, "cluster": stored.cluster}
            said = Event("thread", launch.id, data={**failed, "error": str(exc)})
            await self.store.launches.mutate(launch.id, lambda s: [said])
            return Reply(thread.line(said), error=True)
        return Reply(f"Cancelled Slurm job {job_id}. The thread will show the final state.")

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

        move = phases.approve if approved else phases.reject
        await self.store.launches.mutate(launch.id, phases.step(move, phases.Facts(by=user.id)))
        return Reply(f"{'Approved' if approved else 'Rejected'} {launch.id}.")

    async def retry(self, launch: Launch, user: User) -> Reply:
        """Hold the launch for a new attempt, resuming, and queue it: a worker cancels the
        current attempt's job (a hang, say), and submits the new one once Slurm shows the
        old one gone (Retry's one rule, bot/lifecycle/phases/; when it cannot be
        cancelled, the launch goes back to following it). Nothing here asks a cluster."""
        if launch.cancelled_by:
            return Reply(
                f"{launch.id} was cancelled by {endings.who_cancelled(launch.cancelled_by)}.",
                error=True,
            )
        if not launch.active or launch.phase not in (Phase.SUBMITTED, Phase.RUNNING):
            return Reply(
                f"{launch.id} is not running ({render.status_label(launch)[1]}).", error=True
            )
        old = launch.job_id

        facts = phases.Facts(now=time.time(), by=user.id, by_name=user.name, job_id=old)
        held, _ = await self.store.launches.mutate(launch.id, phases.step(phases.retry, facts))
        if held.phase != Phase.RETRYING or held.attempts[-1].job_id:
            return Reply(f"{launch.id} is not running any more.", error=True)
        return Reply(
            f"Retrying {launch.id}: job {old} is being cancelled, and a new attempt follows "
            "once it is gone. The thread shows each step."
        )

    async def on_sweep_action(self, action_id: str, sweep_id: str, user: User) -> Reply:
        """Cancel a whole sweep (after its confirm dialog), or approve or reject it whole."""
        verb = "cancel" if action_id == ACTION_CANCEL else ""  # approvers: checked per member
        sweep, members = await self.lookup.sweep_members(sweep_id, user, verb)
        live = [m for m in members if m is not None and m.active]
        if action_id == ACTION_CANCEL:
            for member in live:
                await self.lookup.actable(JobRef(id=member.id), user, "cancel")
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
