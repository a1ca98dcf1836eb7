"""What /train does before its ack (the core's answer is the ack, inside Slack's 3 s):
how many round trips to Redis it makes, and that it does not wait for a start estimate
that is being asked again. Counted, not timed: a real Redis, and a stand-in for the
workers the web role asks for Slurm's estimate."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection

from bot.core.core import Core
from bot.gateway.on_cluster import Clusters
from bot.planning.cost import StartEstimates
from bot.settings.config import Config, load_config
from bot.settings.env import Settings
from bot.store.store import Store
from bot.text.front import Incoming
from cluster.slurm.sbatch import JobShape, StartEstimate
from cluster.ssh.pool import SSHPool

EXAMPLE = Path(__file__).resolve().parents[3] / "trainbot.example.yaml"
TRAIN = "sft llama3p1_8b cluster=a4 nodes=1"
# Before its ack a /train by someone with no active launch reaches Redis this often:
# their active launches read with the launch counted against their rate limit (one
# pipeline), the earlier runs of the recipe (the GPU-hour estimate), and the create:
# WATCH, whether its id is taken with the owner's active launches (one script), and
# MULTI/EXEC. (The HTTP front end's replay guard is one more, before the core.)
TRAIN_ROUND_TRIPS = 5


def plain_config() -> Config:
    """The example's policy without budgets (they add their own reads), everyone on the
    shared login account."""
    config = load_config(EXAMPLE)
    policy = config.policy.model_copy(update={"budgets": (), "team_budgets": ()})
    shared = {
        name: profile.model_copy(update={"identity": None})
        for name, profile in config.clusters.items()
    }
    return config.model_copy(update={"policy": policy, "clusters": shared})


class Workers:
    """The workers as the web role sees them: each estimate is an ask that waits until
    ``answer`` lets it go (``answer`` set: each answers at once)."""

    acts_as_people = True

    def __init__(self) -> None:
        self.asked = 0
        self.answer = asyncio.Event()
        self.answer.set()

    async def start_estimate(
        self,
        cluster: str,
        shape: JobShape,
        *,
        user_id: str,
        cluster_user: str,
        timeout_s: float,
        groups: frozenset[str] = frozenset(),
    ) -> StartEstimate:
        self.asked += 1
        asked = self.asked
        await self.answer.wait()
        return StartEstimate(start=None, error=f"answer {asked}")


def core_for(store: Store, pool: SSHPool, workers: Workers) -> Core:
    config = plain_config()
    clusters = Clusters(config, Settings.from_environ({}), pool)
    return Core(store, clusters, config.command_context(), calls=workers)  # type: ignore[arg-type]


async def train(core: Core, user: str) -> str:
    reply = await core(Incoming(user_id=user, channel_id="C1", command="/train", text=TRAIN))
    assert not reply.error, reply.text
    return reply.text


async def test_a_train_reaches_redis_a_counted_number_of_times_before_its_ack(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SSHPool() as pool:
        workers = Workers()
        core = core_for(store, pool, workers)
        await train(core, "U0FIRST")  # the estimate of this shape is asked (and kept)
        sent = 0
        send = AbstractConnection.send_packed_command

        async def counted(self: AbstractConnection, *args: Any, **kwargs: Any) -> None:
            nonlocal sent
            sent += 1
            await send(self, *args, **kwargs)

        monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
        text = await train(core, "U0SECOND")
        monkeypatch.undo()
    assert text.startswith("Queued L-") and "answer 1" in text, text
    assert sent == TRAIN_ROUND_TRIPS, sent


async def test_a_train_does_not_wait_for_an_estimate_being_asked_again(store: Store) -> None:
    """Once a shape's estimate is known, the answers do not wait while it is asked
    again (a worker's round trip): they say the last one until the new one comes."""
    async with SSHPool() as pool:
        workers = Workers()
        core = core_for(store, pool, workers)
        core.launcher.planner.estimates = StartEstimates(ttl_s=0.0, stale_s=3600.0)  # asked anew
        assert "answer 1" in await train(core, "U0A")
        workers.answer.clear()  # the workers are slow now: nothing answers
        answers = [
            await asyncio.wait_for(train(core, f"U0B{i}"), 30) for i in range(3)
        ]  # (the wait_for only keeps a regression from hanging here)
        assert all("answer 1" in text for text in answers), answers
        assert workers.asked == 4  # each asked again, none waited for
        workers.answer.set()
        for _ in range(10):  # the asks answer
            await asyncio.sleep(0)
        assert "answer " in await train(core, "U0C")
        assert "answer 1" not in await train(core, "U0D")


async def test_without_a_known_estimate_the_first_train_waits_for_it(store: Store) -> None:
    async with SSHPool() as pool:
        workers = Workers()
        workers.answer.clear()
        core = core_for(store, pool, workers)
        first = asyncio.create_task(train(core, "U0A"))
        await asyncio.sleep(0.05)
        assert not first.done()  # waiting for the workers (up to its timeout)
        workers.answer.set()
        assert "answer 1" in await first
