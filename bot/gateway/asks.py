"""Cluster work for a process that holds no SSH key: the web role, Slack's listener.

The core speaks to the clusters through :class:`ClusterCalls`: a cluster's capacity
(/clusters, App Home), a cancel, a log's tail (/logs), a start estimate (/train),
what a login node says of a Unix user (``identity.from_email``) and a node's drain or
resume (the node ledger: on-call or an admin, asked again by the worker).
A process with keys (a worker, or ``--role all``) makes them itself
(:class:`bot.gateway.on_cluster.Clusters`); the web role makes them through
:class:`WorkerAsks`: each call is one entry on a Redis list that any worker takes
(:func:`serve_asks`), runs with its own keys (as the person, where the cluster
maps them) and answers on a list the asker waits on. An ask no worker answers in
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

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import TypeAdapter

from bot.gateway import ask_wire as wire
from bot.gateway.on_cluster import Clusters
from bot.gateway.trust import estimate_user, recorded_jobs, recorded_log, shape_problem
from bot.lifecycle.launch import Launch
from bot.settings.logs import launch_fields
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
TAKE_WAIT_S = 1.0  # a worker looks for asks this often (and for its stop)
_CAPACITY = TypeAdapter(ClusterCapacity)
_ESTIMATE = TypeAdapter(StartEstimate)
_SHAPE = TypeAdapter(JobShape)
_ACCOUNT = TypeAdapter(Account)
_IMAGES = TypeAdapter(ImageListing)
_ERRORS: dict[str, type[ClusterError]] = {
    kind.__name__: kind
    for kind in (ClusterError, ClusterUnreachable, CommandTimeout, SlurmCommandFailed)
}


def error_answer(exc: ClusterError) -> dict[str, Any]:
    """A cluster error as a worker answers it, with what the asker needs to raise the same."""
    error_type = "ClusterError" if isinstance(exc, Refused) else type(exc).__name__
    answer: dict[str, Any] = {
        "error": exc.message,
        "error_type": error_type,
        "cluster": exc.cluster,
    }
    if isinstance(exc, SlurmCommandFailed):
        answer |= {"command": exc.command, "returncode": exc.returncode, "stderr": exc.stderr}
    return answer


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
        return _CAPACITY.validate_python(value)

    async def images(self, cluster: str) -> ImageListing:
        what = wire.Images(cluster=cluster)
        value = await self._ask(what, cluster=cluster, timeout_s=ASK_TIMEOUT_S)
        return _IMAGES.validate_python(value)

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
        return _ACCOUNT.validate_python(value)

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
            shape=wire.Shape.model_validate(_SHAPE.dump_python(shape)), timeout_s=timeout_s,
        )  # fmt: skip
        value = await self._ask(what, cluster=cluster, timeout_s=timeout_s)
        return _ESTIMATE.validate_python(value)

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


class Refused(ClusterError):
    """An ask the worker will not do: what it asked for is not the launch's or the person's."""


async def serve_asks(
    store: Store,
    clusters: Clusters,
    stop: asyncio.Event,
    key: bytes,
    redact: Callable[[str], str] | None = None,
) -> None:
    """A worker's loop: take each ask, check it (:func:`bot.gateway.ask_wire.unseal`, then
    used once), run it with this process's keys, answer it, signed and bound to the ask
    (:func:`bot.gateway.ask_wire.seal_answer`, ``redact`` applied first). Asks run side by
    side (a slow tail holds up no estimate); a bad one is logged, answered with why, and
    dropped."""
    running: set[asyncio.Task[None]] = set()
    try:
        while not stop.is_set():
            raw = await store.asks.take_ask(TAKE_WAIT_S)
            if raw is None:
                continue
            ask = await _checked(store, raw, key)
            if ask is None:
                continue
            task = asyncio.create_task(_answer(store, clusters, ask, key, redact))
            running.add(task)
            task.add_done_callback(running.discard)
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def _checked(store: Store, raw: str, key: bytes) -> wire.Ask | None:
    """The ask in ``raw`` when it is good and new; else None, logged (and answered with
    the reason when it names an id, so its asker does not wait in vain)."""
    try:
        ask = wire.unseal(raw, key)
    except wire.BadAsk as exc:
        log.warning("ask refused and dropped: %s", exc.reason)
        if exc.ask_id:
            refusal = {"error": f"the worker refused the ask: {exc.reason}", "error_type": ""}
            await store.asks.put_answer(exc.ask_id, wire.seal_answer(exc.ask_id, refusal, key))
        return None
    if not await store.asks.first_ask(ask.id, ask.until - time.time() + 1):
        log.warning("ask %s (%s) refused and dropped: its id was used already", ask.id, ask.kind)
        return None
    return ask


async def _answer(
    store: Store,
    clusters: Clusters,
    ask: wire.Ask,
    key: bytes,
    redact: Callable[[str], str] | None,
) -> None:
    timeout_s = max(ask.until - time.time(), 0.1)
    try:
        value = await asyncio.wait_for(_run(store, clusters, ask.what), timeout_s)
        answer: dict[str, Any] = {"value": value}
    except TimeoutError:
        answer = {"error": f"no answer within {timeout_s:.1f} s", "error_type": "CommandTimeout"}
    except ClusterError as exc:
        answer = error_answer(exc)
    except Exception as exc:  # a bug here must not leave the asker waiting
        log.exception("ask %s failed inside trainbot", ask.kind)
        answer = {"error": f"failed inside trainbot ({type(exc).__name__})"}
    await store.asks.put_answer(ask.id, wire.seal_answer(ask.id, answer, key, redact))


def _refuse(what: wire.What, cluster: str, why: str, launch_id: str = "") -> Refused:
    fields = launch_fields(launch_id, cluster=cluster)
    log.warning("ask %s refused: %s", what.kind, why, extra=fields)
    return Refused(why, cluster=cluster)


async def _run(store: Store, clusters: Clusters, what: wire.What) -> Any:
    if isinstance(what, wire.Capacity):
        return _CAPACITY.dump_python(await clusters.capacity(what.cluster), mode="json")
    if isinstance(what, wire.Images):
        return _IMAGES.dump_python(await clusters.images(what.cluster), mode="json")
    if isinstance(what, wire.AccountOf):
        account = await clusters.account(what.cluster, what.name)
        return _ACCOUNT.dump_python(account, mode="json")
    if isinstance(what, wire.Estimate):
        return await _estimate(clusters, what)
    if isinstance(what, wire.NodeUpdate):
        return await _node(clusters, what)
    launch = await store.launches.get(what.launch)
    if launch is None:
        raise _refuse(what, "", f"launch {what.launch} is not known", what.launch)
    if isinstance(what, wire.Cancel):
        if not launch.cancelled_by:
            why = f"{launch.id} is not cancelled in its record"
            raise _refuse(what, launch.cluster, why, launch.id)
        job_ids = recorded_jobs(launch)
        if job_ids:
            await clusters.cancel(launch, job_ids)  # as its person, the record's user checked
        return None
    if isinstance(what, wire.DeleteCheckpoints):
        return await _delete(clusters, launch, what)
    path = recorded_log(launch)
    if not path:
        raise Refused(f"{launch.id} has not recorded a log yet", cluster=launch.cluster)
    return await clusters.tail(launch, path, what.lines)  # checked there, read as its person


async def _estimate(clusters: Clusters, what: wire.Estimate) -> Any:
    profile = clusters.profile(what.cluster)
    shape = JobShape(**what.shape.model_dump())
    groups = frozenset(what.groups)
    policy = clusters.config.policy
    problem = shape_problem(policy, profile, shape, user_id=what.user_id, groups=groups)
    if problem:
        raise _refuse(what, what.cluster, f"no estimate: {problem}")
    found = await clusters.start_estimate(
        what.cluster,
        shape,
        user_id=what.user_id,
        cluster_user=estimate_user(profile, what.user_id),  # the config's word, not the ask's
        timeout_s=what.timeout_s,
    )
    return _ESTIMATE.dump_python(found, mode="json")


async def _node(clusters: Clusters, what: wire.NodeUpdate) -> Any:
    """Drain or resume for on-call or an admin (asked again here, with the policy of this
    worker), as the Unix user the config maps the person to, else the shared account."""
    config = clusters.config
    groups = frozenset(what.groups)
    oncall = config.alerts.oncall_usergroup
    if not (config.policy.is_admin(what.user_id, groups) or (oncall and oncall in groups)):
        raise _refuse(what, what.cluster, f"{what.user_id} is neither on-call nor an admin")
    profile = clusters.profile(what.cluster)
    return await clusters.update_node(
        what.cluster, what.node, what.action, what.reason, user_id=what.user_id,
        cluster_user=estimate_user(profile, what.user_id),
    )  # fmt: skip


async def _delete(clusters: Clusters, launch: Launch, what: wire.DeleteCheckpoints) -> None:
    """Only names the ended launch's record lists, in the directory its record names."""
    tracking = next(
        (a.tracking for a in reversed(launch.attempts) if a.tracking and a.tracking.checkpoint_dir),
        None,
    )
    if launch.active or tracking is None or not set(what.names) <= set(launch.checkpoints):
        why = f"{launch.id} has no such checkpoints to delete"
        raise _refuse(what, launch.cluster, why, launch.id)
    await clusters.delete_checkpoints(
        launch, tracking.checkpoint_dir, list(what.names), tracking.checkpoint_pattern
    )
