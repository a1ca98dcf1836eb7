"""/images import through Slack with the roles apart: a signed slash command answered by the
web role (no SSH key, no user CA), the image run submitted and followed by a worker as the
person's Unix user, its thread posted to Slack's Web API (the stand-in)."""

from __future__ import annotations

import re

import pytest

from bot.runtime.assembly import running
from bot.slack.http import run_slack
from bot.slack.webapi import open_front
from support.slack_requests import post_signed, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN
from tests.bot.botkit import bot_settings, dev_config, flush_test_redis, login_run
from tests.bot.conftest import standin_params
from tests.bot.e2e.test_images_e2e import _config_editor
from tests.bot.e2e.test_web_role import without_keys

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]


async def test_an_import_asked_in_slack_is_run_by_a_worker_in_a_thread_of_its_own(
    standin: SlackStandin, unique: str
) -> None:
    await flush_test_redis()
    image_dir = f"/home/alice/devcluster-images-{unique}"
    config = dev_config(
        people={"U0ALICE": "alice"}, unmapped="refuse", edit=_config_editor(image_dir)
    )
    try:
        async with (
            open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
            running(bot_settings(), config, front, role="worker", instance="worker"),
            running(bot_settings(), without_keys(config), front, role="web", instance="web") as web,
            run_slack(
                standin_params(standin),
                web.core,
                health=web.healthy,
                metrics=web.metrics,
                front=front,
            ) as slack,  # fmt: skip
        ):
            url = f"http://127.0.0.1:{slack.http_port}/slack/events"
            line = f"import nvcr.io/nvidia/nemo:26.02 as slack-{unique} cluster=a4"
            answer = await post_signed(url, slash_command_body("/images", line))
            assert answer.status == 200 and answer.elapsed_s < 3.0, answer
            ack = str(answer.json()["text"])
            assert re.match(r"Queued I-[0-9a-f]{10}: import nvcr\.io/nvidia/nemo:26\.02 as ", ack)
            ready = await standin.wait_for(
                "chat.postMessage",
                lambda c: "is ready" in str(c.params.get("text", "")),
                timeout_s=120,
            )
            assert web.clusters.pool.stats.round_trips == 0  # the web process logged in nowhere
        posts = standin.calls_to("chat.postMessage")
        parent = next(c for c in posts if "image · import" in str(c.params.get("text", "")))
        texts = [str(c.params["text"]) for c in posts if c.params.get("thread_ts")]
        # one thread: every line under one parent, in the channel the command was typed in,
        # and the parent kept current by chat.update
        assert len({c.params["thread_ts"] for c in posts if c.params.get("thread_ts")}) == 1
        assert {c.params["channel"] for c in posts} == {parent.params["channel"]}
        updated = standin.calls_to("chat.update")
        assert {c.params["ts"] for c in updated} == {ready.params["thread_ts"]}
        assert any(t.startswith("Queued by <@U0ALICE>: `/images import") for t in texts), texts
        assert any(", as alice (enroot import)" in t for t in texts), texts
        assert str(ready.params["text"]).startswith(f"<@U0ALICE> ✅ Image slack-{unique} is ready")
        updates = [str(c.params.get("text", "")) for c in updated]
        assert any(u.startswith("✅ READY  image · import") for u in updates), updates
        owner = login_run(f"stat -c %U {image_dir}/slack-{unique}.sqsh", user="alice")
        assert owner.strip() == "alice"
    finally:
        login_run(f"rm -rf {image_dir}", check=False, user="alice")
