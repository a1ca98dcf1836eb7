"""Loops that cannot die: every long-running loop of a bot runs under a :class:`Supervisor`.

A loop (the workers', the asks', the notifier's) that raises, or returns while the bot
runs, is logged, counted and started again after a back-off (1 s doubling up to 10 s;
back to 1 s once a run has lasted ``steady_after_s``). The schedulers' jobs (the
poller's polls, leases, charges; the usage report) are run again by their scheduler at
their next time: :meth:`Supervisor.watch_scheduler` counts and shows their failures the
same way. ``/healthz`` reads :meth:`Supervisor.problems`: a loop that failed and has not
yet run ``steady_after_s`` since (or a job whose last two runs raised) is failing, which
is a 503 naming it; one restarted and running well since is said on a 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 10.0
STEADY_AFTER_S = 5.0  # a restarted loop that runs this long without raising is well again
# A scheduled job is failing once its run after a failed one (its restart) failed too: one
# failed poll while Redis was away is not a poller that keeps failing, and a job that runs
# once a minute must not keep /healthz at 503 for a minute after Redis is back.
JOB_FAILING_AFTER = 2
ERROR_CHARS = 200  # the last error as /healthz shows it

Loop = Callable[[], Coroutine[Any, Any, None]]


@dataclass
class LoopHealth:
    """What the supervisor knows of one loop (or one scheduled job)."""

    name: str
    restarts: int = 0  # for a scheduled job: runs that raised (the next run is its restart)
    last_error: str = ""
    backing_off: bool = False  # waiting out its back-off before the next start
    run_started: float = 0.0  # monotonic start of the run under way
    runs_failed: int = 0  # a scheduled job's runs that raised in a row (0: its last ran well)

    def failing(self, now: float, steady_after_s: float) -> bool:
        """Whether it failed and has not run well since."""
        if self.runs_failed >= JOB_FAILING_AFTER or self.backing_off:
            return True
        return (
            self.restarts > 0 and now - self.run_started < steady_after_s and bool(self.last_error)
        )

    def line(self) -> str:
        """``asks (restarted 2 times; last error: StoreError: ...)``."""
        times = "once" if self.restarts == 1 else f"{self.restarts} times"
        return f"{self.name} (restarted {times}; last error: {self.last_error})"


def describe_error(exc: BaseException, redact: Callable[[str], str] = lambda text: text) -> str:
    """An exception as one short line: its type and message, redacted before it is cut
    (a secret cut in two would no longer be recognised)."""
    text = redact(" ".join(str(exc).split()))
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"


class Supervisor:
    """Starts loops, restarts those that fail, and says which are failing or restarted."""

    def __init__(
        self,
        stop: asyncio.Event,
        *,
        redact: Callable[[str], str] = lambda text: text,
        first_backoff_s: float = FIRST_BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
        steady_after_s: float = STEADY_AFTER_S,
    ) -> None:
        self.stop = stop
        self.redact = redact
        self.first_backoff_s = first_backoff_s
        self.max_backoff_s = max_backoff_s
        self.steady_after_s = steady_after_s
        self.loops: dict[str, LoopHealth] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.observers: list[Callable[[str], None]] = []  # told a loop's name at each restart

    def run(self, name: str, loop: Loop) -> asyncio.Task[None]:
        """Run ``loop()`` (a new coroutine at each start) until ``stop`` is set."""
        self.loops[name] = LoopHealth(name, run_started=time.monotonic())
        task = asyncio.create_task(self._keep(name, loop), name=name)
        self.tasks.append(task)
        return task

    async def _keep(self, name: str, loop: Loop) -> None:
        health = self.loops[name]
        delay_s = self.first_backoff_s
        while not self.stop.is_set():
            health.run_started = time.monotonic()
            try:
                await loop()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = describe_error(exc, self.redact)
                log.exception("loop %s failed; starting it again in %.1f s", name, delay_s)
            else:
                if self.stop.is_set():
                    return
                error = "it returned while the bot runs"
                log.error("loop %s ended on its own; starting it again in %.1f s", name, delay_s)
            if time.monotonic() - health.run_started >= self.steady_after_s:
                delay_s = self.first_backoff_s  # it had run well: a new episode
            health.last_error = error
            health.backing_off = True
            self._restarted(name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), delay_s)
            health.backing_off = False
            health.restarts += 1
            delay_s = min(delay_s * 2, self.max_backoff_s)

    def _restarted(self, name: str) -> None:
        for observer in self.observers:
            try:
                observer(name)
            except Exception:  # a metric hook must not stop a restart
                log.exception("loop %s: a restart observer failed", name)

    def watch_scheduler(self, part: str, scheduler: AsyncIOScheduler) -> None:
        """Count and show the failures of ``scheduler``'s jobs (``part``: whose they are);
        a job is well again once a run of it ends without raising."""

        def seen(event: JobExecutionEvent) -> None:
            name = f"{part} {event.job_id}"
            health = self.loops.setdefault(name, LoopHealth(name))
            if event.exception is None:
                health.runs_failed = 0
                return
            health.runs_failed += 1
            health.restarts += 1
            health.last_error = describe_error(event.exception, self.redact)
            self._restarted(name)

        scheduler.add_listener(seen, EVENT_JOB_ERROR | EVENT_JOB_EXECUTED)

    def problems(self) -> tuple[list[str], list[str]]:
        """(failing, restarted): lines for the loops failing now, and for those that were
        restarted and run well since. A loop's task that ended while the bot runs is
        failing too. (A stopped scheduler is for ``/healthz`` to judge: another process
        may hold the poller's leases.)"""
        now = time.monotonic()
        failing: list[str] = []
        restarted: list[str] = []
        for health in self.loops.values():
            if health.failing(now, self.steady_after_s):
                failing.append(health.line())
            elif health.restarts:
                restarted.append(health.line())
        if not self.stop.is_set():
            failing += [f"{t.get_name()} (stopped)" for t in self.tasks if t.done()]
        return failing, restarted

    async def wait(self, timeout_s: float) -> None:
        """Let every loop see ``stop`` for up to ``timeout_s``, then cancel the rest."""
        if not self.tasks:
            return
        _, pending = await asyncio.wait(self.tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
