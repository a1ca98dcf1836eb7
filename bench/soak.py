"""Soak: many launches through two ``trainbot serve`` processes while things break, then
every thread checked against Slurm and the disk.

Runs N launches (NeMo pretrain/cpt/sft, NeMo-RL sft/dpo/grpo/rm; small models; clusters
a3m a3u a4 a3h; 1 or 2 nodes) on the dev cluster through signed Slack requests to two
``trainbot serve`` processes sharing the soak's own Redis (append-only, on a free port),
while injecting at random: the stand-in's faults (oom, nccl, hang, gated, wandb, the
tokenizer race) by knob files, a node failure, SIGKILL of a bot process (started again),
a Redis restart and the login node's sshd stopped for 30 s; with
``--kill-redis-primary N``, Redis is devcluster/sentinel's primary, replica and three
sentinels instead, and its primary is SIGKILLed N times (Sentinel promotes the replica;
the killed server comes back as a replica), each time reporting how long until the
promotion and until every bot's ``/healthz`` answered 200 again. Hung launches and a few
others are cancelled with the Cancel button. Then, from the Slack stand-in's record,
``sacct`` and the disk (trainbot's Redis only for what it charged), it checks each
launch's final state, checkpoints, message order and duplicates, one job per attempt, no
job after a cancel, on-call pages, and that the GPU-hours charged to budgets equal what
``sacct`` reports for the soak's jobs; prints a table and exits 1 on any divergence.

    .venv/bin/python bench/soak.py [--launches 40] [--concurrency 4] [--seed N]
                                   [--kill-redis-primary N]

Needs the dev cluster up and root (node failures, the login node's sshd). Not part of
``.ci/run``: it disturbs the shared dev cluster (a node fails, sshd stops for 30 s).

Here the command line; the run in :mod:`bench.soak_run`, its seeded plan in
:mod:`bench.soak_plan`, the launches and cancels in :mod:`bench.soak_launches`, the
faults in :mod:`bench.soak_faults`, what Slack saw in :mod:`bench.soak_slack`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.soak_check import Divergence  # noqa: E402
from bench.soak_report import print_report  # noqa: E402
from bench.soak_run import Soak  # noqa: E402


async def main(args: argparse.Namespace) -> int:
    soak = Soak(args)
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
    divergences: list[Divergence] = []
    interrupted = False
    try:
        await soak.start()
        await soak.drive()
        await soak.wait_charged()
        await soak.settle_slurm()
        await soak.read_charges()
        views, divergences = soak.check()
        soak.dump(views)
        wall_s = time.time() - soak.started
        print_report(args, soak.run_id, views, divergences, soak.injected, soak.plans, wall_s)
        soak.faults.print_primary_kills()
    except asyncio.CancelledError:  # SIGTERM or Ctrl-C: clean up, no verdict
        interrupted = True
    finally:
        await soak.cleanup()
        print(f"soak: logs kept in {soak.workdir}", flush=True)
    if interrupted:
        print("soak: interrupted; no verdict", file=sys.stderr)
        return 2
    return 1 if divergences else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    p.add_argument("--launches", type=int, default=40)
    p.add_argument("--concurrency", type=int, default=4, help="launches in flight at once")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--cancels", type=int, default=None, help="random cancels (default N/20)")
    p.add_argument("--node-failures", type=int, default=1)
    p.add_argument("--kills", type=int, default=None, help="bot SIGKILLs (default 1, 2 from 20)")
    p.add_argument(
        "--redis-restarts", type=int, default=None, help="default 1; 0 with --kill-redis-primary"
    )
    p.add_argument(
        "--kill-redis-primary",
        type=int,
        default=0,
        metavar="N",
        help="run Redis through devcluster/sentinel and SIGKILL its primary N times",
    )
    p.add_argument("--sshd-stops", type=int, default=1)
    p.add_argument("--sshd-down-s", type=float, default=30.0)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--step-time-s", type=float, default=1.5)
    p.add_argument("--poll-interval-s", type=float, default=1.0)
    p.add_argument("--hang-min-s", type=float, default=20.0)
    p.add_argument("--deadline-s", type=float, default=None, help="default 600 + 60 s a launch")
    p.add_argument(
        "--page-user-faults",
        action="store_true",
        help="expect an on-call page for oom, gated and wandb too (trainbot tells the user)",
    )
    args = p.parse_args(argv)
    args.seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    args.cancels = args.cancels if args.cancels is not None else max(1, args.launches // 20)
    if args.kill_redis_primary < 0:
        p.error(f"--kill-redis-primary {args.kill_redis_primary}: give 0 or more kills")
    if args.redis_restarts is None:
        args.redis_restarts = 0 if args.kill_redis_primary else 1
    elif args.redis_restarts and args.kill_redis_primary:
        p.error("--redis-restarts restarts the soak's own Redis; with --kill-redis-primary give 0")
    args.kills = args.kills if args.kills is not None else (2 if args.launches >= 20 else 1)
    if args.deadline_s is None:
        args.deadline_s = 600 + 60 * args.launches / max(1, args.concurrency) * 2
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
