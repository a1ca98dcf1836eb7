"""/usage without a cluster: who may see what, and the CSV cells."""

from __future__ import annotations

import csv
import io

import pytest

from bot.core.usage import csv_bytes, may_see, select
from bot.store.budgets import Charge
from commands.context import User
from commands.errors import CommandError
from commands.policy import Policy, Principals, Team, UsagePolicy
from commands.requests import UsageRequest

POLICY = Policy(
    admins=Principals(users=("U0ADMIN",)),
    usage=UsagePolicy(teams=(Team(group="S0ML", leads=("U0LEAD",)),)),
)


@pytest.mark.parametrize(
    ("who", "request_", "members", "allowed"),
    [
        ("U0ALICE", UsageRequest(target="U0ALICE"), (), True),
        # "own" is the Slack user id: a user_name (deprecated, reusable) is someone else's
        # name to anyone but an admin; the parser turns one's own @name into one's id
        ("U0ALICE", UsageRequest(target="alice"), (), False),
        ("U0EVE", UsageRequest(target="U0BOB"), (), False),
        ("U0ALICE", UsageRequest(target="U0BOB"), (), False),
        ("U0LEAD", UsageRequest(target="U0BOB"), ("U0BOB",), True),  # a member of their team
        ("U0LEAD", UsageRequest(target="U0CAROL"), ("U0BOB",), False),
        ("U0LEAD", UsageRequest(scope="team", target="S0ML"), (), True),
        ("U0ALICE", UsageRequest(scope="team", target="S0ML"), (), False),
        ("U0LEAD", UsageRequest(scope="cluster", target="a4"), (), False),
        ("U0ADMIN", UsageRequest(scope="cluster", target="a4"), (), True),
        ("U0ADMIN", UsageRequest(target="U0BOB"), (), True),
    ],
)
def test_own_always_leads_their_team_admins_all(
    who: str, request_: UsageRequest, members: tuple[str, ...], allowed: bool
) -> None:
    user = User(id=who, name={"U0ALICE": "alice", "U0EVE": "U0BOB"}.get(who, ""))
    if allowed:
        may_see(POLICY, user, request_, members)
    else:
        with pytest.raises(CommandError, match="usage"):
            may_see(POLICY, user, request_, members)


def test_csv_cells_never_run_as_formulas_and_hours_sum_back() -> None:
    rows = [
        Charge(launch_id="L-1", user_id="U1", user_name="=HYPERLINK(1)", cluster="a4",
               gpu_hours=0.1, ended_at=0.0),
        Charge(launch_id="L-2", user_id="U1", user_name="ann", cluster="a4",
               gpu_hours=0.2, ended_at=0.0),
    ]  # fmt: skip
    read = list(csv.DictReader(io.StringIO(csv_bytes(rows, {"a4": None}).decode())))
    assert read[0]["user_name"] == "'=HYPERLINK(1)" and read[1]["user_name"] == "ann"
    assert sum(float(r["gpu_hours"]) for r in read) == 0.1 + 0.2
    assert read[0]["cost"] == ""


def test_a_person_is_selected_by_id_when_named_by_id() -> None:
    """A charge whose recorded user_name happens to read as someone's id is not theirs."""
    rows = [
        Charge(launch_id="L-1", user_id="U0BOB", user_name="bob", cluster="a4",
               gpu_hours=1.0, ended_at=0.0),
        Charge(launch_id="L-2", user_id="U0EVE", user_name="u0bob", cluster="a4",
               gpu_hours=2.0, ended_at=0.0),
    ]  # fmt: skip
    assert [c.launch_id for c in select(rows, UsageRequest(target="U0BOB"), ())] == ["L-1"]
    assert [c.launch_id for c in select(rows, UsageRequest(target="bob"), ())] == ["L-1"]
