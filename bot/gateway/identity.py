"""Whose Unix user a person's launches run as on a cluster with ``identity``.

A name listed in ``identity.users`` is the admins' word. A name taken from the
person's Slack profile email (``from_email``) must pass every check, or the person
is refused and nothing runs: the email is one Slack has confirmed (the front end
gives no other), in one of ``email_domains``; the name is not root, not the shared
account, not a name ``users`` gives someone else; and the login node says it is a
person's account (:mod:`cluster.site.accounts`: it exists, its uid is in the site's range
for people), asked over the shared connection and remembered for a while.

This is decided where the person asks (``/train``) and written on the launch; the
record is then only a claim. Whoever acts on it checks it against the config again
(:func:`bot.gateway.trust.user_problem`, in ``Clusters.profile_for``), and the user CA
signs no reserved name (:mod:`cluster.ssh.principals`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from bot.gateway.asks import ClusterCalls
from bot.gateway.on_cluster import Clusters
from bot.text.front import Front
from cluster.errors import ClusterError
from commands.context import User
from commands.errors import CommandError

log = logging.getLogger(__name__)

ACCOUNT_TTL_S = 600.0  # what the login node said about a name is asked again after this


class NoUser(CommandError):
    """A person refused a Unix user. ``str(error)`` is plain text; ``facts`` say it for
    the front end (bot.wording.refusals): ``reason``, and ``ask``, whom to ask (the
    admins' and on-call's Slack ids) to add them to ``cluster``'s identity map."""

    def __init__(self, message: str, ask: dict[str, Any]) -> None:
        cluster = ask.get("cluster", "")
        super().__init__(
            f"{message} Ask a trainbot admin to add you under clusters.{cluster}.identity.users."
        )
        self.facts: dict[str, Any] = {"reason": message, "ask": ask}


class People:
    """Maps people to Unix users per cluster; remembers the login nodes' answers."""

    def __init__(self, clusters: Clusters, front: Front | None, calls: ClusterCalls) -> None:
        self.clusters = clusters
        self.calls = calls  # how this process asks a login node (see bot.gateway.asks)
        self.front = front
        self._accounts: dict[tuple[str, str], tuple[float, str]] = {}

    def who_to_ask(self, cluster: str) -> dict[str, Any]:
        """Whom a person without a user on ``cluster`` asks, as facts: the admins the
        config names (Slack user and group ids) and the on-call user group."""
        config = self.clusters.config
        admins = config.policy.admins
        return {
            "users": [u for u in admins.users if u != "*"],
            "groups": [g for g in admins.groups if g != "*"],
            "oncall": config.alerts.oncall_usergroup or "",
            "cluster": cluster,
        }

    async def cluster_user(self, cluster: str, user: User) -> str:
        """The Unix user ``user``'s launches run as on ``cluster`` ("": the shared account);
        a CommandError when nothing may map them and the cluster refuses the unmapped."""
        profile = self.clusters.profile(cluster)
        identity = profile.identity
        if identity is None:
            return ""
        email = None
        if identity.from_email and user.id not in identity.users and self.front is not None:
            try:
                email = await self.front.user_email(user.id)
            except Exception as exc:  # refused below, with the reason in the log
                log.warning("could not read the profile email of %s: %s", user.id, exc)
        name, why = identity.resolve(user.id, email, profile.login.user)
        if name is not None and user.id not in identity.users:
            why = await self._account_problem(cluster, name)
            name = None if why else name
        if name is not None:
            return name
        ask = self.who_to_ask(cluster)
        if why:  # an email that names no one it may: refused, whatever unmapped says
            log.warning("refused %s a user on %s: %s", user.id, cluster, why)
            raise NoUser(
                f"You have no user on {cluster}: trainbot runs each person's jobs there as "
                f"their own Unix user, and {why} (Slack user {user.id}).",
                ask,
            )
        if identity.unmapped == "shared":
            return ""
        how = (
            "its configuration names none for you and your Slack profile's email gives none"
            if identity.from_email
            else "its configuration names none for you"
        )
        raise NoUser(
            f"You have no user on {cluster}: trainbot runs each person's jobs there as their "
            f"own Unix user, and {how} (Slack user {user.id}).",
            ask,
        )

    async def _account_problem(self, cluster: str, name: str) -> str:
        """Why ``name`` is not a person's account on the cluster's login node ("": it is)."""
        now = time.monotonic()
        known = self._accounts.get((cluster, name))
        if known is not None and now - known[0] < ACCOUNT_TTL_S:
            return known[1]
        try:
            account = await self.calls.account(cluster, name)
        except ClusterError as exc:  # not remembered: asked again next time
            log.warning("could not look up %s on %s: %s", name, cluster, exc)
            return f"trainbot could not check that {name} is a person's account there, try again"
        problem = account.problem()
        self._accounts[(cluster, name)] = (now, problem)
        return problem
