"""Cluster work for a process that holds no SSH key: the web role, Slack's listener.

The core speaks to the clusters through :class:`ClusterCalls`: a cluster's capacity
(/clusters, App Home), a cancel, a log's tail (/logs), a start estimate (/train),
what a login node says of a Unix user (``identity.from_email``) and a node's drain or
resume (the node ledger: on-call or an admin, asked again by the worker).
A process with keys (a worker, or ``--role all``) makes them itself
(:class:`bot.gateway.on_cluster.Clusters`); the web role makes them through
:class:`WorkerAsks`: each call is one entry on a Redis list that any worker takes
(:func:`bot.gateway.answering.serve_asks`), runs with its own keys (as the person, where the cluster
maps them) and answers on a list the asker waits on (:mod:`bot.gateway.answering`, the
worker's side). An ask no worker answers in
time is an error saying so. So the web role needs neither SSH key nor user CA,
and Slack's ack never waits on SSH (the Slack edge answers late asks ephemerally).

A worker believes an ask only as far as it must (:mod:`bot.gateway.ask_wire`): it is
signed with ``TRAINBOT_ASK_KEY``, bounded in size and age, and used once. Even then it
names only a launch or a cluster: the log a ``tail`` reads, the jobs a ``cancel`` ends
and whom either runs as come from the launch's record, checked against the config
(:mod:`bot.gateway.trust`); an ``estimate`` runs as the person's configured user, for a
shape the policy allows them. A refused ask is logged and answered with the reason.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from bot.gateway import ask_wire as wire
from bot.lifecycle.launch import Launch
from bot.store.store import Store
from cluster.errors import ClusterError, ClusterUnreachable, CommandTimeout, SlurmCommandFailed
from cluster.images.listing import ImageListing
from cluster.launching.jobs import MAX_TAIL_LINES
from cluster.preflight.discovery import ClusterCapacity
from cluster.site.accounts import Account
from cluster.site.nodes import NodeAction
from cluster.slurm.sbatch import JobShape, StartEstimate

log = logging.getLogger(__name__)

ASK_TIMEOUT_S = 60.0  # a tail or a capacity: SSH's own limits are shorter
_ERRORS: dict[str, type[ClusterError]] = {
    kind.__name__: kind
    for kind in (ClusterError, ClusterUnreachable, CommandTimeout, SlurmCommandFailed)
}


def error_of(answer: dict[str, Any]) -> ClusterError:
    """The error a worker's answer names, as the asker raises it (any other kind: a
    ClusterError with the answer's words)."""
    message, cluster = str(answer["error"]), str(answer.get("cluster", ""))
    kind_ = _ERRORS.get(str(answer.get("error_type")), ClusterError)
    if kind_ is SlurmCommandFailed:
        returncode = answer.get("returncode")
        if isinstance(returncode, int) and "command" in answer:
            return SlurmCommandFailed(
                command=str(answer["command"]), returncode=returncode,
                stderr=str(answer.get("stderr", "")), cluster=cluster,
            )  # fmt: skip
        return ClusterError(message, cluster=cluster)  # an answer without them: its words
    return kind_(message, cluster=cluster)


class ClusterCalls(Protocol):
    """What the core asks of the clusters."""

    @property
    def acts_as_people(self) -> bool: ...

    async def capacity(self, cluster: str) -> ClusterCapacity: ...

    async def images(self, cluster: str) -> ImageListing: ...

    async def cancel(self, launch: Launch, job_ids: list[str]) -> None: ...

    async def tail(self, launch: Launch, path: str, lines: int) -> str: ...

    async def delete_checkpoints(
        self, launch: Launch, directory: str, names: list[str], pattern: str
    ) -> None: ...

    async def account(self, cluster: str, name: str) -> Account: ...

    async def start_estimate(
        self,
        cluster: str,
        shape: JobShape,
        *,
        user_id: str,
        cluster_user: str,
        timeout_s: float,
        groups: frozenset[str] = frozenset(),
    ) -> StartEstimate: ...

    async def update_node(
        self,
        cluster: str,
        node: str,
        action: NodeAction,
        reason: str = "",
        *,
        user_id: str,
        cluster_user: str,
        groups: frozenset[str] = frozenset(),
    ) -> str: ...


