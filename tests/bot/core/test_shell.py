"""/train interactive node=<n> against a real Redis (no cluster): a shell on node n of the
person's own running interactive job, as the guide's nemorlinteractive <n>."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.core import Core
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.settings.config import load_config
from bot.settings.env import Settings
from bot.text.front import Incoming
from cluster.ssh.pool import SSHPool
from commands.requests import InteractiveRequest
from tests.bot.botkit import open_test_store

pytestmark = pytest.mark.usefixtures("clean_redis")
EXAMPLE = Path(__file__).resolve().parents[3] / "trainbot.example.yaml"


async def test_a_shell_on_a_node_of_ones_own_running_interactive_job() -> None:
    config = load_config(EXAMPLE)
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(
            store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
        )
        request = InteractiveRequest(cluster="a3m", nodes=2)  # a3m: no identity map
        launch = Launch(request=request, user_id="U0ALICE", user_name="alice", channel="C1")
        launch.phase = Phase.RUNNING
        launch.attempts.append(Attempt(number=1, job_id="4201", node_list="a3m-[3-4]"))
        await store.launches.create(launch, [Event("parent", launch.id)], enqueue=False)

        async def ask(user: str, text: str) -> tuple[bool, str]:
            reply = await core(Incoming(user_id=user, channel_id="C1", command="/train", text=text))
            return reply.error, reply.text

        error, text = await ask("U0ALICE", "interactive node=1")
        assert not error, text
        assert "node 1 (a3m-4) of your job 4201" in text
        assert "srun --jobid=4201 --overlap --nodes=1 --ntasks=1 --relative=1 --pty bash -l" in text
        error, text = await ask("U0ALICE", "interactive node=2 cluster=a3m")
        assert error and "has 2 nodes: give node=0 to node=1" in text, text
        error, text = await ask("U0ALICE", "interactive node=0 cluster=a4")
        assert error and text.startswith("You have no running interactive job on a4"), text
        error, text = await ask("U0BOB", "interactive node=0")  # not theirs
        assert error and text.startswith("You have no running interactive job:"), text
        error, text = await ask("U0ALICE", "interactive node=x")
        assert error and "node=x is not a whole number" in text, text
        error, text = await ask("U0ALICE", "interactive node=0 nodes=2")
        assert error and "Unknown key 'nodes' for /train interactive node=" in text, text
