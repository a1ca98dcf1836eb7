"""/checkpoints' buttons on one checkpoint, through slack-bolt with signed requests against
the Slack stand-in, on the dev cluster: a NeMo run that completed lists its checkpoints,
each of the newest with Resume from this one, New run from it and Export. Export exports
that checkpoint (not the newest), New run opens the launch form filled in with
``from=<job>@<step>``, Resume launches the same request from that step (admitted as a
typed /train is, and run); another person's click, and a step the run has not saved,
are refused saying why."""

from __future__ import annotations

import json

import pytest

from bot.runtime.assembly import running
from bot.slack.http import run_slack
from bot.slack.webapi import open_front
from bot.text.actions import (
    ACTION_CKPT_EXPORT,
    ACTION_CKPT_NEW_RUN,
    ACTION_CKPT_RESUME,
    VIEW_RELAUNCH,
)
from commands.requests import TrainRequest
from support.slack_requests import block_action_body, post_signed, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN
from tests.bot.botkit import (
    LAUNCH_RE,
    Knobs,
    bot_settings,
    dev_config,
    flush_test_redis,
    knobs,
    wait_delivered,
    wait_for_launch,
)
from tests.bot.conftest import standin_params
from tests.bot.e2e.test_after_training_e2e import after_ended

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]

QUICK: Knobs = {
    "steps": 4,
    "ckpt_every": 2,
    "step_time_s": 0.2,
    "save_time_s": 0.1,
    "tokenizer_race": "off",
}


def ephemeral_with(standin: SlackStandin, words: str) -> str:
    texts = [str(c.params.get("text")) for c in standin.calls_to("chat.postEphemeral")]
    return next((t for t in texts if words in t), "")


async def test_each_checkpoint_resumes_starts_a_new_run_or_exports(
    standin: SlackStandin, unique: str
) -> None:
    await flush_test_redis()
    async with (
        knobs(unique, **QUICK),
        open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
        running(bot_settings(), dev_config(), front) as bot,
        run_slack(
            standin_params(standin), bot.core, health=bot.healthy, metrics=bot.metrics, front=front
        ) as slack,
    ):
        bot.poller.after.look_s = 1.0
        url = f"http://127.0.0.1:{slack.http_port}/slack/events"
        text = f"sft llama3p1_8b framework=nemo cluster=a4 trainer.max_steps=4 name={unique}"
        ack = await post_signed(url, slash_command_body("/train", text))
        launch_id = LAUNCH_RE.search(ack.json()["text"]).group(0)  # type: ignore[union-attr]
        done = await wait_for_launch(bot.store, launch_id, timeout_s=180)
        assert done.outcome == "COMPLETED", done.ending
        assert len(done.checkpoints) >= 2, done.checkpoints

        listed = await post_signed(url, slash_command_body("/checkpoints", launch_id))
        body = listed.json() if listed.body else {}
        if "blocks" not in body:  # answered later, through the response URL
            call = await standin.wait_for(
                "chat.postEphemeral", lambda c: "Checkpoints of" in str(c.params.get("text")), 30
            )
            body = {"blocks": call.params.get("blocks")}
        blocks = body["blocks"] if isinstance(body["blocks"], list) else json.loads(body["blocks"])
        values: dict[str, list[str]] = {}
        for block in blocks:
            for element in block.get("elements", []) if block["type"] == "actions" else []:
                values.setdefault(element["action_id"], []).append(element["value"])
        resumes = values[ACTION_CKPT_RESUME]
        assert values[ACTION_CKPT_NEW_RUN] == resumes == values[ACTION_CKPT_EXPORT], values
        newest, older = resumes[0], resumes[1]  # newest first
        older_step = int(older.split("@")[1])
        assert newest.startswith(f"{launch_id}@") and older_step < int(newest.split("@")[1])

        # Export of the older checkpoint: that one is exported, not the newest
        await post_signed(url, block_action_body(ACTION_CKPT_EXPORT, older))
        exported = await after_ended(bot.store, launch_id, asked="export")
        assert exported.after_state == "COMPLETED" and exported.after_step == older_step
        assert f"-step={older_step}-" in exported.exported_to, exported.exported_to

        # New run from it: the launch form, filled in with from=<job>@<step>
        await post_signed(url, block_action_body(ACTION_CKPT_NEW_RUN, older))
        opened = await standin.wait_for("views.open", timeout_s=30)
        view = opened.params["view"]
        view = view if isinstance(view, dict) else json.loads(view)
        (field,) = [b for b in view["blocks"] if b["type"] == "input"]
        assert view["callback_id"] == VIEW_RELAUNCH and field["block_id"] == launch_id
        assert f"from={launch_id}@{older_step}" in field["element"]["initial_value"], field

        # another person's click and a step never saved are refused, saying why
        await post_signed(url, block_action_body(ACTION_CKPT_RESUME, older, user_id="U0BOB"))
        await post_signed(url, block_action_body(ACTION_CKPT_RESUME, f"{launch_id}@99999"))
        await standin.wait_for(
            "chat.postEphemeral", lambda c: "at step 99999" in str(c.params.get("text")), 30
        )
        # Resume from the older one: the same request from that step, launched and run
        await post_signed(url, block_action_body(ACTION_CKPT_RESUME, older))
        queued = await standin.wait_for(
            "chat.postEphemeral", lambda c: str(c.params.get("text")).startswith("Queued L-"), 60
        )
        child_id = LAUNCH_RE.search(str(queued.params["text"])).group(0)  # type: ignore[union-attr]
        child = await wait_for_launch(bot.store, child_id, timeout_s=180)
        await wait_delivered(bot.store)
    assert isinstance(child.request, TrainRequest)
    assert (child.request.start_from, child.request.start_step) == (launch_id, older_step)
    assert child.request.workload == "sft" and child.request.framework == "nemo"
    assert child.outcome == "COMPLETED", child.ending
    refused = ephemeral_with(standin, "at step 99999")
    assert f"{launch_id} has no complete checkpoint at step 99999" in refused, refused
    others = [
        str(c.params.get("text"))
        for c in standin.calls_to("chat.postEphemeral")
        if c.params.get("user") == "U0BOB"
    ]
    assert others and "or a trainbot admin may resume it" in others[0], others
