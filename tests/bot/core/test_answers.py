"""/clusters names each cluster by what it is: a preset's type and machine, or what a
cluster without a preset has."""

from __future__ import annotations

from bot.core.answers import cluster_list
from bot.gateway.on_cluster import Clusters
from bot.settings.config import parse_config
from cluster.errors import ClusterUnreachable
from cluster.ssh.pool import SSHPool
from tests.bot.botkit import bot_settings

CONFIG = """
clusters:
  a4:
    type: hcc-a4
    login: {host: 127.0.0.1, user: trainer}
    partition: a4
    max_nodes: 4
  dgx:
    gpus_per_node: 4
    gpu_model: A100
    fabric: infiniband
    login: {host: 127.0.0.1, user: trainer, jump: [jump@bastion:2200]}
    partition: gpu
    max_nodes: 4
"""


async def test_clusters_names_presets_and_clusters_described_by_what_they_have() -> None:
    async def unreachable(name: str) -> object:
        raise ClusterUnreachable("no route", cluster=name)

    async with SSHPool() as pool:
        clusters = Clusters(parse_config(CONFIG), bot_settings(), pool)
        reply = await cluster_list(clusters, ["a4", "dgx"], ask=unreachable)  # type: ignore[arg-type]
    lines = reply.text.splitlines()
    assert lines[0].startswith("*a4* (hcc-a4, A4 (B200, RDMA)): unreachable:")
    assert lines[1].startswith("*dgx* (4 x A100, infiniband): unreachable:")
