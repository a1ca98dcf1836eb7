"""Measure the collector on the dev cluster: round trips, Slurm calls and ms per poll.

    .venv/bin/python bench/collector.py [--polls 5] [--sizes 1,10,50,200]

Tracks N jobs (real recent job ids from sacct, padded with ids Slurm does not know,
plus one job kept running during the measurement, so both squeue and sacct have
work), polls N times per size and prints one line per size.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster.collector import collect  # noqa: E402
from cluster.frameworks import Tracking  # noqa: E402
from cluster.frameworks.nemo_rl import NEMO_RL  # noqa: E402
from cluster.launch import LaunchSpec  # noqa: E402
from cluster.profiles import ClusterProfile  # noqa: E402
from cluster.slurm import parse_sbatch_parsable  # noqa: E402
from cluster.ssh import SSHPool  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / ".devcluster" / "trainbot.yaml"


def tracked(profile: ClusterProfile, job_ids: list[str]) -> list[Tracking]:
    """NeMo-RL jobs as the framework object tracks them."""
    spec = LaunchSpec(
        profile=profile,
        launch_id="L-bench",
        framework="nemo-rl",
        nodes=1,
        script="algorithms/sft.sh",
    )
    return [NEMO_RL.found(spec, j) for j in job_ids]


async def main(polls: int, sizes: list[int]) -> None:
    body = yaml.safe_load(CONFIG.read_text())["clusters"]["a4"]
    profile = ClusterProfile(name="a4", **body)
    async with SSHPool() as pool:
        listed = await pool.run(profile.login, "sacct -X -n -P -o JobID -S now-7days", timeout_s=30)
        recent = [j for j in listed.stdout.split() if j.isdigit()]
        submit = (
            "cd ~/vertex-oss-training/nemo_rl && DEVCLUSTER_ATTACH_DELAY_S=1 sbatch --parsable "
            "-N 1 -p a4 -J bench-collector -t 5 launch.sh --cluster_type hcc-a4 --interactive"
        )
        running = parse_sbatch_parsable(
            (await pool.run(profile.login, submit, timeout_s=30)).stdout
        )
        try:
            head = ("jobs", "round trips/poll", "slurm calls/poll", "ms/poll (median)")
            print(f"{head[0]:>5} {head[1]:>17} {head[2]:>17} {head[3]:>17}")
            for size in sizes:
                ids = [running.job_id, *recent[-(size - 1) :]] if size > 1 else [running.job_id]
                ids += [str(990000 + i) for i in range(size - len(ids))]
                jobs = tracked(profile, ids)
                times, trips, calls = [], set(), set()
                for _ in range(polls):
                    before = pool.stats.round_trips
                    started = time.monotonic()
                    result = await collect(pool, profile.login, jobs, cluster="a4")
                    times.append((time.monotonic() - started) * 1000)
                    trips.add(pool.stats.round_trips - before)
                    calls.add(",".join(result.slurm_calls))
                    jobs = [result.jobs[j.job_id].advance(j) for j in jobs]
                print(
                    f"{size:>5} {'/'.join(map(str, sorted(trips))):>17} "
                    f"{' | '.join(sorted(calls)):>17} {statistics.median(times):>17.1f}"
                )
        finally:
            await pool.run(profile.login, f"scancel {running.job_id}", timeout_s=30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=5)
    parser.add_argument("--sizes", default="1,10,50,200")
    args = parser.parse_args()
    asyncio.run(main(args.polls, [int(s) for s in args.sizes.split(",")]))
