"""``trainbot demo``: the main job on the embedded default.

The dev cluster is not part of the product: its scripts live in trainbot's checkout
(``devcluster/``, and ``scripts/devcluster-ensure`` which brings it and Redis up when
needed). The demo finds that checkout beside the package or in the current directory,
runs the script, then runs a real /train in the console and follows it to its final state.
With ``bastion``, the config is ``.devcluster/trainbot-bastion.yaml``: the same cluster as
a generic Slurm GPU cluster, reached only through the dev cluster's bastion.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from bot.console.chat import ConsoleFront, handle_line
from bot.runtime.assembly import running
from bot.runtime.console_main import wait_until_idle
from bot.settings.config import load_config
from bot.settings.env import Settings
from cluster.errors import TrainbotError

ENSURE = Path("scripts") / "devcluster-ensure"
DEV_CONFIG = Path(".devcluster") / "trainbot.yaml"
BASTION_CONFIG = Path(".devcluster") / "trainbot-bastion.yaml"
TRAIN = "sft llama3p1_8b nodes=2 cluster=a4"
BASTION_TRAIN = "sft llama3p1_8b nodes=2 cluster=hpc"
USER = "demo"
TIMEOUT_S = 900.0


def find_checkout(*candidates: Path) -> Path:
    """The first of ``candidates`` that holds the dev cluster's scripts (default: the
    directory above this package, then the current directory)."""
    places = candidates or (Path(__file__).resolve().parents[1], Path.cwd())
    for place in places:
        if (place / ENSURE).is_file() and (place / "devcluster" / "up").is_file():
            return place
    looked = ", ".join(str(p) for p in dict.fromkeys(places))
    raise TrainbotError(
        f"trainbot demo needs a checkout of trainbot's repository (it holds the dev "
        f"cluster's scripts, {ENSURE} and devcluster/up); none found in {looked}. "
        "Run it from the checkout (scripts/demo), or use trainbot console with your own config"
    )


def bring_up(checkout: Path, config_file: Path = DEV_CONFIG) -> Path:
    """Run the checkout's ``scripts/devcluster-ensure``; the dev cluster's config file."""
    proc = subprocess.run([str(checkout / ENSURE)], stdout=sys.stdout, stderr=sys.stderr)
    if proc.returncode != 0:
        raise TrainbotError(f"{ENSURE} failed (exit {proc.returncode}): see above")
    config = checkout / config_file
    if not config.is_file():
        raise TrainbotError(f"{config} is missing after {ENSURE}: run sudo devcluster/up")
    return config


async def run_demo(settings: Settings, train: str | None = None, *, bastion: bool = False) -> int:
    config = load_config(bring_up(find_checkout(), BASTION_CONFIG if bastion else DEV_CONFIG))
    train = train or (BASTION_TRAIN if bastion else TRAIN)
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
        launch = await bot.store.launches.get(match.group(0))
    outcome = launch.outcome if launch else "UNKNOWN"
    print(f"demo: {match.group(0)} ended {outcome}", flush=True)
    return 0 if outcome == "COMPLETED" else 1
