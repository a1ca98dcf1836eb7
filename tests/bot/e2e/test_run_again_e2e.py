"""A run's record and Run again, through Slack (signed requests against the stand-in) on
the dev cluster: the submit records the exact command, the names it exported, the recipes
checkout's commit and its changes not committed (said in the thread), and the image's
identity; Run again on the final line runs the same request again, and the new job's
command line is the old one's but for the launch id."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from bot.runtime.assembly import running
from bot.slack.http import run_slack
from bot.slack.webapi import open_front
from bot.text.actions import ACTION_EDIT_RELAUNCH, ACTION_RUN_AGAIN, VIEW_RELAUNCH
from commands.requests import TrainRequest
from support.slack_requests import (
    block_action_body,
    post_signed,
    slash_command_body,
    view_submission_body,
)
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    flush_test_redis,
    knobs,
    launch_id_in,
    login_run,
    wait_delivered,
    wait_for_launch,
)
from tests.bot.conftest import standin_params
from tests.devlogin import copy_recipes_command

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]
FAST: Knobs = {"steps": 4, "step_time_s": 0.3, "tokenizer_race": "off"}


@pytest.fixture
def dirty_checkout(unique: str) -> Iterator[str]:
    """A git checkout of the recipes in trainer's home with one file changed, not committed."""
    private = f"~/tmp-{unique}"
    tree = f"{private}/vertex-oss-training"
    login_run(copy_recipes_command(private))
    login_run(
        f"cd {tree} && git init -q && git add -A && "
        "git -c user.email=dev@example.com -c user.name=dev commit -qm recipes && "
        "echo '# changed here' >> nemo/run.py"
    )
    yield tree
    login_run(f"rm -rf {private}", check=False)


async def test_the_record_says_a_dirty_checkout_and_run_again_runs_the_same_command(
    standin: SlackStandin, unique: str, dirty_checkout: str
) -> None:
    await flush_test_redis()
    config = dev_config(recipes_dir=dirty_checkout)
    async with (
        knobs(unique, **FAST),
        open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
        running(bot_settings(), config, front) as bot,
        run_slack(
            standin_params(standin), bot.core, health=bot.healthy, metrics=bot.metrics, front=front
        ) as slack,
    ):
        url = f"http://127.0.0.1:{slack.http_port}/slack/events"
        ack = await post_signed(
            url, slash_command_body("/train", f"sft llama3p1_2b cluster=a4 name={unique}")
        )
        first_id = launch_id_in(ack.json()["text"])
        first = await wait_for_launch(bot.store, first_id, timeout_s=180)
        await wait_delivered(bot.store)
        posts = standin.calls_to("chat.postMessage")

        clicked = await post_signed(url, block_action_body(ACTION_RUN_AGAIN, first_id))
        assert clicked.status == 200
        said = await standin.wait_for(
            "chat.postEphemeral", lambda c: "Queued L-" in str(c.params.get("text")), 60
        )
        second_id = launch_id_in(str(said.params["text"]))
        second = await wait_for_launch(bot.store, second_id, timeout_s=180)

        # Edit & relaunch: a modal holding the request; a refused edit keeps it open.
        await post_signed(url, block_action_body(ACTION_EDIT_RELAUNCH, first_id))
        opened = await standin.wait_for("views.open", timeout_s=30)
        view = opened.params["view"]
        view = view if isinstance(view, dict) else json.loads(view)
        (field,) = [b for b in view["blocks"] if b["type"] == "input"]
        assert view["callback_id"] == VIEW_RELAUNCH and field["block_id"] == first_id
        typed = first.request.to_text().removeprefix("/train ")
        assert field["element"]["initial_value"] == typed
        refused = await post_signed(
            url, view_submission_body(VIEW_RELAUNCH, first_id, typed.replace("nodes=1", "nodes=9"))
        )
        assert refused.json()["response_action"] == "errors", refused
        assert "nodes=9 is more than a4 allows" in refused.json()["errors"][first_id]
        edited = await post_signed(
            url, view_submission_body(VIEW_RELAUNCH, first_id, typed + " trainer.max_steps=3")
        )
        assert edited.status == 200 and not edited.body, edited  # closed
        dm = await standin.wait_for(
            "chat.postMessage", lambda c: "Queued L-" in str(c.params.get("text")), 60
        )
        third_id = launch_id_in(str(dm.params["text"]))
        third = await wait_for_launch(bot.store, third_id, timeout_s=180)

    assert first.outcome == "COMPLETED" and second.outcome == "COMPLETED", (first, second)
    record = first.attempts[-1].record
    assert record is not None and len(record.recipes_commit) == 40, record
    assert f"--experiment-name {unique}-{first_id}" in record.command, record.command
    assert record.recipes_changed == 1 and record.dirty
    assert record.image.endswith(".sqsh") and (record.image_size or 0) > 0 and record.image_mtime
    assert "NEMORUN_HOME" in record.env_names and not any("=" in n for n in record.env_names)
    texts = [str(c.params.get("text", "")) for c in posts]
    assert any(
        "recipes at " + record.recipes_commit[:12] + ", 1 file changed and not committed" in t
        for t in texts
    ), texts
    final = [
        c
        for c in posts
        if ACTION_RUN_AGAIN in json.dumps(c.params.get("blocks") or []) and "COMPLETED" in str(c)
    ]
    assert final, "no Run again under the final line"
    again = second.attempts[-1].record
    assert again is not None and again.recipes_commit == record.recipes_commit
    assert again.command == record.command.replace(first_id, second_id), (again, record)
    assert second.request == first.request and second.channel == first.channel
    assert third.outcome == "COMPLETED" and third.channel == first.channel
    assert isinstance(third.request, TrainRequest), third.request
    assert ("trainer.max_steps", "3") in third.request.overrides, third.request
