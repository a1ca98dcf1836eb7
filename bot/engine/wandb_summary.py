"""A finished launch's W&B run summary, read back with a read-only key.

When ``TRAINBOT_WANDB_READ_KEY`` is set, the poller asks W&B's public GraphQL API
(``POST <TRAINBOT_WANDB_API_URL>/graphql``, HTTP basic auth ``api:<key>``, as the
``wandb`` SDK's public ``Api`` does) for the run the launch's log linked
(``https://<host>/<entity>/<project>/runs/<run id>``):

    query Run($entity: String!, $project: String!, $name: String!) {
      project(name: $project, entityName: $entity) { run(name: $name) { state summaryMetrics } }
    }

``summaryMetrics`` is a JSON string of the run's summary; its numeric top-level values
(W&B's own ``_``-prefixed keys left out) are said once in the launch's thread after its
final line. This was built against the API's published shape and tested against a local
stand-in server only, never against the real service. The key is a secret: it is sent
only in the Authorization header and never logged.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import re
from typing import Any, Protocol

import aiohttp
from pydantic import SecretStr

from bot.lifecycle import sweeps
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.settings.env import Settings
from bot.store.store import Store

log = logging.getLogger(__name__)

RUN_QUERY = (
    "query Run($entity: String!, $project: String!, $name: String!) {\n"
    "  project(name: $project, entityName: $entity) { run(name: $name) { state summaryMetrics } }\n"
    "}"
)
TIMEOUT_S = 10.0
_LINK_RE = re.compile(
    r"^https://[A-Za-z0-9.-]+(?::\d+)?/(?P<entity>[\w.-]+)/(?P<project>[\w.-]+)/runs/(?P<run>[\w-]+)/?$"
)


class RunSummaries(Protocol):
    """The seam: a run link in, its numeric summary out (None when not read)."""

    async def summary(self, link: str) -> dict[str, float] | None: ...


def parse_run_link(link: str) -> tuple[str, str, str] | None:
    """(entity, project, run id) of a W&B run page link, None for anything else."""
    found = _LINK_RE.match(link)
    return (found["entity"], found["project"], found["run"]) if found else None


def parse_summary(payload: Any) -> dict[str, float] | None:
    """The numeric summary in a GraphQL answer; None when it names no run or has errors."""
    if not isinstance(payload, dict) or payload.get("errors"):
        return None
    run = ((payload.get("data") or {}).get("project") or {}).get("run")
    if not isinstance(run, dict):
        return None
    raw = run.get("summaryMetrics") or "{}"
    try:
        summary = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return None
    if not isinstance(summary, dict):
        return None
    metrics: dict[str, float] = {}
    for key, value in summary.items():
        if not isinstance(key, str) or key.startswith("_") or isinstance(value, bool):
            continue
        if isinstance(value, int | float) and math.isfinite(value):
            metrics[key[:64]] = float(value)
    return metrics


class WandbReader:
    """:class:`RunSummaries` over W&B's GraphQL API (see the module text)."""

    def __init__(self, api_url: str, key: SecretStr, *, timeout_s: float = TIMEOUT_S) -> None:
        self.url = api_url.rstrip("/") + "/graphql"
        self.key = key
        self.timeout_s = timeout_s

    async def summary(self, link: str) -> dict[str, float] | None:
        where = parse_run_link(link)
        if where is None:
            return None
        entity, project, run_id = where
        body = {
            "query": RUN_QUERY,
            "variables": {"entity": entity, "project": project, "name": run_id},
        }
        token = base64.b64encode(f"api:{self.key.get_secret_value()}".encode()).decode()
        headers = {"Authorization": f"Basic {token}"}
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(self.url, json=body, headers=headers) as response,
            ):
                if response.status != 200:
                    log.warning("W&B summary of %s not read: HTTP %s", run_id, response.status)
                    return None
                payload = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("W&B summary of %s not read: %s", run_id, type(exc).__name__)
            return None
        return parse_summary(payload)


def reader_for(settings: Settings) -> WandbReader | None:
    """The reader when a read-only key is configured, else None (nothing is read)."""
    if settings.wandb_read_key is None:
        return None
    return WandbReader(settings.wandb_api_url, settings.wandb_read_key)


class ReadBacks:
    """Read-backs in the background, so that no poll waits on W&B."""

    def __init__(self, store: Store, reader: RunSummaries | None) -> None:
        self.store, self.reader = store, reader
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, launch: Launch) -> None:
        if self.reader is None:
            return
        task = asyncio.create_task(self._run(launch), name=f"wandb-{launch.id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, launch: Launch) -> None:
        try:
            await read_back(self.store, self.reader, launch)
        except Exception:  # the launch has ended; only its W&B line is missing
            log.exception("W&B read-back of %s failed", launch.id)


async def read_back(store: Store, reader: RunSummaries | None, launch: Launch) -> None:
    """Once a launch has ended: its W&B run's summary into the record and the thread (once)."""
    if reader is None or launch.active or launch.wandb_read or not launch.run_links:
        return
    link = launch.run_links[0]  # every attempt writes to the one run (cluster.launching.wandb_run)
    metrics = await reader.summary(link)
    where = parse_run_link(link)

    def record(stored: Launch) -> list[Event]:
        if stored.wandb_read:
            return []
        stored.wandb_read = True
        if not metrics or where is None:
            return []
        stored.wandb_summary = dict(metrics)
        facts = {"move": "wandb_summary", "run": where[2], "metrics": dict(metrics)}
        return [Event("thread", stored.id, data=facts)]

    stored, _ = await store.launches.mutate(launch.id, record)
    if stored.sweep:
        await _compare_sweep(store, stored)


SWEEP_MARK_TTL_S = 30 * 86400


async def _compare_sweep(store: Store, launch: Launch) -> None:
    """Once every member of the launch's sweep has ended and had its summary read (or had
    no W&B run), the members' summaries side by side in the sweep's thread, once. Each
    read-back writes its own member first, so the last one to finish sees them all."""
    sweep = await store.launches.get_sweep(launch.sweep)
    if sweep is None:
        return
    members = await store.launches.get_many(sweep.members)
    if any(m is not None and (m.active or (m.run_links and not m.wandb_read)) for m in members):
        return
    header, rows = sweeps.wandb_columns(sweep, members)
    if not rows or not await store.marks.first_seen(f"sweep-wandb:{sweep.id}", SWEEP_MARK_TTL_S):
        return
    facts = {"move": "wandb_comparison", "sweep": sweep.id, "header": header, "rows": rows}
    await store.launches.mutate(launch.id, lambda _stored: [Event("thread", launch.id, data=facts)])
