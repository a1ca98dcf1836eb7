"""Sweeps on the dev cluster through Slack: signed slash commands and button presses
(real slack-bolt) against the Web API stand-in, real Redis and the dev cluster's Slurm.
A 2x2 sweep asks one approval, then runs four Slurm jobs whose table moves in place;
one member's retryable failure is retried on its own; the end posts the comparison
and one overlaid picture. One Cancel of a sweep cancels every member, one job each."""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.lifecycle.launch import Launch, Phase
from bot.runtime.assembly import Bot, running
from bot.settings.config import Config
from bot.slack.http import SlackService, run_slack
from bot.slack.webapi import open_front
from bot.text.actions import ACTION_APPROVE, ACTION_CANCEL
from commands.rules import ApproverRule
from support.slack_requests import block_action_body, post_signed, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    knobs,
    match_in,
    sacct_rows,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
    wait_until,
)
from tests.bot.conftest import standin_params

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

QUICK: Knobs = {"step_time_s": 0.4, "save_time_s": 0.1, "ckpt_every": 1, "tokenizer_race": "off"}
SWEEP_RE = re.compile(r"\bS-[0-9a-f]{4,16}\b")


@asynccontextmanager
async def slack_bot(standin: SlackStandin, config: Config) -> AsyncIterator[tuple[Bot, str]]:
    """The whole bot as ``trainbot serve`` runs it, and the URL Slack posts to."""
    params = standin_params(standin)
    async with (
        open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
        running(bot_settings(), config, front) as bot,
        run_slack(params, bot.core, health=bot.healthy, metrics=bot.metrics, front=front) as slack,
    ):
        yield bot, events_url(slack)


def events_url(slack: SlackService) -> str:
    return f"http://127.0.0.1:{slack.http_port}/slack/events"


def blocks_of(params: dict[str, Any]) -> list[dict[str, Any]]:
    raw = params.get("blocks") or "[]"
    return json.loads(raw) if isinstance(raw, str) else list(raw)


def table_rows(params: dict[str, Any]) -> dict[str, str]:
    """The parent message's table: each member's number to its whole row."""
    text = "".join(
        str(b["text"]["text"]) for b in blocks_of(params) if "```" in str(b.get("text", ""))
    )
    rows = {}
    for line in text.replace("```", "\n").splitlines():
        cells = line.split()
        if cells and cells[0].isdigit():
            rows[cells[0]] = line
    return rows


async def members_of(bot: Bot, sweep_id: str) -> list[Launch]:
    sweep = await bot.store.launches.get_sweep(sweep_id)
    assert sweep is not None
    found = await bot.store.launches.get_many(sweep.members)
    assert all(m is not None for m in found)
    return [m for m in found if m is not None]


