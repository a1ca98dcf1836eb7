"""What a cluster actually holds and offers: recipes, images, partitions and free GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from cluster.frameworks import FRAMEWORKS
from cluster.profiles import ClusterProfile
from cluster.remote import run_remote_python
from cluster.slurm import PartitionInfo, build_sinfo, parse_sinfo, partitions
from cluster.ssh import SSHPool

DISCOVERY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RecipeListing:
    """Each framework's scripts under the recipes dir, relative to its directory."""

    cluster: str
    scripts: dict[str, tuple[str, ...]]  # framework -> e.g. ("sft/llama3p1_8b_sft.py", ...)
    images: tuple[str, ...]  # e.g. "nemo/nemo-20250721.sqsh"
    recipes_dir_exists: bool = True


def split_listing(
    cluster: str, recipes: list[str], images: list[str], exists: bool
) -> RecipeListing:
    scripts: dict[str, tuple[str, ...]] = {}
    for fw in FRAMEWORKS.values():
        prefix = f"{fw.subdir}/"
        scripts[fw.name] = tuple(r.removeprefix(prefix) for r in recipes if r.startswith(prefix))
    return RecipeListing(cluster, scripts, tuple(images), exists)


async def discover_recipes(pool: SSHPool, profile: ClusterProfile) -> RecipeListing:
    """List every framework's scripts and images in the recipes dir (one round trip)."""
    frameworks = FRAMEWORKS.values()
    payload = {
        "recipes_dir": profile.recipes_dir,
        "recipe_globs": [f"{fw.subdir}/{g}" for fw in frameworks for g in fw.recipe_globs],
        "image_globs": [f"{fw.subdir}/*.sqsh" for fw in frameworks],
    }
    raw = await run_remote_python(
        pool,
        profile.login,
        "probe_remote.py",
        payload,
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
    queue: tuple[tuple[str, int, int], ...] = ()  # (partition, jobs pending, jobs running)

    def queued(self, partition: str) -> tuple[int, int]:
        """(pending, running) jobs in ``partition``."""
        return next(((p, r) for name, p, r in self.queue if name == partition), (0, 0))

    def partition(self, name: str) -> PartitionInfo | None:
        return next((p for p in self.partitions if p.name == name), None)


QUEUE_SEPARATOR = "=====trainbot-squeue====="
QUEUE_COMMAND = "squeue -h -t PENDING,RUNNING,COMPLETING -o '%P|%T'"


def count_queue(stdout: str) -> tuple[tuple[str, int, int], ...]:
    """(partition, pending, running) from ``squeue -o '%P|%T'`` lines (pure)."""
    counts: dict[str, list[int]] = {}
    for line in stdout.splitlines():
        name, _, state = line.strip().partition("|")
        if not name:
            continue
        slot = counts.setdefault(name.split(",")[0], [0, 0])
        slot[0 if state == "PENDING" else 1] += 1
    return tuple((name, p, r) for name, (p, r) in sorted(counts.items()))


async def cluster_capacity(pool: SSHPool, profile: ClusterProfile) -> ClusterCapacity:
    """Partitions, nodes, idle/allocated GPUs and the queue: one ``sinfo`` and one
    ``squeue``, in one round trip."""
    command = f"{build_sinfo()}; echo {QUEUE_SEPARATOR}; {QUEUE_COMMAND}"
    result = await pool.run(
        profile.login, command, timeout_s=DISCOVERY_TIMEOUT_S, cluster=profile.name
    )
    sinfo_text, _, queue_text = result.stdout.partition(QUEUE_SEPARATOR)
    infos = tuple(partitions(parse_sinfo(sinfo_text)))
    return ClusterCapacity(profile.name, infos, count_queue(queue_text))
