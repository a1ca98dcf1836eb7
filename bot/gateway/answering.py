"""A worker's side of the asks (:mod:`bot.gateway.asks` is the asker's): take each ask
from the Redis list, check it (signed, fresh, used once: :mod:`bot.gateway.ask_wire`),
run it with this process's own keys as far as the launch's record and the config allow
(:mod:`bot.gateway.trust`), and answer it, signed and bound to the ask. A refused ask is
logged and answered with the reason; it never runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from bot.gateway import ask_wire as wire
from bot.gateway.on_cluster import Clusters
from bot.gateway.trust import estimate_user, recorded_jobs, recorded_log, shape_problem
from bot.lifecycle.launch import Launch
from bot.settings.logs import launch_fields
from bot.store.store import Store
from cluster.errors import ClusterError, SlurmCommandFailed
from cluster.slurm.sbatch import JobShape

log = logging.getLogger(__name__)

TAKE_WAIT_S = 1.0  # a worker looks for asks this often (and for its stop)


class Refused(ClusterError):
    """An ask the worker will not do: what it asked for is not the launch's or the person's."""


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
        return wire.CAPACITY.dump_python(await clusters.capacity(what.cluster), mode="json")
    if isinstance(what, wire.Images):
        return wire.IMAGES.dump_python(await clusters.images(what.cluster), mode="json")
    if isinstance(what, wire.AccountOf):
        account = await clusters.account(what.cluster, what.name)
        return wire.ACCOUNT.dump_python(account, mode="json")
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
    return wire.ESTIMATE.dump_python(found, mode="json")


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
