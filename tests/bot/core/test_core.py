"""The core against a real Redis (no cluster): who may manage a launch."""

from __future__ import annotations

from pathlib import Path

from bot.core.core import Core
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.settings.config import load_config
from bot.settings.env import Settings
from bot.text.actions import ACTION_HELP
from bot.text.front import Incoming
from bot.text.mrkdwn import HELP_TOPICS
from cluster.ssh.pool import SSHPool
from commands.requests import TrainRequest
from tests.bot.botkit import flush_test_redis, open_test_store

EXAMPLE = Path(__file__).resolve().parents[3] / "trainbot.example.yaml"


async def test_only_the_owner_or_an_admin_may_cancel_or_attach() -> None:
    await flush_test_redis()
    config = load_config(EXAMPLE)  # admins: U0ADMIN
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(
            store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
        )
        launch = Launch(request=request, user_id="U0ALICE", user_name="alice", channel="C1")
        await store.launches.create(launch, [Event("parent", launch.id)], enqueue=False)

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
            await store.launches.create(launch, [Event("parent", launch.id)], enqueue=False)
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


async def test_jobs_history_lists_finished_launches_and_only_admins_see_everyones() -> None:
    await flush_test_redis()
    config = load_config(EXAMPLE)  # admins: U0ADMIN
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(
            store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
        )
        made = {}
        for user, outcome in (("U0ALICE", "COMPLETED"), ("U0BOB", "FAILED")):
            request = TrainRequest(
                workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4"
            )
            launch = Launch(request=request, user_id=user, user_name=user.lower(), channel="C1")
            await store.launches.create(launch, [Event("parent", launch.id)], enqueue=False)

            def finish(stored: Launch, outcome: str = outcome) -> list[Event]:
                stored.phase, stored.outcome, stored.gpu_hours = Phase.DONE, outcome, 10.9
                stored.permalink = f"https://standin.slack.com/archives/C1/p{stored.id[2:]}"
                return []

            await store.launches.mutate(launch.id, finish)
            made[user] = launch.id

        async def jobs(user: str, text: str) -> tuple[bool, str]:
            reply = await core(Incoming(user_id=user, channel_id="C1", command="/jobs", text=text))
            return reply.error, reply.text

        error, mine = await jobs("U0ALICE", "history")
        assert not error and made["U0ALICE"] in mine and made["U0BOB"] not in mine
        assert "COMPLETED" in mine and "11 GPU-hours" in mine and "|thread>" in mine
        assert await jobs("U0ALICE", "") == (
            False,
            "You have no active launches. /jobs all shows everyone's.",
        )
        error, refused = await jobs("U0ALICE", "all history")
        assert error and refused.startswith("Only trainbot admins see everyone's history")
        error, everyone = await jobs("U0ADMIN", "all history days=30")
        assert not error and made["U0ALICE"] in everyone and made["U0BOB"] in everyone
        error, other = await jobs("U0ALICE", "history cluster=a3m")
        assert (error, other) == (
            False,
            "You have no launches that finished on a3m in the last 7 days.",
        )


async def test_the_help_cards_buttons_answer_as_the_commands_they_name() -> None:
    await flush_test_redis()
    config = load_config(EXAMPLE)
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(
            store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
        )

        async def typed(command: str, text: str) -> str:
            reply = await core(
                Incoming(user_id="U0ALICE", channel_id="C1", command=command, text=text)
            )
            return reply.text

        async def clicked(value: str) -> tuple[bool, str]:
            reply = await core(
                Incoming(
                    user_id="U0ALICE", channel_id="C1", action_id=ACTION_HELP, action_value=value
                )
            )
            return reply.error, reply.text

        for value, (command, text) in HELP_TOPICS.items():
            error, answer = await clicked(value)
            assert not error and answer == await typed(command, text), value
        assert (await clicked("train"))[1].startswith("`/train <workload> <model>")
        assert "Launch a recipe" in (await clicked("train"))[1]
        # A forged click names no command of its own choosing.
        error, answer = await clicked("cancel L-7f3a9c2b41")
        assert error and "not one trainbot made" in answer
