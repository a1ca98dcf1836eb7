"""Loops that cannot die (bot.runtime.supervise): a loop that raises is started again
after a back-off and counted; /healthz names it while it fails and says it was restarted
once it runs well; a scheduled job's failure shows the same way; and under a running bot
a malformed ask, which used to end the workers' ask loop for good, leaves it answering."""

from __future__ import annotations

import asyncio

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.console.chat import ConsoleFront
from bot.gateway.asks import WorkerAsks
from bot.runtime.assembly import running
from bot.runtime.supervise import Supervisor, describe_error
from bot.store import keys
from support.workspace import ASK_KEY
from tests.bot.botkit import bot_settings, dev_config, flush_test_redis, wait_until


async def test_a_loop_that_raises_is_restarted_counted_and_said() -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(
        stop,
        redact=lambda text: text.replace("s3cret-value", "[redacted]"),
        first_backoff_s=0.05,
        max_backoff_s=0.2,
        steady_after_s=0.3,
    )
    seen: list[str] = []
    supervisor.observers.append(seen.append)
    starts = 0

    async def flaky() -> None:
        nonlocal starts
        starts += 1
        if starts <= 2:
            raise RuntimeError("Redis away (password s3cret-value)")
        await stop.wait()

    supervisor.run("asks", flaky)
    await wait_until(lambda: asyncio.sleep(0, starts >= 3), "a third start", 5, 0.01)
    failing, restarted = supervisor.problems()
    assert failing == [
        "asks (restarted 2 times; last error: RuntimeError: Redis away (password [redacted]))"
    ]  # restarted, but not yet running long enough to count as well
    assert restarted == []
    await asyncio.sleep(0.4)
    failing, restarted = supervisor.problems()
    assert failing == []
    assert restarted == [
        "asks (restarted 2 times; last error: RuntimeError: Redis away (password [redacted]))"
    ]
    assert seen == ["asks", "asks"]
    stop.set()
    await supervisor.wait(2)
    assert all(task.done() for task in supervisor.tasks)
    assert supervisor.problems() == ([], [restarted[0]])  # a stopped bot: nothing failing


async def test_a_loop_that_returns_while_the_bot_runs_is_started_again() -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(stop, first_backoff_s=0.01, steady_after_s=10)
    starts = 0

    async def quits() -> None:
        nonlocal starts
        starts += 1
        if starts > 1:
            await stop.wait()

    supervisor.run("notifier", quits)
    await wait_until(lambda: asyncio.sleep(0, starts >= 2), "a second start", 5, 0.01)
    failing, _ = supervisor.problems()
    assert failing == ["notifier (restarted once; last error: it returned while the bot runs)"]
    stop.set()
    await supervisor.wait(2)


async def test_a_scheduled_job_that_keeps_raising_is_failing_until_a_run_ends_well() -> None:
    stop = asyncio.Event()
    supervisor = Supervisor(stop)
    scheduler = AsyncIOScheduler()
    supervisor.watch_scheduler("poller", scheduler)
    outcomes = [ConnectionError("Redis away"), ConnectionError("Redis away"), None]

    async def poll() -> None:
        error = outcomes.pop(0) if outcomes else None
        if error is not None:
            raise error

    scheduler.add_job(poll, "interval", seconds=0.3, id="poll-a4", max_instances=1)
    scheduler.start()
    try:
        await wait_until(
            lambda: asyncio.sleep(0, "poller poll-a4" in supervisor.loops), "a run", 5, 0.01
        )
        assert supervisor.problems() == (
            [],
            ["poller poll-a4 (restarted once; last error: ConnectionError: Redis away)"],
        )  # one failed run (Redis away a moment) is not yet a job that keeps failing
        await wait_until(
            lambda: asyncio.sleep(0, supervisor.problems()[0]), "the job's failure", 5, 0.05
        )
        assert supervisor.problems()[0] == [
            "poller poll-a4 (restarted 2 times; last error: ConnectionError: Redis away)"
        ]  # its run after a failed one failed too: failing
        await wait_until(
            lambda: asyncio.sleep(0, not supervisor.problems()[0]), "a run that ends well", 5, 0.05
        )
        assert supervisor.problems()[1] == [
            "poller poll-a4 (restarted 2 times; last error: ConnectionError: Redis away)"
        ]
    finally:
        scheduler.shutdown(wait=False)


def test_an_error_is_one_short_line() -> None:
    assert describe_error(ValueError("a\n  b")) == "ValueError: a b"
    assert describe_error(KeyError()) == "KeyError"
    assert len(describe_error(RuntimeError("x" * 1000))) == 200
    # a secret astride the cut is redacted before the cut, not left half shown
    secret = "s3cret-" + "y" * 20
    cut = describe_error(
        RuntimeError("x" * 180 + secret), lambda text: text.replace(secret, "[redacted]")
    )
    assert "s3cret" not in cut and cut.endswith("[reda…")  # redacted, then cut


async def test_a_malformed_ask_leaves_the_ask_loop_answering() -> None:
    """A malformed ask once ended the workers' ask loop for good. Now it is dropped (the
    loop checks each ask; the supervisor would start a loop that raised again), and the
    next ask is answered."""
    await flush_test_redis()
    async with running(bot_settings(), dev_config(), ConsoleFront(), workers=1) as bot:
        bot.supervisor.first_backoff_s, bot.supervisor.steady_after_s = 0.05, 0.2
        await bot.store.redis.rpush(keys.ASKS, "{not json")  # written by anyone who reaches Redis
        capacity = await WorkerAsks(bot.store, ASK_KEY.encode()).capacity("a3m")
        assert capacity.partitions  # answered by the same loop, or by its restart
        assert not bot.supervisor.loops["asks"].backing_off
        await asyncio.sleep(0.3)
        ok, said = await bot.healthy()
        assert ok and "failing" not in said, said
