"""Who is asking: the person's user groups (asked of the front end, cached) and
time zone, as the :class:`commands.context.User` every command is checked as."""

from __future__ import annotations

import logging
import time

from bot.gateway.on_cluster import Clusters
from bot.text.front import Front, Incoming
from commands.context import CommandContext, User

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


class Directory:
    """The members of the policy's user groups, as the front end last said them."""

    def __init__(self, context: CommandContext, clusters: Clusters, front: Front | None) -> None:
        self.context = context
        self.clusters = clusters
        self.front = front
        self._groups: dict[str, tuple[float, set[str]]] = {}
        self.unconfirmed: set[str] = set()  # privileged groups Slack did not answer for
        self.unanswered: set[str] = set()  # any group whose members Slack did not say last time

    def forget(self, group: str) -> None:
        """A user group's members changed: ask Slack again at the next check."""
        self._groups.pop(group, None)

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
        if oncall:  # on-call acts on launches that paged them, and sees the node ledger
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
                    self.unanswered.add(group)
                    if group in privileged:  # fail closed: a removed admin keeps nothing
                        self.unconfirmed.add(group)
                        continue
                else:
                    self._groups[group] = (time.monotonic(), members)
                    self.unconfirmed.discard(group)
                    self.unanswered.discard(group)
            if user_id in members:
                found.add(group)
        return found

    async def team_members(self, group: str) -> list[str]:
        """The members of a Slack user group, as Slack says now (none without a front)."""
        return [] if self.front is None else list(await self.front.usergroup_members(group))

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
