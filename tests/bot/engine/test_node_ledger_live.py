"""The node ledger on the dev cluster: a node that failed two launches is shown to on-call
under /clusters, Drain drains it in Slurm and Resume undoes it. The node is resumed in any
case, and drained only for a few seconds: other tests need every node."""

from __future__ import annotations

import io
import time

import pytest

from bot.console.chat import ConsoleFront
from bot.engine.evidence import record_faulty_node
from bot.lifecycle.launch import Launch
from bot.runtime.assembly import running
from bot.text.actions import ACTION_NODE_DRAIN, ACTION_NODE_RESUME, VIEW_NODE_DRAIN
from bot.text.front import Incoming, Reply
from cluster.watching.diagnosis import CATALOG, Diagnosis
from commands.requests import TrainRequest
from tests.bot.botkit import bot_settings, dev_config, login_run

pytestmark = [pytest.mark.devcluster, pytest.mark.usefixtures("clean_redis")]

NODE = "dev3"
ONCALL = "U0ONCALL"  # a trainbot admin in this config


def node_state() -> str:
    return login_run(f"sinfo -h -N -n {NODE} -o '%T|%E'").strip()


def failed_launch(number: int) -> Launch:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    return Launch(id=f"L-1ed9e{number}", request=request, user_id="U0ALICE", channel="C1")


async def click(bot: object, user: str, action_id: str, value: str) -> Reply:
    incoming = Incoming(user_id=user, user_name=user, channel_id="C1", action_id=action_id,
                        action_value=value)  # fmt: skip
    return await bot.core(incoming)  # type: ignore[attr-defined, no-any-return]


async def submit(bot: object, user: str, block_id: str, typed: str) -> Reply:
    """The Drain modal submitted, as the Slack edge hands it to the core."""
    incoming = Incoming(user_id=user, user_name=user, channel_id="", action_id=VIEW_NODE_DRAIN,
                        action_value=block_id, text=typed)  # fmt: skip
    return await bot.core(incoming)  # type: ignore[attr-defined, no-any-return]


async def test_a_node_that_failed_two_launches_is_drained_and_resumed_from_clusters() -> None:
    admins = "admins: {users: [], groups: []}"
    config = dev_config(edit=lambda t: t.replace(admins, f"admins: {{users: [{ONCALL}]}}"))
    xid = next(k for k in CATALOG if k.key == "xid_hardware")
    assert "drain" not in node_state(), "the node is drained before the test: left as it is"
    async with running(bot_settings(), config, ConsoleFront(io.StringIO(), color=False)) as bot:
        for number, job in ((1, "9001"), (2, "9002")):  # as the poller writes a failed job's
            found = Diagnosis(kind=xid, evidence=("NVRM: Xid 79",), failed_node=NODE)
            await record_faulty_node(
                bot.store, "a4", failed_launch(number), job, found, time.time()
            )
        listed = await bot.core(
            Incoming(user_id=ONCALL, user_name="oncall", channel_id="C1", command="/clusters",
                     text="a4")
        )  # fmt: skip
        assert not listed.error, listed.text
        assert f"`{NODE}`: failed 2 launches (xid_hardware" in listed.text, listed.text
        assert "L-1ed9e2, L-1ed9e1" in listed.text
        drain = [
            e for b in listed.blocks if b["type"] == "actions" for e in b["elements"]
            if e["action_id"] == ACTION_NODE_DRAIN
        ]  # fmt: skip
        assert len(drain) == 1 and drain[0]["value"] == f"a4 {NODE}"
        people = await bot.core(
            Incoming(user_id="U0ALICE", user_name="alice", channel_id="C1", command="/clusters")
        )
        assert "Node ledger" not in people.text  # on-call and admins only
        refused = await click(bot, "U0ALICE", ACTION_NODE_DRAIN, f"a4 {NODE}")
        assert refused.error and "Only on-call (the on-call user group)" in refused.text
        assert "drain" not in node_state()
        form = await click(bot, ONCALL, ACTION_NODE_DRAIN, f"a4 {NODE}")  # the modal
        assert form.modal == f"Drain {NODE}" and form.modal_submit == VIEW_NODE_DRAIN, form
        field = form.blocks[-1]
        assert field["block_id"] == f"a4 {NODE}"
        reason = field["element"]["initial_value"]
        assert reason == f"trainbot: failed 2 launches (xid_hardware), drained by {ONCALL}"
        empty = await submit(bot, ONCALL, f"a4 {NODE}", "  ")
        assert empty.error and "A drain needs a reason" in empty.text
        assert "drain" not in node_state()
        try:
            drained = await submit(bot, ONCALL, f"a4 {NODE}", reason)
            state = node_state()
            resumed = await click(bot, ONCALL, ACTION_NODE_RESUME, f"a4 {NODE}")
        finally:
            login_run(f"scontrol update nodename={NODE} state=resume", check=False)
        assert not drained.error, drained.text
        assert state.startswith("drain"), state  # drained (or draining while a job ends)
        assert f"failed 2 launches (xid_hardware), drained by {ONCALL}" in state
        assert not resumed.error and "resumed" in resumed.text, resumed.text
        assert "drain" not in node_state()
        record = await bot.store.nodes.node_record("a4", NODE)
        assert [e.kind for e in record.entries] == ["resume", "drain", "failure", "failure"]
        bogus = await submit(bot, ONCALL, "a4 dev3;id", "x")
        assert bogus.error and "not one trainbot made" in bogus.text
