"""``trainbot demo``: the main job on the embedded default.

Brings up the local dev cluster and Redis (devcluster/up, as root), then runs
a real /train in the console and follows it to its final state.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from bot.config import load_config
from bot.console import ConsoleFront, handle_line
from bot.console_main import wait_until_idle
from bot.service import running
from bot.settings import Settings
from cluster.errors import TrainbotError

PROJECT = Path(__file__).resolve().parents[1]
UP = PROJECT / "devcluster" / "up"
DEV_CONFIG = PROJECT / ".devcluster" / "trainbot.yaml"
USER = "demo"
TIMEOUT_S = 900.0


def bring_up() -> None:
    if os.geteuid() == 0:
        print(f"demo: bringing up the dev cluster ({UP.relative_to(PROJECT)})", flush=True)
        proc = subprocess.run([str(UP)], stdout=sys.stdout, stderr=sys.stderr)
        if proc.returncode != 0:
            raise TrainbotError(f"devcluster/up failed (exit {proc.returncode})")
    elif not DEV_CONFIG.exists():
        raise TrainbotError(
            "the dev cluster is not up and bringing it up needs root: sudo devcluster/up"
        )


async def run_demo(settings: Settings, train: str) -> int:
    bring_up()
    config = load_config(DEV_CONFIG)
    front = ConsoleFront()
    async with running(settings, config, front) as bot:
        for line in ("/clusters", f"/train {train}"):
            front.echo(f"{USER}> {line}")
            reply = await handle_line(line, bot.core, front, user=USER)
        if reply is None or reply.error:
            return 1
        match = re.search(r"\bL-[0-9a-f]+\b", reply.text)
        if not match:
            return 1
        await wait_until_idle(bot, USER, timeout_s=TIMEOUT_S)
        launch = await bot.store.get(match.group(0))
    outcome = launch.outcome if launch else "UNKNOWN"
    print(f"demo: {match.group(0)} ended {outcome}", flush=True)
    return 0 if outcome == "COMPLETED" else 1
