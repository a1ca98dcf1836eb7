"""``sinfo``: the partitions of a cluster and what their nodes can run (pure; no I/O here)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

SINFO_FORMAT = "NodeList:|,Partition:|,Available:|,StateCompact:|,Gres:|,GresUsed:|"
_GPU_RE = re.compile(r"gpu(?::[A-Za-z0-9_.-]+)?:([0-9]+)")


@dataclass(frozen=True)
class NodeRow:
    node: str
    partition: str
    default: bool
    available: str
    state: str
    gpus_total: int
    gpus_used: int


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    default: bool
    up: bool
    nodes: int
    nodes_usable: int
    gpus_total: int
    gpus_used: int
    gpus_per_node: int

    @property
    def gpus_idle(self) -> int:
        return max(self.gpus_total - self.gpus_used, 0)


USABLE_NODE_STATES = ("idle", "mix", "alloc", "comp", "plnd")
UNUSABLE_FLAGS = "*$%!"  # not responding, maintenance, powering down, to be powered down


def node_usable(state: str) -> bool:
    """Whether a node in this ``sinfo`` compact state can run jobs (now or once freed)."""
    if any(flag in state for flag in UNUSABLE_FLAGS):
        return False
    return state.rstrip("~#@^-").startswith(USABLE_NODE_STATES)


def build_sinfo() -> str:
    """One row per (node, partition) with availability, state and GPUs total/used."""
    return shlex.join(["sinfo", "-h", "-N", "-S", "#P,N", "-O", SINFO_FORMAT])


def parse_sinfo(stdout: str) -> list[NodeRow]:
    rows: list[NodeRow] = []
    for line in stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 6 or not parts[0]:
            continue
        node, partition, available, state, gres, used = parts[:6]
        rows.append(
            NodeRow(
                node=node,
                partition=partition.rstrip("*"),
                default=partition.endswith("*"),
                available=available,
                state=state,
                gpus_total=_gpus(gres),
                gpus_used=_gpus(used),
            )
        )
    return rows


def partitions(rows: Iterable[NodeRow]) -> list[PartitionInfo]:
    """Per-partition capacity, in sinfo's order. Down or drained nodes count as not usable."""
    grouped: dict[str, list[NodeRow]] = {}
    for row in rows:
        grouped.setdefault(row.partition, []).append(row)
    infos = []
    for name, nodes in grouped.items():
        usable = [n for n in nodes if node_usable(n.state)]
        infos.append(
            PartitionInfo(
                name=name,
                default=any(n.default for n in nodes),
                up=all(n.available == "up" for n in nodes),
                nodes=len({n.node for n in nodes}),
                nodes_usable=len({n.node for n in usable}),
                gpus_total=sum(n.gpus_total for n in usable),
                gpus_used=sum(n.gpus_used for n in usable),
                gpus_per_node=max((n.gpus_total for n in nodes), default=0),
            )
        )
    return infos


def format_partitions(infos: Iterable[PartitionInfo]) -> str:
    """``a3m*, a3u, a4, a3h``: the default marked with ``*``, as sinfo does."""
    return ", ".join(p.name + ("*" if p.default else "") for p in infos)


def _gpus(gres: str) -> int:
    return sum(int(m.group(1)) for m in _GPU_RE.finditer(gres))
