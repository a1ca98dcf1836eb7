"""What a cluster actually holds and offers: recipes, images, partitions and free GPUs."""

from __future__ import annotations

from dataclasses import dataclass, replace

from cluster.site.framework_registry import frameworks
from cluster.site.profiles import ClusterProfile
from cluster.slurm.sbatch import (
    JobShape,
    StartEstimate,
    build_test_only,
    build_wait_survey,
    parse_test_only,
    parse_wait_survey,
)
from cluster.slurm.sinfo import PartitionInfo, build_sinfo, parse_sinfo, partitions
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import run_remote_python

DISCOVERY_TIMEOUT_S = 30.0
WAIT_SIZES = (1, 2, 4)  # node counts of the "typical jobs" whose wait /clusters shows


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
    for fw in frameworks().values():
        prefix = f"{fw.subdir}/"
        scripts[fw.name] = tuple(r.removeprefix(prefix) for r in recipes if r.startswith(prefix))
    return RecipeListing(cluster, scripts, tuple(images), exists)


async def discover_recipes(pool: SSHPool, profile: ClusterProfile) -> RecipeListing:
    """List every framework's scripts and images in the recipes dir (one round trip)."""
    every = frameworks().values()
    payload = {
        "recipes_dir": profile.recipes_dir,
        "recipe_globs": [f"{fw.subdir}/{g}" for fw in every for g in fw.recipe_globs],
        "image_globs": [f"{fw.subdir}/*.sqsh" for fw in every],
    }
    raw = await run_remote_python(
        pool,
        profile.login,
        "preflight/probe_remote.py",
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
    waits: tuple[tuple[str, int, StartEstimate], ...] = ()  # (partition, nodes, Slurm's estimate)

    def queued(self, partition: str) -> tuple[int, int]:
        """(pending, running) jobs in ``partition``."""
        return next(((p, r) for name, p, r in self.queue if name == partition), (0, 0))

    def partition(self, name: str) -> PartitionInfo | None:
        return next((p for p in self.partitions if p.name == name), None)

    def waits_in(self, partition: str) -> list[tuple[int, StartEstimate]]:
        """(nodes, estimate) for the typical job sizes in ``partition``, smallest first."""
        return sorted((n, e) for name, n, e in self.waits if name == partition)


QUEUE_SEPARATOR = "=====trainbot-squeue====="
WAITS_SEPARATOR = "=====trainbot-waits====="
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
    """Partitions, nodes, idle/allocated GPUs, the queue, and when a typical 1-, 2- and
    4-node job would start in each partition (``sbatch --test-only``, submitting
    nothing): one ``sinfo``, one ``squeue`` and the estimates, in one round trip."""
    survey = build_wait_survey(
        WAIT_SIZES,
        gpus_per_node=profile.gpus_per_node,
        time_limit=profile.time_limit,
        account=profile.account,
    )
    command = (
        f"{build_sinfo()}; echo {QUEUE_SEPARATOR}; {QUEUE_COMMAND}; "
        f"echo {WAITS_SEPARATOR}; date +%s; {survey}"
    )
    result = await pool.run(
        profile.login, command, timeout_s=DISCOVERY_TIMEOUT_S, cluster=profile.name
    )
    sinfo_text, _, rest = result.stdout.partition(QUEUE_SEPARATOR)
    queue_text, _, waits_text = rest.partition(WAITS_SEPARATOR)
    clock, _, survey_text = waits_text.strip().partition("\n")
    waits = parse_wait_survey(survey_text, _epoch(clock))
    infos = tuple(partitions(parse_sinfo(sinfo_text)))
    return ClusterCapacity(
        profile.name,
        infos,
        count_queue(queue_text),
        tuple((name, nodes, estimate) for (name, nodes), estimate in waits.items()),
    )


async def start_estimate(
    pool: SSHPool,
    profile: ClusterProfile,
    shape: JobShape,
    *,
    timeout_s: float,
) -> StartEstimate:
    """When Slurm expects a job of this shape to start (``sbatch --test-only``, nothing
    submitted), with the login node's clock at asking: one round trip."""
    test = build_test_only(shape, gpus_per_node=profile.gpus_per_node)
    result = await pool.run(
        profile.login,
        f"date +%s; {test}",
        timeout_s=timeout_s,
        check=False,
        cluster=profile.name,
    )
    clock, _, answer = result.stdout.strip().partition("\n")
    return replace(parse_test_only(answer), asked_at=_epoch(clock))


def _epoch(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        return 0.0
