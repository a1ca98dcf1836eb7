"""Profile one poll of N tracked launches (held jobs made as ``bench/run`` makes them),
in this process, under cProfile; prints the wall time of each poll and the top
functions of the last one.

    .venv/bin/python -m bench.profile_poll [--jobs 1000] [--polls 3] [--top 25]

Uses the bench's Redis database (flushed before and after) and cancels its jobs.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from bench.common import REDIS_URL, bench_config, cancel_named, flush_bench_db, run_tag, scancel
from bench.fleet import Fleet, clusters_for
from bot.engine.poller import Poller
from bot.settings.config import load_config
from bot.store.store import Store
from cluster.ssh.pool import SSHPool

CLUSTER = "a4"


async def main(jobs: int, polls: int, top: int) -> None:
    tag = run_tag()
    config = load_config(bench_config(Path(tempfile.mkdtemp(prefix="trainbot-profile-"))))
    await flush_bench_db()
    fleet = None
    try:
        async with SSHPool() as pool, Store.connect(REDIS_URL) as store:
            clusters = clusters_for(config, pool)
            fleet = Fleet(config, store, clusters, cluster=CLUSTER, tag=tag)
            await fleet.grow(jobs)
            poller = Poller(store, clusters, owner="profile")
            await poller.poll(CLUSTER)  # the first poll: every launch sees PENDING once
            profile = cProfile.Profile()
            for _ in range(polls):
                started = time.monotonic()
                profile.enable()
                await poller.poll(CLUSTER)
                profile.disable()
                print(f"poll of {jobs} launches: {time.monotonic() - started:.3f} s")
            pstats.Stats(profile).sort_stats("cumulative").print_stats(top)
    finally:
        if fleet is not None:
            scancel(fleet.job_ids)
        cancel_named(tag)
        await flush_bench_db()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--polls", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    asyncio.run(main(args.jobs, args.polls, args.top))
