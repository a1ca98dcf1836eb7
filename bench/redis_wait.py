"""What WAIT costs: the latency of a durable store write (a queued launch) with and without
``WAIT 1``, through Sentinel to a primary with one replica (``devcluster/sentinel up``).

    PYTHONPATH=$PWD .venv/bin/python bench/redis_wait.py [--writes 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.settings.env import Target
from bot.store.store import Store
from commands.requests import TrainRequest

SENTINELS = (("127.0.0.1", 26379), ("127.0.0.1", 26380), ("127.0.0.1", 26381))


async def measure(wait_replicas: int, writes: int) -> list[float]:
    target = Target(sentinels=SENTINELS, wait_replicas=wait_replicas, wait_timeout_ms=1000)
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    took: list[float] = []
    async with Store.connect(target) as store:
        for _ in range(writes):
            launch = Launch(request=request, user_id="U-bench", channel="C1")
            started = time.perf_counter()
            await store.launches.create(launch, [Event("parent", launch.id)])
            took.append((time.perf_counter() - started) * 1000)
        await store.redis.flushdb()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=300)
    args = parser.parse_args()
    print("| durable write | p50 ms | p99 ms |")
    print("|---|---|---|")
    for wait in (0, 1):
        took = sorted(asyncio.run(measure(wait, args.writes)))
        p50 = statistics.median(took)
        p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
        print(f"| {'WAIT 1' if wait else 'no WAIT'} | {p50:.2f} | {p99:.2f} |")


if __name__ == "__main__":
    main()
