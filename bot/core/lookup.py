"""Finding the launch (or sweep) a command or button names, and whether the person
asking may read it or act on it."""

from __future__ import annotations

import time

from bot.gateway.on_cluster import Clusters
from bot.lifecycle.launch import Launch, Sweep
from bot.store.store import Store
from commands.access import may_act_as_oncall, may_view_logs
from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.policy import may_manage
from commands.request_fields import JobRef


class Lookup:
    """Launches by reference (launch id, or Slurm job id and cluster), checked against
    the policy for the person asking."""

    def __init__(self, store: Store, clusters: Clusters, context: CommandContext) -> None:
        self.store = store
        self.clusters = clusters
        self.context = context

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
            launch = await self.store.launches.get(ref.id)
            if launch is None:
                raise CommandError(await self._gone(ref.id))
            return launch
        found = await self.store.history.find_job(ref.id)
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
        launch = await self.store.launches.get(found[0][1])
        if launch is None:
            raise CommandError(await self._gone(found[0][1]))
        return launch

    async def _gone(self, launch_id: str) -> str:
        """Why there is no record of ``launch_id``: unknown, or ended longer ago than kept."""
        entry = await self.store.history.finished(launch_id)
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

    async def sweep_members(
        self, sweep_id: str, user: User, verb: str = ""
    ) -> tuple[Sweep, list[Launch | None]]:
        """The sweep and its members' records; CommandError when it is unknown, or (with
        ``verb``) not the person's to act on, as for one of its launches."""
        sweep = await self.store.launches.get_sweep(sweep_id)
        members = [] if sweep is None else await self.store.launches.get_many(sweep.members)
        first = next((m for m in members if m is not None), None)
        if sweep is None or first is None:
            raise CommandError(f"No sweep {sweep_id} (it may have expired). /jobs lists yours.")
        if verb:
            await self.actable(JobRef(id=first.id), user, verb)
        return sweep, members
