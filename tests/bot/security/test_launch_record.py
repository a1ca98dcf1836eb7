"""A launch record rewritten in Redis never runs as another user or with another image: the
worker re-derives whom a launch runs as from the config (U0ALICE is alice here) and
whether its image is allowed from the policy, refuses a record that says otherwise (the
launch ends with the reason, a log line says why) and nothing reaches Slurm. A record
left alone goes through. A real worker (and poller), the dev cluster's login node and Slurm."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.engine.poller import Poller
from bot.engine.worker import Worker, worker_name
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.launch import Launch, Phase
from bot.store.store import Store
from cluster.ssh.pool import SSHPool
from commands.requests import TrainRequest
from tests.bot.botkit import (
    bot_settings,
    dev_config,
    ended_with,
    launch_in,
    open_test_store,
    slurm_jobs_named,
    wait_until,
)
from tests.bot.security.asks_kit import PEOPLE, AskWorker, seeded

pytestmark = pytest.mark.devcluster


async def queued(store: Store, unique: str, *, dry_run: bool = False) -> Launch:
    request = TrainRequest(
        workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4", nodes=1,
        name=unique, dry_run=dry_run,
    )  # fmt: skip
    launch = Launch(
        request=request, user_id="U0ALICE", channel="C0TRAIN", parent_ts="1.0",
        cluster_user="alice",
    )  # fmt: skip
    await store.launches.create(launch, [], enqueue=True)
    return launch


async def ended(store: Store, launch_id: str) -> Launch:
    async def done() -> Launch | None:
        launch = await store.launches.get(launch_id)
        return launch if launch is not None and not launch.active else None

    return await wait_until(done, f"{launch_id} to end", 60, 0.2)


async def test_a_record_rewritten_to_another_user_or_image_never_runs(
    unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    rewrites: list[dict[str, Any]] = [
        {"cluster_user": "bob"},  # another person
        {"cluster_user": "root"},
        {"cluster_user": ""},  # the shared account, which U0ALICE is not
    ]
    async with open_test_store() as store, SSHPool() as pool:
        clusters = Clusters(dev_config(people=PEOPLE), bot_settings(), pool, store)
        tamper = AskWorker(store, clusters, None)  # type: ignore[arg-type]
        launches = []
        for number, fields in enumerate(rewrites):
            launch = await queued(store, f"{unique}u{number}")
            await tamper.rewrite(launch.id, **fields)
            launches.append(launch)
        image = await queued(store, f"{unique}img")
        record = (await launch_in(store, image.id)).model_dump(mode="json")
        await tamper.rewrite(
            image.id, request={**record["request"], "image": "/tmp/evil-image.sqsh"}
        )
        untouched = await queued(store, f"{unique}ok", dry_run=True)
        stop = asyncio.Event()
        worker = Worker(store, clusters, name=worker_name("sectest"))
        task = asyncio.create_task(worker.run(stop))
        try:
            refused = [await ended(store, launch.id) for launch in (*launches, image)]
            control = await ended(store, untouched.id)
        finally:
            stop.set()
            await task
    for launch, fields in zip(refused, [*rewrites, {}], strict=True):
        assert launch.phase == Phase.REJECTED and launch.outcome == "NOT_SUBMITTED", launch
        assert not launch.attempts or not launch.attempts[-1].job_id
        if fields:
            who = fields["cluster_user"] or "trainer"
            assert f"its record names the Unix user {who}" in ended_with(launch), ended_with(launch)
            assert "the configuration maps U0ALICE to alice" in ended_with(launch)
        else:
            assert "image=/tmp/evil-image.sqsh" in ended_with(launch), ended_with(launch)
    assert control.phase == Phase.DRY_RUN, control  # the path itself works as alice
    assert slurm_jobs_named(unique) == []  # nothing reached Slurm
    said = caplog.text
    assert "refused: its record says it runs as 'bob' on a4" in said
    assert "refused: its record says it runs as 'root' on a4" in said
    assert "refused: its record asks for image /tmp/evil-image.sqsh" in said
    assert "signed a certificate for root" not in said
    assert "signed a certificate for bob" not in said


async def test_the_poller_never_reads_as_the_user_a_rewritten_record_names(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO")
    async with open_test_store() as store, SSHPool() as pool:
        clusters = Clusters(dev_config(people=PEOPLE), bot_settings(), pool, store)
        launch = await seeded(store, job_id="990001", log_path="/home/bob/.ssh/id_ed25519")
        honest = await seeded(store, job_id="990002", log_path="/home/alice/x/log-x_990002_0.out")
        await AskWorker(store, clusters, None).rewrite(launch.id, cluster_user="bob")  # type: ignore[arg-type]
        poller = Poller(store, clusters, owner="sectest-poller")
        try:
            assert await poller.poll("a4") == 1  # only the honest launch is looked at
        finally:
            await poller.release()
    said = caplog.text
    assert f"launch {launch.id} not polled: its record says it runs as 'bob'" in said
    assert "the configuration maps U0ALICE to alice, not to bob" in said
    assert "signed a certificate for alice" in said  # the honest one, read as alice
    assert "signed a certificate for bob" not in said
    assert f"launch {honest.id} not polled" not in said