async def test_a_2x2_sweep_runs_four_jobs_retries_one_and_ends_with_the_comparison(
    standin: SlackStandin, unique: str
) -> None:
    config = dev_config(approval_above_nodes=0, retry_backoff_s=0)
    approvers = (ApproverRule(users=("U0BOB",), clusters=("a4",)),)
    config = config.model_copy(
        update={"policy": config.policy.model_copy(update={"approvers": approvers})}
    )
    line = (
        f"sft llama3p1_8b cluster=a4 name={unique} optim.config.lr=1e-5,3e-5 trainer.max_steps=4,6"
    )
    async with knobs(unique, **QUICK), slack_bot(standin, config) as (bot, url):
        answer = await post_signed(url, slash_command_body("/train", line))
        said = answer.json()["text"]
        assert "4 launches of sft · llama3p1_8b on 1 node × a4" in said, said
        assert "needs a second person's approval" in said, said
        sweep_id = match_in(SWEEP_RE, said)
        members = await members_of(bot, sweep_id)
        assert [m.phase for m in members] == [Phase.AWAITING_APPROVAL] * 4
        # Member #2 (lr=1e-5, max_steps=6) meets an NCCL timeout once: its job name holds
        # its launch id, so the stand-in's knobs reach it alone.
        second = members[1].id
        async with knobs(second, fault="nccl", fault_at_step=2, fault_once=1):
            approve = block_action_body(
                ACTION_APPROVE, sweep_id, user_id="U0BOB", response_url=standin.response_url()
            )
            assert (await post_signed(url, approve)).status == 200
            done = [await wait_for_launch(bot.store, m.id, timeout_s=300) for m in members]
        await wait_delivered(bot.store)
        await wait_until(
            lambda: _posted(standin, "files.completeUploadExternal"), "the overlay", 30
        )
    assert [d.outcome for d in done] == ["COMPLETED"] * 4, [d.ending for d in done]
    # One approval for the sweep, asked and answered once in its one thread.
    posts = standin.calls_to("chat.postMessage")
    parents = [
        c for c in posts if c.params.get("channel") == "C0TRAIN" and not c.params.get("thread_ts")
    ]
    # Members that completed DM no one: the comparison mentions the owner once.
    assert [c for c in posts if str(c.params.get("channel", "")).startswith("D")] == []
    assert len(parents) == 1, [p.params.get("text") for p in parents]
    parent_ts = done[0].parent_ts
    assert all(d.parent_ts == parent_ts for d in done)
    replies = [
        str(c.params.get("text", ""))
        for c in standin.calls_to("chat.postMessage")
        if c.params.get("thread_ts") == parent_ts
    ]
    assert sum("asks for sweep" in r for r in replies) == 1, replies
    answered = [str(c.params.get("text")) for c in standin.calls_to("chat.postEphemeral")]
    assert f"Approved sweep {sweep_id} (4 launches)." in answered, answered
    # Four Slurm jobs, and a fifth for the retried member alone.
    assert [len(d.attempts) for d in done] == [1, 2, 1, 1], [d.attempts for d in done]
    assert done[1].attempts[0].cause_key == "nccl_timeout"
    for launch in done:
        jobs = sorted(a.job_id for a in launch.attempts)
        assert slurm_jobs_named(launch.id) == jobs
        assert sacct_rows(launch.job_id)[-1]["State"] == "COMPLETED"
    assert any(r.startswith("*#2* (lr=1e-5, max_steps=6)") and "Retrying" in r for r in replies)
    # The table moved: every row showed a running step before its end.
    updates = [c for c in standin.calls_to("chat.update") if c.params.get("ts") == parent_ts]
    seen: dict[str, set[str]] = {str(n): set() for n in range(1, 5)}
    for update in updates:
        for number, row in table_rows(update.params).items():
            seen[number].add(row)
    for number, rows in seen.items():
        assert any("RUNNING" in r and re.search(r"\b\d+/[46]\b", r) for r in rows), (number, rows)
        assert any("COMPLETED" in r for r in rows), (number, rows)
    final = table_rows(updates[-1].params)
    assert sorted(final) == ["1", "2", "3", "4"] and all("COMPLETED" in r for r in final.values())
    assert "RETRY" in "".join(seen["2"]) and "RETRY" not in "".join(seen["1"] | seen["3"])
    # The end: the comparison, best first, and one picture of every member's curve.
    comparison = [r for r in replies if "🏁" in r]
    assert len(comparison) == 1 and "Best: #" in comparison[0]
    assert comparison[0].startswith(f"<@{members[0].user_id}> 🏁"), comparison[0]
    ranked = [line.split()[1] for line in comparison[0].split("```")[1].splitlines()[1:]]
    assert sorted(ranked) == ["1", "2", "3", "4"]
    uploads = standin.calls_to("files.completeUploadExternal")
    assert len(uploads) == 1
    png = next(iter(standin.uploads.values()))
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    if out := os.environ.get("TRAINBOT_PLOT_OUT"):
        with open(out, "wb") as f:
            f.write(png)


async def _posted(standin: SlackStandin, method: str) -> bool:
    return bool(standin.calls_to(method))


async def test_one_cancel_of_a_sweep_cancels_every_member_one_job_each(
    standin: SlackStandin, unique: str, cancel_jobs: list[str]
) -> None:
    line = (
        f"sft llama3p1_8b cluster=a4 name={unique} optim.config.lr=1e-5,3e-5 "
        "trainer.max_steps=300,400"
    )
    async with (
        knobs(unique, **(QUICK | {"step_time_s": 1})),
        slack_bot(standin, dev_config()) as (
            bot,
            url,
        ),
    ):
        said = (await post_signed(url, slash_command_body("/train", line))).json()["text"]
        sweep_id = match_in(SWEEP_RE, said)

        async def all_submitted() -> bool:
            members = await members_of(bot, sweep_id)
            cancel_jobs[:] = [m.job_id for m in members if m.job_id]  # if the test fails
            return len(cancel_jobs) == 4 and any(m.phase == Phase.RUNNING for m in members)

        # Other tests share the dev cluster's four nodes: a member may still be pending.
        await wait_until(all_submitted, "every member's job", timeout_s=180, interval_s=0.5)
        confirm = await post_signed(url, slash_command_body("/cancel", sweep_id))
        assert f"Cancel sweep {sweep_id} (4 active" in confirm.body, confirm.body
        press = block_action_body(ACTION_CANCEL, sweep_id, response_url=standin.response_url())
        assert (await post_signed(url, press)).status == 200
        done = [await wait_for_launch(bot.store, m.id, timeout_s=120) for m in
                await members_of(bot, sweep_id)]  # fmt: skip
        await wait_delivered(bot.store)
    assert [d.outcome for d in done] == ["CANCELLED"] * 4, [d.ending for d in done]
    for launch in done:
        assert len(launch.attempts) == 1
        assert slurm_jobs_named(launch.id) == [launch.job_id]  # one job each, none resubmitted
        state = sacct_rows(launch.job_id)[-1]["State"]
        assert state.startswith("CANCELLED"), (launch.id, state)
    answered = [str(c.params.get("text")) for c in standin.calls_to("chat.postEphemeral")]
    assert any(f"Cancelled sweep {sweep_id}: 4 active member(s)" in a for a in answered), answered
