"""Sweeps against real Redis and the Slack stand-in: the whole sweep is refused before
any member exists when its total is over budget; a 64-member sweep's table stays within
Slack's block limits and its updates are coalesced (no 429s); the end posts the
comparison, best first, and one overlaid loss picture."""

from __future__ import annotations

import asyncio
import json
import math
import os

import pytest

from bot.lifecycle import sweeps as sweep_math
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase, Sweep
from bot.notify.notifier import Notifier
from bot.slack.webapi import SlackFront
from bot.store import keys
from bot.store.budgets import BudgetGuard, OverBudget
from bot.store.store import Store
from bot.wording import sweeps
from commands.budget import iso_week
from commands.requests import TrainRequest
from support.slack_standin import SlackStandin
from tests.bot.botkit import notifying

CHANNEL = "C0TRAIN"


pytestmark = pytest.mark.usefixtures("clean_redis")


def make_sweep(
    lrs: list[str], steps: list[str], estimate: float = 1.0
) -> tuple[Sweep, list[Launch]]:
    values = [[lr, st] for lr in lrs for st in steps]
    sweep = Sweep(
        user_id="U0ALICE",
        channel=CHANNEL,
        title="sft · llama3p1_8b",
        text="/train sft llama3p1_8b cluster=a4",
        where="1 node × a4",
        keys=["optim.config.lr", "trainer.max_steps"],
        values=values,
    )
    launches = []
    for lr, st in values:
        request = TrainRequest(
            workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4",
            overrides=(("optim.config.lr", lr), ("trainer.max_steps", st)),
        )  # fmt: skip
        launch = Launch(request=request, user_id="U0ALICE", channel=CHANNEL)
        launch.sweep, launch.estimate_gpu_hours = sweep.id, estimate
        launches.append(launch)
    sweep.members = [launch.id for launch in launches]
    return sweep, launches


async def test_a_sweep_over_budget_is_refused_whole_before_any_member_exists(store: Store) -> None:
    sweep, launches = make_sweep(["1e-5", "3e-5"], ["100", "200"], estimate=3.0)
    guard = BudgetGuard("a4", iso_week(__import__("time").time()), 10.0)
    with pytest.raises(OverBudget):  # 4 x 3 = 12 > 10, though each member alone fits
        await store.launches.create_sweep(
            sweep, launches, [Event("parent", launches[0].id)], budget=guard
        )
    assert await store.launches.get_sweep(sweep.id) is None
    assert await store.launches.get_many(sweep.members) == [None] * 4
    assert await store.redis.xlen(keys.QUEUE) == 0 and await store.redis.xlen(keys.OUTBOX) == 0

    sweep, launches = make_sweep(["1e-5", "3e-5"], ["100", "200"], estimate=2.5)
    await store.launches.create_sweep(
        sweep, launches, [Event("parent", launches[0].id)], budget=guard
    )
    assert [m.id for m in await store.launches.get_many(sweep.members) if m] == sweep.members
    assert await store.redis.xlen(keys.QUEUE) == 4
    _, held = await store.budgets.budget_use("U0ALICE", "a4", guard.week)
    assert held == pytest.approx(10.0)


def _blocks_fit(blocks: list[dict[str, object]]) -> None:
    assert len(blocks) <= 50
    for block in blocks:
        text = block.get("text")
        if isinstance(text, dict):
            assert len(str(text["text"])) <= 3000


async def test_64_members_post_and_update_within_slack_limits_without_429(
    store: Store, standin: SlackStandin, front: SlackFront
) -> None:
    sweep, launches = make_sweep([f"{i}e-5" for i in range(1, 17)], ["100", "200", "300", "400"])
    await store.launches.create_sweep(
        sweep, launches, [Event("parent", launches[0].id)], enqueue=False
    )
    notifier = Notifier(store, front, {}, owner="n1")
    updates_written = 0
    async with notifying(notifier):
        await standin.wait_for("chat.postMessage", lambda c: not c.params.get("thread_ts"))
        for round_ in range(1, 6):  # every member moves five times
            for launch in launches:

                def move(stored: Launch, step: int = round_ * 10) -> list[Event]:
                    stored.phase = Phase.RUNNING
                    stored.progress.step, stored.progress.total = step, 100
                    stored.progress.loss = 3.0 - step / 100
                    return [Event("update", stored.id)]

                await store.launches.mutate(launch.id, move)
                updates_written += 1
        await asyncio.wait_for(_drained(store), 30)
    calls = standin.calls_to("chat.update", ok_only=False)
    assert calls and all(c.status == 200 and not c.error for c in calls)
    assert len(calls) < updates_written / 4, (len(calls), updates_written)  # coalesced
    blocks = (
        json.loads(calls[-1].params["blocks"])
        if isinstance(calls[-1].params["blocks"], str)
        else calls[-1].params["blocks"]
    )
    _blocks_fit(blocks)
    text = json.dumps(blocks)
    assert "50/100" in text  # the last round shows
    assert "#64 lr=16e-5, max_steps=400" in text  # every member can be cancelled alone
    table = "".join(str(b["text"]["text"]) for b in blocks if "```" in str(b.get("text")))
    assert sum(line.split()[0].isdigit() for line in table.split("\n") if line.split()) == 64
    parents = [c for c in standin.calls_to("chat.postMessage") if not c.params.get("thread_ts")]
    assert len(parents) == 1


