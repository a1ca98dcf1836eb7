"""The core against a real Redis (no cluster): who may manage a launch."""

from __future__ import annotations

from pathlib import Path

from bot.clusters import Clusters
from bot.config import load_config
from bot.core import Core
from bot.front import Incoming
from bot.launches import Launch
from bot.settings import Settings
from bot.store import Event
from cluster.ssh import SSHPool
from commands.requests import TrainRequest
from tests.bot.botkit import flush_test_redis, open_test_store

EXAMPLE = Path(__file__).resolve().parents[2] / "trainbot.example.yaml"


async def test_only_the_owner_or_an_admin_may_cancel_or_attach() -> None:
    await flush_test_redis()
    config = load_config(EXAMPLE)  # admins: U0ADMIN
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(
            store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
        )
        launch = Launch(request=request, user_id="U0ALICE", user_name="alice", channel="C1")
        await store.create(launch, [Event("parent", launch.id)], enqueue=False)

        async def ask(user: str, command: str) -> tuple[bool, str]:
            reply = await core(
                Incoming(user_id=user, channel_id="C1", command=command, text=launch.id)
            )
            return reply.error, reply.text

        refused = f"Only alice (who launched {launch.id}) or a trainbot admin may"
        assert await ask("U0BOB", "/cancel") == (True, f"{refused} cancel it.")
        assert await ask("U0BOB", "/attach") == (True, f"{refused} attach to it.")
        for user in ("U0ALICE", "U0ADMIN"):
            error, text = await ask(user, "/cancel")
            assert not error and text.startswith(f"Cancel launch {launch.id} "), text


async def test_jobs_cluster_filter_lists_only_that_cluster() -> None:
    await flush_test_redis()
    config = load_config(EXAMPLE)
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(
            store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
        )
        made = {}
        for cluster in ("a4", "a3m"):
            request = TrainRequest(
                workload="sft", model="llama3p1_8b", framework="nemo", cluster=cluster
            )
            launch = Launch(request=request, user_id="U0ALICE", user_name="alice", channel="C1")
            await store.create(launch, [Event("parent", launch.id)], enqueue=False)
            made[cluster] = launch.id

        async def jobs(text: str) -> str:
            reply = await core(
                Incoming(user_id="U0ALICE", channel_id="C1", command="/jobs", text=text)
            )
            assert not reply.error, reply.text
            return reply.text

        everything = await jobs("")
        assert made["a4"] in everything and made["a3m"] in everything
        only = await jobs("cluster=a4")
        assert made["a4"] in only and made["a3m"] not in only
        other = await jobs("cluster=a3m")
        assert made["a3m"] in other and made["a4"] not in other
