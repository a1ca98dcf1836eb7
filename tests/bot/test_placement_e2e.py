"""cluster=auto, reroute and from= on the dev cluster.

The dev cluster's four partitions span the same four nodes, so Slurm gives every one
the same start for the same job. To make partition a4 full while another cluster
can start a job now, the test config gives a3u nodes of 4 GPUs (``gpus_per_node``,
as a site with smaller machines would) and other jobs take 4 GPUs of every node
through partition a4: an 8-GPU-per-node job (a4, a3m, a3h) waits for them, a
4-GPU-per-node one (a3u) starts now."""

from __future__ import annotations

import asyncio
import io
import re

import pytest

from bot.console import ConsoleFront, handle_line
from bot.service import running
from tests.bot.botkit import bot_settings, dev_config, flush_test_redis, login_run, wait_until

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]

NODES = 4
FILL_S = 90
ESTIMATE_TIMEOUT_S = 15.0  # this machine is shared and slow


@pytest.fixture(autouse=True)
async def clean_redis() -> None:
    await flush_test_redis()


def small_a3u(text: str) -> str:
    found = "  a3u:\n    type: hcc-a3u\n"
    assert found in text
    return text.replace(found, found + "    gpus_per_node: 4\n")


async def fill_a4(tag: str) -> list[str]:
    """Jobs of other people in partition a4 taking 4 GPUs of every node; their ids."""
    ids = []
    for i in range(NODES):
        out = await asyncio.to_thread(
            login_run,
            f"sbatch --parsable -J {tag}-fill{i} -o /dev/null -N 1 -w dev{i} -p a4 -t 3 "
            f"--gres=gpu:4 --wrap='sleep {FILL_S}'",
        )
        ids.append(out.strip().split(";")[0])

    async def all_running() -> bool:
        out = await asyncio.to_thread(login_run, f"squeue -h -o %T -j {','.join(ids)}")
        return out.split() == ["RUNNING"] * NODES

    await wait_until(all_running, "the filling jobs to run", timeout_s=240, interval_s=1)
    return ids


async def test_auto_picks_a_cluster_that_starts_now_and_says_why(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    fill: list[str] = []
    try:
        config = dev_config(edit=small_a3u)
        async with running(bot_settings(), config, front, workers=0) as bot:
            bot.core.start_estimate_timeout_s = ESTIMATE_TIMEOUT_S
            fill = await fill_a4(unique)
            reply = await handle_line(
                f"/train sft llama3p1_8b nodes=2 cluster=auto name={unique} dry_run=true",
                bot.core,
                front,
                user="alice",
            )
            launch = None
            if reply is not None and (found := re.search(r"L-[0-9a-f]+", reply.text)):
                launch = await bot.store.get(found.group(0))
        assert reply is not None and not reply.error, reply
        said = re.search(
            r"cluster=auto chose a3u \((.*)\): Slurm starts it there first", reply.text
        )
        assert said, reply.text
        waits = dict(part.split(": ", 1) for part in said.group(1).split("; "))
        assert list(waits) == ["a3m", "a3u", "a4", "a3h"], waits
        assert waits["a3u"] == "now", waits
        for name in ("a3m", "a4", "a3h"):  # the 8-GPU nodes are half taken until the fill ends
            assert re.fullmatch(r"in \d+ min", waits[name]), waits
        assert launch is not None and launch.cluster == "a3u", launch
        assert launch.request.cluster == "a3u"
    finally:
        if fill:
            await asyncio.to_thread(login_run, f"scancel {' '.join(fill)}", check=False)
