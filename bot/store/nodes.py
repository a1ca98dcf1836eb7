"""The node ledger: each node's failures across launches, and what on-call did about them.

A failure is written when a failed job's diagnosis names the node as faulty (hardware
evidence only, :attr:`cluster.watching.diagnosis.Diagnosis.failed_node`: an Xid, an NCCL hang
pinned on a node, a NODE_FAIL of a one-node job: whatever the failure catalog says
names its node). Drains and resumes from the bot are written too, so on-call sees
who drained a node and why. Each node keeps its newest :data:`keys.NODE_HISTORY`
entries; a node with no entry for :data:`keys.NODE_KEEP_S` is forgotten.

Entries come back from Redis, which any process of the deployment can write: each is
validated on the way out and one that does not parse is skipped, never shown as is.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.store import keys
from bot.store.base import Section, rides

log = logging.getLogger(__name__)

NODE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
EntryKind = Literal["failure", "drain", "resume"]


class NodeEntry(BaseModel):
    """One line of a node's ledger."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: EntryKind = "failure"
    at: float
    launch_id: str = Field(default="", max_length=64)
    job_id: str = Field(default="", max_length=32)
    cause_key: str = Field(
        default="", max_length=64
    )  # cluster.watching.diagnosis key (xid, nccl_hang ...)
    cause: str = Field(default="", max_length=300)  # in plain words
    by: str = Field(default="", max_length=64)  # who drained or resumed it (Slack user id)
    reason: str = Field(default="", max_length=300)


@dataclass(frozen=True)
class NodeRecord:
    """A node as the ledger knows it: its entries, newest first."""

    cluster: str
    node: str
    entries: tuple[NodeEntry, ...]

    @property
    def failures(self) -> list[NodeEntry]:
        return [e for e in self.entries if e.kind == "failure"]

    @property
    def launches(self) -> list[str]:
        """The launches the node failed, newest first, each once."""
        return list(dict.fromkeys(e.launch_id for e in self.failures if e.launch_id))

    def failures_since(self, since: float) -> list[NodeEntry]:
        return [e for e in self.failures if e.at >= since]

    @property
    def drained(self) -> NodeEntry | None:
        """The bot's newest drain of the node, unless a resume came after it."""
        for entry in self.entries:
            if entry.kind == "resume":
                return None
            if entry.kind == "drain":
                return entry
        return None


def check_node_name(name: str) -> str:
    if not NODE_NAME_RE.fullmatch(name):
        raise ValueError(f"invalid node name {name!r} (letters, digits, '.', '_' and '-')")
    return name


class Nodes(Section):
    """The node ledger's section of the store."""

    @rides
    async def record_node(self, cluster: str, node: str, entry: NodeEntry) -> bool:
        """Add ``entry`` to ``node``'s ledger; False when that job's failure is already there
        (a poller that diagnoses the same job again writes nothing)."""
        key = keys.node(cluster, check_node_name(node))
        if entry.kind == "failure" and entry.job_id:
            for raw in await self.redis.lrange(key, 0, keys.NODE_HISTORY - 1):
                old = _parse(raw)
                if old is not None and old.kind == "failure" and old.job_id == entry.job_id:
                    return False
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.lpush(key, entry.model_dump_json())
            pipe.ltrim(key, 0, keys.NODE_HISTORY - 1)
            pipe.expire(key, keys.NODE_KEEP_S)
            pipe.zadd(keys.nodes(cluster), {node: entry.at})
            pipe.zremrangebyscore(keys.nodes(cluster), 0, time.time() - keys.NODE_KEEP_S)
            pipe.expire(keys.nodes(cluster), keys.NODE_KEEP_S)
            await pipe.execute()
        return True

    @rides
    async def node_record(self, cluster: str, node: str) -> NodeRecord:
        raw = await self.redis.lrange(keys.node(cluster, check_node_name(node)), 0, -1)
        entries = tuple(e for e in (_parse(r) for r in raw) if e is not None)
        return NodeRecord(cluster, node, entries)

    @rides
    async def node_ledger(self, cluster: str, *, since: float = 0.0) -> list[NodeRecord]:
        """The nodes of ``cluster`` with a ledger entry written since ``since``, the most
        failed launches first."""
        names = await self.redis.zrangebyscore(keys.nodes(cluster), since, "+inf")
        records = []
        for name in names:
            node = name.decode() if isinstance(name, bytes) else str(name)
            if NODE_NAME_RE.fullmatch(node):
                records.append(await self.node_record(cluster, node))
        return sorted(records, key=lambda r: (-len(r.launches), r.node))


def _parse(raw: bytes | str) -> NodeEntry | None:
    try:
        return NodeEntry.model_validate_json(raw)
    except ValidationError:
        log.warning("a node ledger entry that does not parse was skipped")
        return None
