"""The bot end to end through Slack: signed slash commands over HTTP and Socket
Mode (real slack-bolt) against the Web API stand-in, real Redis, the dev cluster."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from bot.runtime.assembly import Bot, running
from bot.settings.config import Config
from bot.slack.http import SlackService, run_slack
from bot.slack.webapi import open_front
from support.slack_requests import post_signed, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    in_dm,
    knobs,
    launch_id_in,
    login_run,
    sacct_rows,
    wait_delivered,
    wait_for_launch,
)
from tests.bot.conftest import standin_params

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

FAST: Knobs = {"steps": 4, "step_time_s": 0.4, "ckpt_every": 2, "save_time_s": 0.1}


@asynccontextmanager
async def slack_bot(
    standin: SlackStandin, *, socket_mode: bool = False, config: Config | None = None
) -> AsyncIterator[tuple[Bot, SlackService]]:
    """The whole bot as ``trainbot serve`` runs it, with Slack at the stand-in."""
    params = standin_params(standin, socket_mode=socket_mode)
    async with (
        open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
        running(bot_settings(), config or dev_config(), front) as bot,
        run_slack(params, bot.core, health=bot.healthy, metrics=bot.metrics, front=front) as slack,
    ):
        yield bot, slack


def thread_texts(standin: SlackStandin, parent_ts: str) -> list[str]:
    return [
        str(c.params.get("text", ""))
        for c in standin.calls_to("chat.postMessage")
        if c.params.get("thread_ts") == parent_ts
    ]


async def test_slash_command_over_http_runs_a_dpo_launch_in_one_thread(
    standin: SlackStandin, unique: str
) -> None:
    async with knobs(unique, **FAST), slack_bot(standin) as (bot, slack):
        url = f"http://127.0.0.1:{slack.http_port}/slack/events"
        body = slash_command_body("/train", f"dpo llama3p1_8b nodes=2 cluster=a4 name={unique}")
        answer = await post_signed(url, body)
        assert answer.status == 200 and answer.elapsed_s < 3.0
        ack = answer.json()
        assert ack["response_type"] == "ephemeral"
        launch_id = launch_id_in(ack["text"])
        assert ack["text"].startswith(f"Queued {launch_id}: dpo llama3p1_8b, 2 nodes × a4")
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    assert launch.outcome == "COMPLETED"
    posts = standin.calls_to("chat.postMessage")
    parents = [c for c in posts if not c.params.get("thread_ts") and not in_dm(c.params)]
    assert len(parents) == 1 and parents[0].params["channel"] == "C0TRAIN"
    parent_ts = launch.parent_ts
    texts = thread_texts(standin, parent_ts)
    job_id = launch.job_id
    assert texts[0].startswith("Queued by <@U0ALICE>")
    assert any(t.startswith("Pre-flight ok: partition a4 up") for t in texts)
    assert any(
        t.startswith(f"Submitted: Slurm job {job_id} on a4, partition a4, 2 nodes.") for t in texts
    )
    assert any(t.startswith("Running on dev[") for t in texts)
    on_disk = login_run(f"ls ~/vertex-oss-training/nemo_rl/{job_id}/checkpoints").split()
    assert on_disk == ["step_2", "step_4"]
    posted = [t for t in texts if t.startswith("💾 Checkpoint")]
    assert posted == ["💾 Checkpoint step 2 saved.", "💾 Checkpoint step 4 saved."]
    assert texts[-1].startswith("<@U0ALICE> ✅ COMPLETED in")  # the owner is told
    # With the default preferences the owner also gets one DM, after the line, linking to it.
    dms = [c for c in posts if in_dm(c.params)]
    assert [c.params["users"] for c in standin.calls_to("conversations.open")] == ["U0ALICE"]
    assert len(dms) == 1, dms
    dm = str(dms[0].params["text"])
    assert dm.startswith(f"dpo llama3p1_8b on a4 (`{launch_id}`): ✅ COMPLETED in"), dm
    assert dm.endswith("|thread>") and "<https://" in dm, dm
    final = [c for c in posts if "✅ COMPLETED in" in str(c.params.get("text"))]
    assert final[0].params.get("thread_ts") == parent_ts and final[0].at < dms[0].at
    updates = standin.calls_to("chat.update")
    assert updates and all(u.params["ts"] == parent_ts for u in updates)
    assert (
        "COMPLETED" in updates[-1].params["text"] and f"job {job_id}" in updates[-1].params["text"]
    )
    row = sacct_rows(job_id)[-1]
    assert (row["State"], row["Partition"], row["NNodes"]) == ("COMPLETED", "a4", "2")


async def test_socket_mode_slash_command_is_acked_and_queued(
    standin: SlackStandin, unique: str
) -> None:
    async with slack_bot(standin, socket_mode=True) as (bot, _slack):
        await standin.wait_connected()
        ack = await standin.socket_slash_command(
            "/train", f"sft llama3p1_2b cluster=a3m name={unique} dry_run=true"
        )
        text = ack["payload"]["text"]
        launch_id = launch_id_in(text)
        assert text.startswith(f"Dry run {launch_id}")
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    texts = thread_texts(standin, launch.parent_ts)
    assert any("Dry run: nothing was submitted" in t for t in texts)


async def test_rate_limited_slack_loses_no_message_and_keeps_order(
    standin: SlackStandin, unique: str
) -> None:
    standin.fail_next("chat.postMessage", 2, status=429, retry_after_s=1)
    async with knobs(unique, **FAST), slack_bot(standin) as (bot, slack):
        url = f"http://127.0.0.1:{slack.http_port}/slack/events"
        answer = await post_signed(
            url, slash_command_body("/train", f"rm llama3p1_8b cluster=a3u name={unique}")
        )
        launch_id = launch_id_in(answer.json()["text"])
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    rejected = [c for c in standin.calls if c.method == "chat.postMessage" and c.status == 429]
    assert len(rejected) == 2
    texts = thread_texts(standin, launch.parent_ts)
    assert texts[0].startswith("Queued by")
    kinds = [t.split(" ", 1)[0] for t in texts]
    assert kinds.index("Pre-flight") < kinds.index("Submitted:") < kinds.index("Running")
    assert re.match(r"<@U\w+> ✅ COMPLETED", texts[-1])
    assert len(texts) == len(set(texts))  # nothing posted twice


async def test_the_slack_profile_email_names_the_persons_unix_user(
    standin: SlackStandin, unique: str
) -> None:
    standin.emails["U0BOBBY"] = "Bob@example.com"  # the local part, lower-cased: bob
    config = dev_config(unmapped="refuse", from_email=True)
    text = f"sft llama3p1_8b cluster=a4 name={unique} dry_run=true"
    async with slack_bot(standin, config=config) as (bot, slack):
        url = f"http://127.0.0.1:{slack.http_port}/slack/events"
        mapped = await post_signed(url, slash_command_body("/train", text, user_id="U0BOBBY"))
        refused = await post_signed(url, slash_command_body("/train", text, user_id="U0NOMAIL"))
        launch_id = launch_id_in(mapped.json()["text"])
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    assert launch.cluster_user == "bob" and launch.outcome == "DRY_RUN", launch.ending
    asked = [c.params.get("user") for c in standin.calls_to("users.info")]
    assert asked == ["U0BOBBY", "U0NOMAIL"]
    dry = [t for t in thread_texts(standin, launch.parent_ts) if t.startswith("Dry run")]
    assert dry and "On the login node, as bob, trainbot would run" in dry[0]
    assert "✓ " in dry[0] and "✗" not in dry[0], dry[0]  # bob's recipes and image, as bob
    message = refused.json()["text"]
    assert message.startswith(":warning: You have no user on a4"), message
    assert "your Slack profile's email gives none" in message
