"""``bench/run``: every performance row side by side with what a user would otherwise
use, measured in the same run, as one table (and ``bench/RESULTS.md``).

    bench/run            # the full run (a few minutes plus making 5,000 held jobs)
    bench/run --quick    # the smallest sizes: every row, in about a minute

Needs the dev cluster (``devcluster/up``) and Redis. The bench uses Redis database
12 (``TRAINBOT_BENCH_REDIS``) and flushes only that one; every Slurm job it makes is
named ``bench<6 hex>-...`` and cancelled when the run ends, however it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from bench import ack, api_ack, launch, notify, ssh_latency
from bench.common import (
    BENCH_DB,
    BOT_REDIS_ENV,
    PROJECT,
    REDIS_URL,
    BotProcess,
    Row,
    bench_config,
    cancel_named,
    dev_cluster_up,
    flush_bench_db,
    machine_line,
    metric,
    redis_bytes,
    run_tag,
    scancel,
)
from bench.fleet import Fleet, Window, clusters_for, nemo_run_window, window
from bench.results import notes, render_results, table
from bot.settings.config import load_config
from bot.store.store import Store
from cluster.ssh.pool import SSHPool
from support.slack_standin import SlackStandin

ALL_ROWS = frozenset(f"P{i}" for i in range(1, 8))
RESULTS = PROJECT / "bench" / "RESULTS.md"
CLUSTER = "a4"
P2_GOAL = "5,000-job rate ≤ 1.5x the 10-job rate; ≥ 100x fewer RPCs than nemo-run at 1,000"
P5_GOAL = "≤ 200 MB RSS and ≤ 10 KB Redis per job at 5,000; one poll ≤ 2 s"
P2_MEASURE = "slurmctld job-info RPCs + slurmdbd job queries per minute, by jobs tracked"


@dataclass(frozen=True)
class Sizes:
    rates: tuple[int, ...]
    ack_s: float
    ssh_seq: int
    ssh_rounds: int
    launches: int
    fleet: tuple[int, ...]  # small, middle (anchor, P6), large
    window_s: float
    p6_jobs: int
    p6_timeout_s: float
    poll_interval_s: float = 2.0


FULL = Sizes((10, 100, 300), 20.0, 50, 5, 3, (10, 1000, 5000), 20.0, 3, 300.0)
QUICK = Sizes((5, 10, 20), 1.0, 5, 1, 1, (2, 5, 10), 2.0, 1, 150.0, 1.0)


@dataclass
class SizeResult:
    size: int
    idle: Window
    bot: Window
    anchor: Window | None
    polls: float
    poll_mean_s: float
    rss: int
    redis: int


async def _row(
    rows: list[Row], id: str, measure: str, goal: str, part: Callable[[], Awaitable[Row]]
) -> None:
    print(f"bench: {id} ({measure}) ...", flush=True)
    started = time.monotonic()
    try:
        row = await part()
    except Exception as exc:  # a row that could not be measured says so
        traceback.print_exc()
        row = Row.failed(id, measure, goal, f"{type(exc).__name__}: {exc}")
    rows.append(row)
    print(f"bench: {id} done in {time.monotonic() - started:.0f} s: {row.figure}", flush=True)


async def run(
    sizes: Sizes, workdir: Path, only: frozenset[str] = ALL_ROWS
) -> tuple[list[Row], list[str]]:
    tag = run_tag()
    rows: list[Row] = []
    method: list[str] = []
    config_path = bench_config(workdir, poll_interval_s=sizes.poll_interval_s)
    config = load_config(config_path)
    profile = config.clusters[CLUSTER]
    standin = SlackStandin()
    await standin.start()
    bot = BotProcess(standin.api_url, config_path, workdir / "bot.log")
    fleet: Fleet | None = None
    await flush_bench_db()
    try:
        async with SSHPool() as pool, Store.connect(REDIS_URL) as store:
            if "P3" in only:
                await _row(
                    rows, "P3", "remote command latency", ssh_latency.GOAL,
                    lambda: ssh_latency.measure(
                        profile, seq=sizes.ssh_seq, rounds=sizes.ssh_rounds
                    ),
                )  # fmt: skip
            if "P1" in only:
                await _row(
                    rows, "P1", "ack latency", ack.GOAL,
                    lambda: ack.measure(
                        standin, config_path, workdir, rates=sizes.rates, duration_s=sizes.ack_s,
                        tag=tag,
                    ),
                )  # fmt: skip
            if "P7" in only:
                await flush_bench_db()
                await _row(
                    rows, "P7", "API ack latency", api_ack.GOAL,
                    lambda: api_ack.measure(
                        standin, config_path, workdir, rates=sizes.rates, duration_s=sizes.ack_s,
                        tag=tag,
                    ),
                )  # fmt: skip
            await flush_bench_db()
            await store.ensure_groups()
            if "P4" in only:
                await bot.start()
                await _row(
                    rows, "P4", "/train ack → job id", launch.GOAL,
                    lambda: launch.measure(
                        standin, bot.events_url, store, config, pool, cluster=CLUSTER,
                        repeat=sizes.launches, tag=tag,
                    ),
                )  # fmt: skip
            bot.stop()
            await flush_bench_db()
            await store.ensure_groups()
            clusters = clusters_for(config, pool)
            fleet = Fleet(config, store, clusters, cluster=CLUSTER, tag=tag)
            results: list[SizeResult] = []
            p6_rows: list[Row] = []
            small, middle, large = sizes.fleet
            for size in sizes.fleet if only & {"P2", "P5", "P6"} else ():
                print(f"bench: P2/P5 with {size:,} tracked launches ...", flush=True)
                await fleet.grow(size)
                idle = await window(sizes.window_s)
                anchor = None
                if size in (small, middle):
                    anchor = await nemo_run_window(clusters, CLUSTER, fleet.job_ids, sizes.window_s)
                result = await _bot_window(bot, size, sizes)
                result.idle, result.anchor = idle, anchor
                results.append(result)
                if size == middle:
                    await _row(
                        p6_rows, "P6", "state change → thread", "p99 ≤ poll interval + 2 s",
                        partial(
                            notify.measure, standin, bot.events_url, store, cluster=CLUSTER,
                            count=sizes.p6_jobs, tag=tag, poll_interval_s=sizes.poll_interval_s,
                            tracking=size, timeout_s=sizes.p6_timeout_s,
                        ),
                    )  # fmt: skip
                bot.stop()
            if results:
                rows.append(_p2_row(results, sizes))
                rows.append(_p5_row(results, sizes))
            rows.extend(p6_rows)
            rows[:] = [r for r in rows if r.id in only]
            method.append(
                f"Tracked launches: {len(fleet.job_ids):,} held jobs made through the launch "
                f"path's own plan with `--hold` ({fleet.submit_s:.0f} s of sbatch)."
            )
    finally:
        bot.stop()
        if fleet is not None:
            scancel(fleet.job_ids)
        left = cancel_named(tag)
        if left:
            print(f"bench: cancelled {left} more jobs named {tag}-*", flush=True)
        await flush_bench_db()
        await standin.close()
    order = {f"P{i}": i for i in range(1, 7)}
    rows.sort(key=lambda r: order.get(r.id, 99))
    return rows, method


async def _bot_window(bot: BotProcess, size: int, sizes: Sizes) -> SizeResult:
    """Start the bot, let it settle (two polls of every launch, the parent messages of
    the new launches delivered), then measure one window."""
    await bot.start()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        values = await bot.metrics()
        if (
            metric(values, "trainbot_polls_total") >= 2
            and metric(values, "trainbot_outbox_backlog") == 0
        ):
            break
        await asyncio.sleep(0.5)
    before = await bot.metrics()
    idle_free = await window(sizes.window_s)
    after = await bot.metrics()
    polls = metric(after, "trainbot_polls_total") - metric(before, "trainbot_polls_total")
    count = metric(after, "trainbot_poll_duration_seconds_count") - metric(
        before, "trainbot_poll_duration_seconds_count"
    )
    total = metric(after, "trainbot_poll_duration_seconds_sum") - metric(
        before, "trainbot_poll_duration_seconds_sum"
    )
    return SizeResult(
        size=size,
        idle=Window(0, 0, 0, {}),
        bot=idle_free,
        anchor=None,
        polls=polls,
        poll_mean_s=total / count if count else float("nan"),
        rss=bot.rss_bytes(),
        redis=await redis_bytes(),
    )


def _p2_row(results: list[SizeResult], sizes: Sizes) -> Row:
    """Rates as measured (the shared Slurm's idle rate beside them); the comparison with
    nemo-run per full status sweep (every job's state learned once), which is what a
    rate at the same interval compares: nemo-run's own sweep of 1,000 jobs takes far
    longer than its 2 s interval here, so its measured rate is capped by sacct's speed."""
    by_size = {r.size: r for r in results}
    small, middle, large = sizes.fleet
    rate = {r.size: r.bot.per_minute for r in results}
    per_poll = {r.size: (r.bot.ctld + r.bot.dbd) / r.polls if r.polls else float("nan")
                for r in results}  # fmt: skip
    figure = "; ".join(
        f"{r.size:,} jobs: {rate[r.size]:.0f}/min, {per_poll[r.size]:.1f}/poll "
        f"({r.bot.ctld} ctld + {r.bot.dbd} dbd, {r.polls:.0f} polls in {r.bot.seconds:.0f} s)"
        for r in results
    )
    flat = rate[large] / rate[small] if rate[small] > 0 else float("inf")
    notes = [
        "others share this Slurm: in an idle window of the same length just before each "
        "size it served "
        + ", ".join(f"{r.idle.per_minute:.0f}/min (at {r.size:,})" for r in results)
        + "; the figures are not net of that"
    ]
    mid = by_size[middle]
    if mid.anchor is None or not mid.anchor.extra.get("sacct_calls"):
        return Row("P2", P2_MEASURE, figure, "not measured", f"{flat:.2f}x flat", P2_GOAL,
                   "not measured", notes)  # fmt: skip
    anchor_text = "; ".join(
        f"{r.size:,} jobs: {r.anchor.per_minute:.0f}/min ({r.anchor.ctld} ctld + "
        f"{r.anchor.dbd} dbd for {r.anchor.extra['sacct_calls']:.0f} sacct in "
        f"{r.anchor.seconds:.0f} s, {r.anchor.extra['sweeps']:.0f} full sweeps)"
        for r in results
        if r.anchor is not None
    )
    anchor = mid.anchor
    per_job = (anchor.ctld + anchor.dbd) / anchor.extra["sacct_calls"]
    theirs_sweep = per_job * middle
    fewer = theirs_sweep / per_poll[middle] if per_poll[middle] > 0 else float("inf")
    fewer_measured = anchor.per_minute / rate[middle] if rate[middle] > 0 else float("inf")
    notes.append(
        f"at {middle:,} jobs nemo-run needs {theirs_sweep:,.0f} RPCs to learn every job's "
        f"state once ({per_job:.2f} per sacct), trainbot {per_poll[middle]:.1f} per poll; at "
        f"its 2 s interval nemo-run would ask {middle * 30:,}/min, but one sequential sweep "
        f"here takes {middle / anchor.extra['sacct_calls'] * anchor.seconds:.0f} s, so its "
        f"measured rate is sacct's speed on this machine ({fewer_measured:.0f}x trainbot's)"
    )
    ok = flat <= 1.5 and fewer >= 100
    if flat > 1.5:
        notes.append(f"the {large:,}-job rate is {flat:.2f}x the {small:,}-job rate")
    if fewer < 100:
        notes.append(f"only {fewer:.0f}x fewer RPCs per status sweep than nemo-run at {middle:,}")
    return Row(
        "P2", P2_MEASURE, figure, "nemo-run status path: " + anchor_text,
        f"{large:,}/{small:,}: {flat:.2f}x; nemo-run/trainbot per sweep at {middle:,}: "
        f"{fewer:.0f}x ({fewer_measured:.0f}x per minute as measured)",
        P2_GOAL, "pass" if ok else "short", notes,
    )  # fmt: skip


def _p5_row(results: list[SizeResult], sizes: Sizes) -> Row:
    shown = results[1:] if len(results) > 1 else results
    figure = "; ".join(
        f"{r.size:,} jobs: RSS {r.rss / 2**20:.0f} MB, Redis {r.redis / r.size / 1024:.1f} KB/job, "
        f"poll {r.poll_mean_s:.2f} s (mean of {r.polls:.0f})"
        for r in shown
    )
    large = results[-1]
    per_job = large.redis / large.size
    worst_poll = max(r.poll_mean_s for r in results)
    ok = large.rss <= 200 * 2**20 and per_job <= 10 * 1024 and worst_poll <= 2.0
    notes = ["Redis: MEMORY USAGE of every key of the bench database, over the jobs tracked"]
    if not ok:
        notes.append(
            f"at {large.size:,}: RSS {large.rss / 2**20:.0f} MB, {per_job / 1024:.1f} KB/job, "
            f"poll {worst_poll:.2f} s"
        )
    return Row("P5", "bot RSS, Redis bytes per job, one poll's wall time", figure, "-", "-",
               P5_GOAL, "pass" if ok else "short", notes)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smallest sizes (about a minute)")
    parser.add_argument(
        "--results", type=Path, default=None,
        help=f"where to write the Markdown (default: {RESULTS.relative_to(PROJECT)} for a full "
        "run, nowhere for --quick)",
    )  # fmt: skip
    parser.add_argument(
        "--rows", default=",".join(sorted(ALL_ROWS)),
        help="measure only these rows (P2, P5 and P6 share one fleet); a partial run "
        "writes no results file unless --results says where",
    )  # fmt: skip
    parser.add_argument(
        "--sentinels", default="", metavar="HOST:PORT,...",
        help="P1 only: the bot keeps its store through these sentinels (e.g. "
        "devcluster/sentinel's 127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381)",
    )  # fmt: skip
    parser.add_argument(
        "--wait-replicas", type=int, default=None, metavar="N",
        help="with --sentinels: REDIS_WAIT_REPLICAS for the bot (default 1; 0: no WAIT)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    only = frozenset(r.strip().upper() for r in args.rows.split(",") if r.strip())
    if not only <= ALL_ROWS:
        parser.error(f"--rows: unknown {', '.join(sorted(only - ALL_ROWS))}")
    if args.sentinels:
        if only != {"P1"}:
            parser.error("--sentinels measures P1 only; add --rows P1")
        BOT_REDIS_ENV.update(
            REDIS_SENTINELS=args.sentinels,
            REDIS_DB=str(BENCH_DB),
            REDIS_WAIT_REPLICAS=str(1 if args.wait_replicas is None else args.wait_replicas),
        )
    elif args.wait_replicas is not None:
        parser.error("--wait-replicas needs --sentinels")
    problem = dev_cluster_up()
    if problem:
        print(f"bench: the dev cluster is not usable: {problem}", file=sys.stderr)
        return 2
    sizes = QUICK if args.quick else FULL
    workdir = Path(tempfile.mkdtemp(prefix="trainbot-bench-"))
    print(f"bench: logs in {workdir}", flush=True)
    started = datetime.now(UTC)
    loop = asyncio.new_event_loop()
    main_task = loop.create_task(run(sizes, workdir, only))
    for sig in (signal.SIGINT, signal.SIGTERM):  # cancel the run: its finally cleans up
        loop.add_signal_handler(sig, main_task.cancel)
    try:
        rows, method = loop.run_until_complete(main_task)
    except asyncio.CancelledError:
        print("bench: interrupted; jobs cancelled", file=sys.stderr)
        return 130
    finally:
        with contextlib.suppress(Exception):
            loop.close()
    machine = machine_line()
    text = table(rows)
    print()
    print(f"Machine: {machine}")
    print(text)
    print(notes(rows))
    out = args.results or (None if args.quick or only != ALL_ROWS else RESULTS)
    if out is not None:
        out.write_text(
            render_results(
                rows, method, machine, started, "bench/run --quick" if args.quick else "bench/run"
            )
        )
        print(f"bench: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
