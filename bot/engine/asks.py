"""Cluster work for a process that holds no SSH key: the web role, Slack's listener.

The core speaks to the clusters through :class:`ClusterCalls`: a cluster's capacity
(/clusters, App Home), a cancel, a log's tail (/logs), a start estimate (/train) and
what a login node says of a Unix user (``identity.from_email``).
A process with keys (a worker, or ``--role all``) makes them itself
(:class:`bot.engine.on_cluster.Clusters`); the web role makes them through
:class:`WorkerAsks`: each call is one entry on a Redis list that any worker takes
(:func:`serve_asks`), runs with its own keys (as the person, where the cluster
maps them) and answers on a list the asker waits on. An ask no worker answers in
time is an error saying so. So the web role needs neither SSH key nor user CA,
and Slack's ack never waits on SSH (the Slack edge answers late asks ephemerally).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any, Protocol

from pydantic import TypeAdapter

from bot.engine.on_cluster import Clusters
from bot.lifecycle.launch import Launch
from bot.store.store import Store
from cluster.accounts import Account
from cluster.discovery import ClusterCapacity
from cluster.errors import ClusterError, ClusterUnreachable, CommandTimeout, SlurmCommandFailed
from cluster.image_listing import ImageListing
from cluster.sbatch import JobShape, StartEstimate

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


class ClusterCalls(Protocol):
    """What the core asks of the clusters."""

    @property
    def acts_as_people(self) -> bool: ...

    async def capacity(self, cluster: str) -> ClusterCapacity: ...

    async def images(self, cluster: str) -> ImageListing: ...

    async def cancel(self, item: Launch, job_ids: list[str]) -> None: ...

    async def tail(self, item: Launch, path: str, lines: int) -> str: ...

    async def account(self, cluster: str, name: str) -> Account: ...

    async def start_estimate(
        self, cluster: str, shape: JobShape, *, user_id: str, cluster_user: str, timeout_s: float
    ) -> StartEstimate: ...


class WorkerAsks:
    """:class:`ClusterCalls` made by the workers, for a process without SSH keys."""

    acts_as_people = True  # the workers log in as people where a cluster maps them

    def __init__(self, store: Store) -> None:
        self.store = store

    async def _ask(self, kind: str, args: dict[str, Any], *, cluster: str, timeout_s: float) -> Any:
        ask_id = secrets.token_hex(12)
        until = time.time() + timeout_s
        await self.store.push_ask({"id": ask_id, "kind": kind, "until": until, "args": args})
        answer = await self.store.wait_answer(ask_id, timeout_s)
        if answer is None:
            raise CommandTimeout(
                f"no worker answered within {timeout_s:g} s (is a worker running?)",
                cluster=cluster,
            )
        if "error" in answer:
            kind_ = _ERRORS.get(str(answer.get("error_type")), ClusterError)
            raise kind_(str(answer["error"]), cluster=str(answer.get("cluster", "")))
        return answer.get("value")

    async def capacity(self, cluster: str) -> ClusterCapacity:
        args = {"cluster": cluster}
        value = await self._ask("capacity", args, cluster=cluster, timeout_s=ASK_TIMEOUT_S)
        return _CAPACITY.validate_python(value)

    async def images(self, cluster: str) -> ImageListing:
        args = {"cluster": cluster}
        value = await self._ask("images", args, cluster=cluster, timeout_s=ASK_TIMEOUT_S)
        return _IMAGES.validate_python(value)

    async def cancel(self, item: Launch, job_ids: list[str]) -> None:
        args = {"launch": item.id, "job_ids": job_ids}
        await self._ask("cancel", args, cluster=item.cluster, timeout_s=ASK_TIMEOUT_S)

    async def tail(self, item: Launch, path: str, lines: int) -> str:
        args = {"launch": item.id, "path": path, "lines": lines}
        return str(await self._ask("tail", args, cluster=item.cluster, timeout_s=ASK_TIMEOUT_S))

    async def account(self, cluster: str, name: str) -> Account:
        args = {"cluster": cluster, "name": name}
        value = await self._ask("account", args, cluster=cluster, timeout_s=ASK_TIMEOUT_S)
        return _ACCOUNT.validate_python(value)

    async def start_estimate(
        self, cluster: str, shape: JobShape, *, user_id: str, cluster_user: str, timeout_s: float
    ) -> StartEstimate:
        args = {
            "cluster": cluster, "shape": _SHAPE.dump_python(shape), "user_id": user_id,
            "cluster_user": cluster_user, "timeout_s": timeout_s,
        }  # fmt: skip
        value = await self._ask("estimate", args, cluster=cluster, timeout_s=timeout_s)
        return _ESTIMATE.validate_python(value)


async def serve_asks(store: Store, clusters: Clusters, stop: asyncio.Event) -> None:
    """A worker's loop: take each ask, run it with this process's keys, answer it. Asks
    run side by side (a slow tail holds up no estimate); one past its time is dropped."""
    running: set[asyncio.Task[None]] = set()
    try:
        while not stop.is_set():
            ask = await store.take_ask(TAKE_WAIT_S)
            if ask is None:
                continue
            if float(ask.get("until", 0)) < time.time():
                log.info("ask %s came too late; dropped", ask.get("kind"))
                continue
            task = asyncio.create_task(_answer(store, clusters, ask))
            running.add(task)
            task.add_done_callback(running.discard)
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def _answer(store: Store, clusters: Clusters, ask: dict[str, Any]) -> None:
    ask_id, kind, args = str(ask.get("id", "")), str(ask.get("kind", "")), ask.get("args", {})
    timeout_s = max(float(ask.get("until", 0)) - time.time(), 0.1)
    try:
        value = await asyncio.wait_for(_run(store, clusters, kind, args), timeout_s)
        answer: dict[str, Any] = {"value": value}
    except TimeoutError:
        answer = {"error": f"no answer within {timeout_s:.1f} s", "error_type": "CommandTimeout"}
    except ClusterError as exc:
        answer = {"error": exc.message, "error_type": type(exc).__name__, "cluster": exc.cluster}
    except Exception as exc:  # a bug here must not leave the asker waiting
        log.exception("ask %s failed inside trainbot", kind)
        answer = {"error": f"failed inside trainbot ({type(exc).__name__})"}
    await store.put_answer(ask_id, answer)


async def _run(store: Store, clusters: Clusters, kind: str, args: dict[str, Any]) -> Any:
    if kind == "capacity":
        return _CAPACITY.dump_python(await clusters.capacity(str(args["cluster"])), mode="json")
    if kind == "images":
        return _IMAGES.dump_python(await clusters.images(str(args["cluster"])), mode="json")
    if kind == "account":
        account = await clusters.account(str(args["cluster"]), str(args["name"]))
        return _ACCOUNT.dump_python(account, mode="json")
    if kind == "estimate":
        found = await clusters.start_estimate(
            str(args["cluster"]),
            _SHAPE.validate_python(args["shape"]),
            user_id=str(args["user_id"]),
            cluster_user=str(args["cluster_user"]),
            timeout_s=float(args["timeout_s"]),
        )
        return _ESTIMATE.dump_python(found, mode="json")
    item = await store.get(str(args["launch"]))
    if item is None:
        raise ClusterError(f"launch {args['launch']} is not known")
    if kind == "cancel":
        await clusters.cancel(item, [str(j) for j in args["job_ids"]])
        return None
    if kind == "tail":
        return await clusters.tail(item, str(args["path"]), int(args["lines"]))
    raise ClusterError(f"unknown ask {kind!r}")
