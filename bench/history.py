"""``/jobs``, ``/jobs history`` and job lookups with many finished launches in Redis.

Fills a Redis database (flushed first and at the end; by default the benchmarks'
database, 14) with LAUNCHES finished launches of 50 users on 4 clusters, written
the way the bot writes them (create, submitted, ended: each through store.launches.mutate,
so the indexes and expiries are the real ones), plus a few active ones, then
times, with real Redis:

- ``/jobs`` (active launches of one user, and of everyone) through bot.core.answers;
- a user's and a cluster's history (the newest 20) and everyone's (the newest 50);
- finding a launch by Slurm job id (the per-id hash) and by launch id;
- for comparison, one full SCAN of the keyspace, which is what finding a job id
  cost before the index;

and prints the median and 95th percentile of each, and the bytes Redis keeps per
finished launch (its record, and the history entry that outlives it).

    .venv/bin/python bench/history.py [--launches N] [--redis URL] [--quick]

``--quick`` (200 launches, 10 runs per operation) shows every row in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.core import answers  # noqa: E402
from bot.lifecycle.events import Event  # noqa: E402
from bot.lifecycle.launch import Attempt, Launch, Phase  # noqa: E402
from bot.store import keys  # noqa: E402
from bot.store.store import Store  # noqa: E402
from commands.context import User  # noqa: E402
from commands.requests import TrainRequest  # noqa: E402

BENCH_REDIS = "redis://127.0.0.1:6379/14"
CLUSTERS = ("a3m", "a3u", "a4", "a3h")
USERS = [f"U{n:04d}" for n in range(50)]
OUTCOMES = ("COMPLETED",) * 6 + ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
RUNS = 200
QUICK_LAUNCHES, QUICK_RUNS = 200, 10


def finished_launch(number: int, rng: random.Random) -> tuple[Launch, str]:
    cluster = CLUSTERS[number % len(CLUSTERS)]
    request = TrainRequest(
        workload=rng.choice(("sft", "pretrain", "cpt")),
        model="llama3p1_8b",
        framework="nemo",
        cluster=cluster,
        nodes=rng.choice((1, 2, 4)),
        name=f"run{number}",
    )
    launch = Launch(
        request=request,
        user_id=USERS[number % len(USERS)],
        user_name=f"user{number % len(USERS)}",
        channel="C0TRAIN",
        parent_ts=f"1700000000.{number:06d}",
    )
    # a realistic record: a loss curve of a few hundred points, progress, checkpoints
    launch.progress_history = [(step, 3.0 - step / 400) for step in range(0, 2000, 5)]
    launch.checkpoints = [f"model-step={step}-consumed_samples={step * 8}" for step in (500, 1000)]
    return launch, str(100_000 + number)


async def write_finished(store: Store, launch: Launch, job_id: str, rng: random.Random) -> None:
    await store.launches.create(launch, [Event("parent", launch.id)], enqueue=False)
    outcome = rng.choice(OUTCOMES)

    def submitted(stored: Launch) -> list[Event]:
        stored.phase = Phase.RUNNING
        started = time.time() - rng.uniform(600, 86400)
        stored.attempts.append(Attempt(number=1, job_id=job_id, started_at=started))
        return []

    def ended(stored: Launch) -> list[Event]:
        stored.phase, stored.outcome = Phase.DONE, outcome
        stored.attempts[-1].ended_at = time.time()
        stored.attempts[-1].slurm_state = outcome
        return []

    await store.launches.mutate(launch.id, submitted)
    await store.launches.mutate(launch.id, ended)


async def fill(store: Store, count: int, rng: random.Random) -> tuple[list[str], list[str]]:
    made = [finished_launch(n, rng) for n in range(count)]
    for start in range(0, count, 50):
        batch = made[start : start + 50]
        await asyncio.gather(*(write_finished(store, item, job, rng) for item, job in batch))
    for number in range(20):  # a few active launches, as in a real day
        active, _ = finished_launch(count + number, rng)
        await store.launches.create(active, [], enqueue=False)
    await store.redis.delete(keys.OUTBOX)  # nobody delivers here
    await store.ensure_groups()
    return [item.id for item, _ in made], [job for _, job in made]


async def timed(run: Callable[[], Awaitable[Any]], runs: int = RUNS) -> tuple[float, float]:
    """Median and 95th percentile in milliseconds."""
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await run()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


async def full_scan(store: Store) -> int:
    seen = 0
    async for _ in store.redis.scan_iter(match=keys.job_index("*"), count=1000):
        seen += 1
    return seen


async def main(count: int, url: str, runs: int = RUNS) -> None:
    rng = random.Random(7)
    async with Store.connect(url) as store:
        await store.redis.flushdb()
        await store.ensure_groups()
        started = time.perf_counter()
        launch_ids, job_ids = await fill(store, count, rng)
        fill_s = time.perf_counter() - started
        size = int(await store.redis.dbsize())
        user = User(id=USERS[3], name="user3")

        checks: list[tuple[str, Callable[[], Awaitable[Any]], int]] = [
            ("/jobs (one user's active)", lambda: answers.jobs(store, user, all_users=False), runs),
            (
                "/jobs all (everyone's active)",
                lambda: answers.jobs(store, user, all_users=True),
                runs,
            ),
            (
                "history of a user (newest 20)",
                lambda: store.history.entries(user_id=user.id, limit=20),
                runs,
            ),
            (
                "history of a cluster, 30 days (newest 20)",
                lambda: store.history.entries(
                    cluster="a4", since=time.time() - 30 * 86400, limit=20
                ),
                runs,
            ),
            ("history of everyone (newest 50)", lambda: store.history.entries(limit=50), runs),
            (
                "find by Slurm job id (index)",
                lambda: store.history.find_job(rng.choice(job_ids)),
                runs,
            ),
            ("find by launch id", lambda: store.launches.get(rng.choice(launch_ids)), runs),
            ("before the index: one keyspace SCAN", lambda: full_scan(store), min(runs, 20)),
        ]
        print(f"{count} finished launches (+20 active), {size} keys; filled in {fill_s:.1f} s")
        print(f"{'operation':44} {'median ms':>10} {'p95 ms':>8}")
        for name, run, times in checks:
            median, p95 = await timed(run, times)
            print(f"{name:44} {median:10.2f} {p95:8.2f}")
        sample = launch_ids[:50]
        record = [await store.redis.memory_usage(keys.launch(i)) or 0 for i in sample]
        entry = [await store.redis.memory_usage(keys.summary(i)) or 0 for i in sample]
        print(
            f"bytes per finished launch: record {statistics.mean(record):.0f} "
            f"(kept retention.launches_days), history entry {statistics.mean(entry):.0f} "
            "(kept retention.history_days)"
        )
        await store.redis.flushdb()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=None, help="default 10,000")
    parser.add_argument("--redis", default=BENCH_REDIS, help="flushed: (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="200 launches, 10 runs each")
    args = parser.parse_args()
    count = args.launches or (QUICK_LAUNCHES if args.quick else 10_000)
    asyncio.run(main(count, args.redis, QUICK_RUNS if args.quick else RUNS))
