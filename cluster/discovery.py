"""What a cluster actually holds and offers: recipes, images, partitions and free GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from cluster.profiles import ClusterProfile
from cluster.remote import run_remote_python
from cluster.slurm import PartitionInfo, build_sinfo, parse_sinfo, partitions
from cluster.ssh import SSHPool

DISCOVERY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RecipeListing:
    """Recipe files under the recipes dir, relative to ``nemo/`` and ``nemo_rl/``."""

    cluster: str
    nemo_scripts: tuple[str, ...]  # e.g. "sft/llama3p1_8b_sft.py"
    nemo_rl_job_scripts: tuple[str, ...]  # e.g. "algorithms/dpo.sh"
    images: tuple[str, ...]  # e.g. "nemo/nemo-20250721.sqsh"
    recipes_dir_exists: bool = True


def split_listing(
    cluster: str, recipes: list[str], images: list[str], exists: bool
) -> RecipeListing:
    nemo = tuple(r.removeprefix("nemo/") for r in recipes if r.startswith("nemo/"))
    rl = tuple(r.removeprefix("nemo_rl/") for r in recipes if r.startswith("nemo_rl/"))
    return RecipeListing(cluster, nemo, rl, tuple(images), exists)


async def discover_recipes(pool: SSHPool, profile: ClusterProfile) -> RecipeListing:
    """List nemo/{pretrain,cpt,sft}/*.py and nemo_rl/algorithms/*.sh (one round trip)."""
    raw = await run_remote_python(
        pool,
        profile.login,
        "probe_remote.py",
        {"recipes_dir": profile.recipes_dir},
        timeout_s=DISCOVERY_TIMEOUT_S,
        cluster=profile.name,
    )
    return split_listing(
        profile.name,
        list(raw.get("recipes", [])),
        list(raw.get("images", [])),
        bool(raw.get("recipes_dir_exists")),
    )


@dataclass(frozen=True)
class ClusterCapacity:
    cluster: str
    partitions: tuple[PartitionInfo, ...]

    def partition(self, name: str) -> PartitionInfo | None:
        return next((p for p in self.partitions if p.name == name), None)


async def cluster_capacity(pool: SSHPool, profile: ClusterProfile) -> ClusterCapacity:
    """Partitions, nodes and idle/allocated GPUs from one ``sinfo``."""
    result = await pool.run(
        profile.login, build_sinfo(), timeout_s=DISCOVERY_TIMEOUT_S, cluster=profile.name
    )
    return ClusterCapacity(profile.name, tuple(partitions(parse_sinfo(result.stdout))))
