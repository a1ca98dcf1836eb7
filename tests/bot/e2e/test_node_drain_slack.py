"""Drain and Resume from Slack, through signed requests as Slack sends them, on the web
role (no SSH key) with a worker that runs the cluster work: on-call (the S0ONCALL user
group, as Slack's usergroups.users.list says) gets the Drain modal with the proposed
reason, its submission drains the node in Slurm, Resume undoes it; anyone else is refused.
The node is resumed in any case: other tests need every node."""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

import pytest

from bot.store.nodes import NodeEntry
from bot.text.actions import ACTION_NODE_DRAIN, ACTION_NODE_RESUME, VIEW_NODE_DRAIN
from support.slack_requests import block_action_payload, post_signed, view_submission_body
from support.slack_standin import Call, SlackStandin
from tests.bot.api.test_api import web_with_api
from tests.bot.botkit import login_run

pytestmark = pytest.mark.devcluster

NODE = "dev2"
ONCALL = "U0BOB"  # in S0ONCALL at the stand-in


def view_of(call: Call) -> dict[str, Any]:
    view = call.params["view"]
    return view if isinstance(view, dict) else json.loads(view)


def node_state() -> str:
    return login_run(f"sinfo -h -N -n {NODE} -o '%T|%E'").strip()


async def test_on_call_drains_through_the_modal_and_resumes_from_slack(
    standin: SlackStandin,
) -> None:
    assert "drain" not in node_state(), "the node is drained before the test: left as it is"
    async with web_with_api(standin, worker=True) as (web, _slack, base):
        events = f"{base}/slack/events"
        for n in (1, 2):
            failure = NodeEntry(at=time.time(), launch_id=f"L-5a{n:04d}", job_id=str(n),
                                cause_key="xid_hardware")  # fmt: skip
            await web.store.nodes.record_node("a4", NODE, failure)

        async def click(action_id: str, user: str) -> None:
            payload = block_action_payload(action_id, f"a4 {NODE}", user_id=user)
            body = urllib.parse.urlencode({"payload": json.dumps(payload)})
            assert (await post_signed(events, body)).status == 200

        def said_to(user: str) -> list[str]:
            return [
                str(c.params.get("text", "")) for c in standin.calls_to("chat.postEphemeral")
                if c.params.get("user") == user
            ]  # fmt: skip

        await click(ACTION_NODE_DRAIN, "U0ALICE")
        refused = view_of(await standin.wait_for("views.open", timeout_s=20))
        assert "Only on-call (the on-call user group)" in json.dumps(refused["blocks"])
        assert "callback_id" not in refused or refused["callback_id"] != VIEW_NODE_DRAIN
        await click(ACTION_NODE_DRAIN, ONCALL)
        opened = await standin.wait_for(
            "views.open", lambda c: view_of(c).get("callback_id") == VIEW_NODE_DRAIN, 20
        )
        view = view_of(opened)
        (field,) = [b for b in view["blocks"] if b["type"] == "input"]
        assert view["callback_id"] == VIEW_NODE_DRAIN and field["block_id"] == f"a4 {NODE}"
        reason = field["element"]["initial_value"]
        assert reason == f"trainbot: failed 2 launches (xid_hardware), drained by {ONCALL}"
        try:
            body = view_submission_body(VIEW_NODE_DRAIN, f"a4 {NODE}", reason, user_id=ONCALL)
            done = await post_signed(events, body)
            assert done.status == 200
            told = await standin.wait_for(
                "chat.postMessage", lambda c: f"`{NODE}` on a4 drained" in str(c.params), 30
            )
            state = node_state()
            before = len(said_to(ONCALL))
            await click(ACTION_NODE_RESUME, ONCALL)
            await standin.wait_for(
                "chat.postEphemeral",
                lambda c: c.params.get("user") == ONCALL and len(said_to(ONCALL)) > before,
                30,
            )
        finally:
            login_run(f"scontrol update nodename={NODE} state=resume", check=False)
        assert told.params["channel"] == f"D{ONCALL}"  # the modal's answer, by DM
        assert state.startswith("drain") and f"drained by {ONCALL}" in state, state
        assert f"`{NODE}` on a4 resumed" in said_to(ONCALL)[-1]
        assert "drain" not in node_state()
        kinds = [e.kind for e in (await web.store.nodes.node_record("a4", NODE)).entries]
        assert kinds == ["resume", "drain", "failure", "failure"]