class WorkerAsks:
    """:class:`ClusterCalls` made by the workers, for a process without SSH keys; each
    ask signed with ``key`` (the web and worker processes' TRAINBOT_ASK_KEY)."""

    acts_as_people = True  # the workers log in as people where a cluster maps them

    def __init__(self, store: Store, key: bytes) -> None:
        self.store = store
        self.key = key

    async def _ask(self, what: wire.What, *, cluster: str, timeout_s: float) -> Any:
        ask = wire.Ask.new(what, timeout_s)
        await self.store.asks.push_ask(wire.seal(ask, self.key))
        answer = await self._signed_answer(ask, timeout_s)
        if answer is None:
            raise CommandTimeout(
                f"no worker answered within {timeout_s:g} s (is a worker running?)",
                cluster=cluster,
            )
        if "error" in answer:
            raise error_of(answer)
        return answer.get("value")

    async def _signed_answer(self, ask: wire.Ask, timeout_s: float) -> dict[str, Any] | None:
        """The first answer a worker signed for ``ask`` within ``timeout_s``; anything else
        on its answer list (unsigned, signed for another ask) is logged and passed over."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            sealed = await self.store.asks.wait_answer(ask.id, left)
            if sealed is None:
                return None
            try:
                return wire.unseal_answer(ask.id, sealed, self.key)
            except wire.BadAnswer as exc:
                log.warning("an answer to ask %s (%s) passed over: %s", ask.id, ask.kind, exc)
                if wire.says_key_differs(sealed):
                    # A worker with another key cannot sign for us either: say so in our
                    # own words (never the unverified text) instead of waiting in vain.
                    raise ClusterError(wire.KEY_DIFFERS) from None
        return None

    async def capacity(self, cluster: str) -> ClusterCapacity:
        what = wire.Capacity(cluster=cluster)
        value = await self._ask(what, cluster=cluster, timeout_s=ASK_TIMEOUT_S)
        return wire.CAPACITY.validate_python(value)

    async def images(self, cluster: str) -> ImageListing:
        what = wire.Images(cluster=cluster)
        value = await self._ask(what, cluster=cluster, timeout_s=ASK_TIMEOUT_S)
        return wire.IMAGES.validate_python(value)

    async def cancel(self, launch: Launch, job_ids: list[str]) -> None:
        """Cancel the launch's jobs: the worker takes them from its record (the one
        written cancelled before this is asked), not from here."""
        what = wire.Cancel(launch=launch.id)
        await self._ask(what, cluster=launch.cluster, timeout_s=ASK_TIMEOUT_S)

    async def tail(self, launch: Launch, path: str, lines: int) -> str:
        """The launch's log: the worker reads the one its record names, not ``path``."""
        what = wire.Tail(launch=launch.id, lines=max(1, min(lines, MAX_TAIL_LINES)))
        return str(await self._ask(what, cluster=launch.cluster, timeout_s=ASK_TIMEOUT_S))

    async def delete_checkpoints(
        self, launch: Launch, directory: str, names: list[str], pattern: str
    ) -> None:
        """The worker deletes ``names`` where the launch's record says (not ``directory``)."""
        what = wire.DeleteCheckpoints(launch=launch.id, names=tuple(names))
        await self._ask(what, cluster=launch.cluster, timeout_s=ASK_TIMEOUT_S)

    async def account(self, cluster: str, name: str) -> Account:
        what = wire.AccountOf(cluster=cluster, name=name)
        value = await self._ask(what, cluster=cluster, timeout_s=ASK_TIMEOUT_S)
        return wire.ACCOUNT.validate_python(value)

    async def start_estimate(
        self,
        cluster: str,
        shape: JobShape,
        *,
        user_id: str,
        cluster_user: str,
        timeout_s: float,
        groups: frozenset[str] = frozenset(),
    ) -> StartEstimate:
        """As whom is the worker's to say (``cluster_user`` is not sent)."""
        what = wire.Estimate(
            cluster=cluster, user_id=user_id, groups=tuple(sorted(groups)),
            shape=wire.Shape.model_validate(wire.SHAPE.dump_python(shape)), timeout_s=timeout_s,
        )  # fmt: skip
        value = await self._ask(what, cluster=cluster, timeout_s=timeout_s)
        return wire.ESTIMATE.validate_python(value)

    async def update_node(
        self,
        cluster: str,
        node: str,
        action: NodeAction,
        reason: str = "",
        *,
        user_id: str,
        cluster_user: str,
        groups: frozenset[str] = frozenset(),
    ) -> str:
        """As whom is the worker's to say (``cluster_user`` is not sent), and it asks
        again whether the person may (on-call or admin, by the groups sent)."""
        what = wire.NodeUpdate(
            cluster=cluster, node=node, action=action, reason=reason, user_id=user_id,
            groups=tuple(sorted(groups)),
        )  # fmt: skip
        return str(await self._ask(what, cluster=cluster, timeout_s=ASK_TIMEOUT_S))