async def _drained(store: Store) -> None:
    while await store.lanes.undelivered():
        await asyncio.sleep(0.05)


async def test_the_end_posts_the_comparison_best_first_and_one_overlay(
    store: Store, standin: SlackStandin, front: SlackFront
) -> None:
    sweep, launches = make_sweep(["1e-5", "3e-5"], ["100", "200"])
    await store.launches.create_sweep(
        sweep, launches, [Event("parent", launches[0].id)], enqueue=False
    )
    finals = [1.9, 1.1, 1.5, 0.8]
    async with notifying(Notifier(store, front, {}, owner="n1")):
        for launch, final in zip(launches, finals, strict=True):

            def end(stored: Launch, final: float = final) -> list[Event]:
                stored.phase, stored.outcome = Phase.DONE, "COMPLETED"
                stored.progress_history = [
                    (s, final + 2.0 * math.exp(-s / 15)) for s in range(0, 101, 2)
                ]
                return [Event("thread", stored.id, "✅ COMPLETED"), Event("update", stored.id)]

            await store.launches.mutate(launch.id, end)
        upload = await standin.wait_for("files.completeUploadExternal", timeout_s=20)
        await asyncio.wait_for(_drained(store), 20)
    replies = [
        str(c.params["text"])
        for c in standin.calls_to("chat.postMessage")
        if c.params.get("thread_ts")
    ]
    comparison = next(r for r in replies if "🏁" in r)
    assert comparison.startswith(f"<@{sweep.user_id}> 🏁"), comparison  # the owner, once
    rows = [line.split()[1] for line in comparison.split("```")[1].splitlines()[1:]]
    assert rows == ["4", "2", "3", "1"]  # member numbers, best final loss first
    assert "Best: #4 (lr=3e-5, max_steps=200)" in comparison
    assert sum(r.endswith("✅ COMPLETED") and r.startswith("*#") for r in replies) == 4
    assert len(standin.calls_to("files.completeUploadExternal")) == 1
    assert upload is not None


def test_the_overlay_labels_each_member_by_its_values() -> None:
    sweep, launches = make_sweep(["1e-5", "3e-5"], ["100", "200"])
    for launch, final in zip(launches, [1.9, 1.1, 1.5, 0.8], strict=True):
        launch.progress_history = [(s, final + 2.0 * math.exp(-s / 15)) for s in range(0, 101)]
    curves = sweep_math.curves(sweep, list(launches))
    assert [label for label, _ in curves] == [
        "#1 lr=1e-5, max_steps=100", "#2 lr=1e-5, max_steps=200",
        "#3 lr=3e-5, max_steps=100", "#4 lr=3e-5, max_steps=200",
    ]  # fmt: skip
    from bot.text.plot import render_overlay_png

    png = render_overlay_png(curves, title=f"Sweep {sweep.id}")
    assert png.startswith(b"\x89PNG")
    if out := os.environ.get("TRAINBOT_PLOT_OUT"):
        with open(out, "wb") as f:
            f.write(png)


def test_a_table_past_the_block_limits_is_summarised_by_state() -> None:
    lrs = [f"{i}.0000000000001e-5" for i in range(1, 33)]
    sweep, launches = make_sweep(lrs, [str(s) for s in range(100, 900, 100)])
    for launch in launches[:100]:
        launch.phase = Phase.RUNNING
    _, blocks = sweeps.table_blocks(sweep, list(launches), 0.0)
    _blocks_fit(blocks)
    text = json.dumps(blocks, ensure_ascii=False)
    assert len(launches) == 256
    assert "more members not shown: ⏳ QUEUED" in text
    select = blocks[-1]["elements"][1]
    assert len(select["options"]) == 100  # Slack's limit for a select
