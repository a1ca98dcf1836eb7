"""Who sees the node ledger and may drain, and how a ledger row reads (pure)."""

from __future__ import annotations

import pytest

from bot.core.node_ledger import drain_reason, ledger_blocks, may_act, parse_node_value
from bot.settings.config import load_config
from bot.store.nodes import NodeEntry, NodeRecord
from bot.text.actions import ACTION_NODE_DRAIN, ACTION_NODE_RESUME
from commands.context import User
from commands.errors import CommandError
from tests.bot.core.test_core import EXAMPLE

NOW = 100_000.0


def record(*entries: NodeEntry) -> NodeRecord:
    return NodeRecord("a4", "dev3", entries)


def failed(launch_id: str, cause_key: str = "xid_hardware") -> NodeEntry:
    return NodeEntry(at=NOW - 7200, launch_id=launch_id, job_id="1", cause_key=cause_key)


@pytest.mark.parametrize(
    ("user", "allowed"),
    [
        (User(id="U0ADMIN"), True),  # the example config's admin
        (User(id="U0BOB", groups=frozenset({"S0ONCALL"})), True),
        (User(id="U0BOB", groups=frozenset({"S0OTHER"})), False),
        (User(id="U0ALICE"), False),
    ],
)
def test_on_call_and_admins_only(user: User, allowed: bool) -> None:
    context = load_config(EXAMPLE).command_context()
    assert may_act(context, user, "S0ONCALL") is allowed
    assert may_act(context, User(id="U0BOB", groups=frozenset({"S0ONCALL"})), None) is False


def test_a_row_names_the_launches_causes_and_offers_drain_then_resume() -> None:
    user = User(id="U0BOB")
    two = record(failed("L-000002", "node_failure"), failed("L-000001"), failed("L-000001"))
    lines, blocks = ledger_blocks("a4", [two], user, NOW)
    assert lines == [
        "• `dev3`: failed 2 launches (node_failure, xid_hardware; last 2 h ago): L-000002, L-000001"
    ]
    button = blocks[1]["elements"][0]
    assert button["action_id"] == ACTION_NODE_DRAIN and button["value"] == "a4 dev3"
    assert "confirm" not in button  # a modal asks for the reason
    assert drain_reason(two, user) == (
        "trainbot: failed 2 launches (node_failure, xid_hardware), drained by U0BOB"
    )
    drained = record(
        NodeEntry(kind="drain", at=NOW, by="U0BOB", reason="<!here> bad"), *two.entries
    )
    lines, blocks = ledger_blocks("a4", [drained], user, NOW)
    resume = blocks[1]["elements"][0]
    assert resume["action_id"] == ACTION_NODE_RESUME and resume["confirm"]["title"]
    assert "drained by <@U0BOB>: &lt;!here&gt; bad" in lines[0]


@pytest.mark.parametrize("value", ["a4", "a5 dev3", "a4 dev3;id", "a4 ", " dev3"])
def test_a_button_value_trainbot_did_not_make_is_refused(value: str) -> None:
    with pytest.raises(CommandError, match="not one trainbot made"):
        parse_node_value(value, ["a4", "a3m"])
    assert parse_node_value("a4 dev3", ["a4"]) == ("a4", "dev3")
