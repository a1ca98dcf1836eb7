"""/train with a list, /jobs and /cancel of a sweep through the core, against real Redis
and the dev cluster's login node (the start estimate): the answer before anything runs,
the members written at once, grouped in /jobs, and one confirm cancelling each."""

from __future__ import annotations

from bot import keys
from bot.clusters import Clusters
from bot.core import Core
from bot.front import Incoming
from bot.settings import Settings
from bot.slack_text import ACTION_CANCEL
from cluster.ssh import SSHPool
from tests.bot.botkit import dev_config, flush_test_redis, open_test_store

LINE = "sft llama3p1_8b cluster=a4 optim.config.lr=1e-5,3e-5 trainer.max_steps=10,20"


async def test_a_sweep_is_answered_listed_and_cancelled_whole() -> None:
    await flush_test_redis()
    config = dev_config()
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(
            store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
        )

        async def say(command: str, text: str, user: str = "U0ALICE") -> str:
            reply = await core(Incoming(user_id=user, channel_id="C1", command=command, text=text))
            assert not reply.error, reply.text
            return reply.text

        dry = await say("/train", LINE + " dry_run=true")
        assert ": 4 launches of sft · llama3p1_8b on 1 node × a4" in dry
        assert "4. lr=3e-5, max_steps=20" in dry and "Nothing was launched." in dry
        assert await store.redis.xlen(keys.QUEUE) == 0

        said = await say("/train", LINE)
        sweep_id = said.split()[1].rstrip(":")
        assert sweep_id.startswith("S-") and "4 launches" in said
        sweep = await store.get_sweep(sweep_id)
        assert sweep is not None and len(sweep.members) == 4
        assert await store.redis.xlen(keys.QUEUE) == 4

        jobs = await say("/jobs", "")
        assert f"🧪 `{sweep_id}` sweep" in jobs and "4 of 4 members active" in jobs
        assert "↳ #2 (lr=1e-5, max_steps=20)" in jobs

        confirm = await core(
            Incoming(user_id="U0ALICE", channel_id="C1", command="/cancel", text=sweep_id.lower())
        )
        assert confirm.blocks and confirm.text.startswith(f"Cancel sweep {sweep_id} (4 active")
        bob = await core(
            Incoming(
                user_id="U0BOB", channel_id="C1", action_id=ACTION_CANCEL, action_value=sweep_id
            )
        )
        assert bob.error and "or a trainbot admin may cancel it" in bob.text, bob.text
        done = await core(
            Incoming(
                user_id="U0ALICE", channel_id="C1", action_id=ACTION_CANCEL, action_value=sweep_id
            )
        )
        assert done.text.startswith(f"Cancelled sweep {sweep_id}: 4 active member(s)"), done.text
        members = await store.get_many(sweep.members)
        assert all(m is not None and m.outcome == "CANCELLED" for m in members)
        assert "no active launches" in await say("/jobs", "")
