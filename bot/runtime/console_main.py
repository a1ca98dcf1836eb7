"""``trainbot console``: the bot with a terminal chat. Also the engine of ``trainbot demo``."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import IO

from bot.console.chat import ConsoleFront, handle_line, read_lines
from bot.runtime.assembly import Bot, running
from bot.settings.config import Config
from bot.settings.env import Settings

CHANNEL = "console"
SETTLE_S = 1.0


async def wait_until_idle(bot: Bot, user: str, *, timeout_s: float | None = None) -> None:
    """Until ``user`` has no active launch and the outbox is delivered."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    while deadline is None or loop.time() < deadline:
        if not await bot.store.history.active_ids(user) and await bot.notifier.drained():
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"launches of {user} still active after {timeout_s} s")


async def run_console(
    settings: Settings,
    config: Config,
    *,
    user: str,
    stdin: IO[str] | None = None,
    out: IO[str] | None = None,
    lines: list[str] | None = None,
) -> int:
    """Read commands (from ``lines``, else stdin) until end of input, then wait for the
    asker's launches to end. Ctrl-C stops at once (launches go on in Slurm)."""
    front = ConsoleFront(out)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with running(settings, config, front) as bot:
            if lines is None:
                front.show_reply_text(
                    f"trainbot console on {', '.join(config.clusters)} as {user}. "
                    "Type /train help; end of input (Ctrl-D) waits for your launches to finish."
                )
            queue = await read_lines(stdin) if lines is None else None
            pending = list(lines or [])
            while not stop.is_set():
                if queue is None:
                    line = pending.pop(0) if pending else None
                else:
                    getter = asyncio.create_task(queue.get())
                    stopper = asyncio.create_task(stop.wait())
                    done, _ = await asyncio.wait(
                        {getter, stopper}, return_when=asyncio.FIRST_COMPLETED
                    )
                    stopper.cancel()
                    if getter not in done:
                        getter.cancel()
                        break
                    line = getter.result()
                if line is None:
                    await asyncio.sleep(SETTLE_S)
                    waiter = asyncio.create_task(wait_until_idle(bot, user))
                    stopper = asyncio.create_task(stop.wait())
                    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                    for task in (waiter, stopper):
                        task.cancel()
                    break
                if queue is None or not (stdin or sys.stdin).isatty():
                    front.echo(f"{user}> {line}")
                await handle_line(line, bot.core, front, user=user, channel=CHANNEL)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return 0
