"""The global shortcut "Launch training", through signed requests as Slack sends them: the
/train form in a modal; a refused launch keeps it open with the core's reason under the
input; an accepted one closes it, and its thread goes to the person's DM."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from bot.text.actions import ACTION_FORM_CHECK, SHORTCUT_LAUNCH, VIEW_LAUNCH
from support.slack_requests import post_signed, shortcut_body, view_submission_body
from support.slack_standin import SlackStandin
from tests.bot.api.test_api import web_with_api
from tests.bot.botkit import launch_id_in

pytestmark = pytest.mark.devcluster


async def test_the_launch_form_refuses_in_place_and_launches_into_the_dm(
    standin: SlackStandin,
) -> None:
    async with web_with_api(standin) as (web, _slack, base):
        events = f"{base}/slack/events"
        used = await post_signed(events, shortcut_body(SHORTCUT_LAUNCH))
        assert used.status == 200
        opened = await standin.wait_for("views.open", timeout_s=10)
        view = opened.params["view"]
        view = view if isinstance(view, dict) else json.loads(view)
        (field,) = [b for b in view["blocks"] if b["type"] == "input"]
        assert view["callback_id"] == VIEW_LAUNCH and view["title"]["text"] == "Launch training"

        block = field["block_id"]
        assert field["element"]["action_id"] == ACTION_FORM_CHECK and field["dispatch_action"]

        async def typed(text: str) -> str:
            """What the form says under its input once ``text`` is typed."""
            before = len(standin.calls_to("views.update"))
            payload = {
                "type": "block_actions",
                "trigger_id": "1.2.standin",
                "team": {"id": "T0STANDIN"},
                "user": {"id": "U0ALICE", "username": "alice", "team_id": "T0STANDIN"},
                "container": {"type": "view", "view_id": "V0FORM"},
                "view": {**view, "id": "V0FORM", "hash": "h1"},
                "actions": [
                    {"type": "plain_text_input", "action_id": ACTION_FORM_CHECK,
                     "block_id": block, "value": text}
                ],
            }  # fmt: skip
            body = urllib.parse.urlencode({"payload": json.dumps(payload)})
            assert (await post_signed(events, body)).status == 200
            update = await standin.wait_for(
                "views.update", lambda c: standin.calls_to("views.update").index(c) >= before, 10
            )
            shown = update.params["view"]
            shown = shown if isinstance(shown, dict) else json.loads(shown)
            assert update.params["hash"] == "h1" and shown["callback_id"] == VIEW_LAUNCH
            return str(shown["blocks"][-1]["elements"][0]["text"])

        assert "Unknown key 'wobble'" in await typed("sft llama3p1_8b wobble=3")
        checked = await typed("sft llama3p1_8b nodes=2 cluster=a4 time=30")
        reads, estimate = checked.split("\n")
        assert (
            reads == "Reads as: `/train sft llama3p1_8b framework=nemo cluster=a4 nodes=2 time=30`"
        )
        # the same admission /train asks, and the estimate from the time limit (no run yet)
        assert estimate == (
            "About 8.0 GPU-hours (at most: the whole 30 min time limit; no earlier run of "
            "sft llama3p1_8b on 2 nodes × a4 to go by)."
        ), estimate
        assert "over_budget=true is for trainbot admins only" in await typed(
            "sft llama3p1_8b cluster=a4 over_budget=true"
        )  # parsed fine: refused by admit(), as /train would
        refused = await post_signed(
            events, view_submission_body(VIEW_LAUNCH, block, "sft llama3p1_8b nodes=3 cluster=a4")
        )
        assert refused.json()["response_action"] == "errors", refused
        assert refused.json()["errors"][block].startswith("nodes=3 is more than a4 allows")

        done = await post_signed(
            events, view_submission_body(VIEW_LAUNCH, block, "sft llama3p1_8b nodes=1 cluster=a4")
        )
        assert done.status == 200 and not done.body, done  # the modal closes
        said = await standin.wait_for(
            "chat.postMessage", lambda c: "Queued L-" in str(c.params.get("text")), 30
        )
        assert said.params["channel"] == "DU0ALICE"
        launch_id = launch_id_in(str(said.params["text"]))
        launch = await web.store.launches.get(launch_id)
        assert launch is not None and launch.channel == "DU0ALICE" and launch.user_id == "U0ALICE"
