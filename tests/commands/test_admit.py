"""admit(): one answer per launch, as a table (no Redis, no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from commands.admission import Admission, Standing, TeamPot, admit
from commands.context import User
from commands.policy import BudgetRule, Policy, PolicyRule, Principals, TeamBudgetRule
from commands.requests import InteractiveRequest, TrainRequest
from commands.rules import AccountRule, ImageRule

NOW = 1_765_000_000.0  # 2025-12-06, ISO week 2025-W49
IMAGES = {"nemo": "/images/nemo-20250721.sqsh"}
POLICY = Policy(
    admins=Principals(users=("U0ADMIN",)),
    rules=(
        PolicyRule(groups=("S0ML",), clusters=("a4",), max_nodes=4, max_concurrent=2),
        PolicyRule(users=("*",), clusters=("a3m",), max_nodes=2, approval_above_nodes=1),
    ),
    accounts=(AccountRule(groups=("S0ML",), clusters=("a4",), account="ml-team"),),
    custom_images=(
        ImageRule(groups=("S0ML",), clusters=("a4",), dirs=("/scratch/images",)),
        ImageRule(users=("U0TRUST",), clusters=("*",), dirs=("/trusted",), job_secrets=True),
    ),
    budgets=(BudgetRule(groups=("S0ML",), clusters=("a4",), gpu_hours_per_week=100),),
    team_budgets=(TeamBudgetRule(group="S0ML", clusters=("a4",), gpu_hours=500),),
)
ML = frozenset({"S0ML"})


def req(cluster: str = "a4", nodes: int = 1, **extra: Any) -> TrainRequest:
    return TrainRequest(
        workload="sft", model="llama3p1_8b", framework="nemo", cluster=cluster, nodes=nodes,
        **extra,
    )  # fmt: skip


def ask(
    request: TrainRequest | InteractiveRequest,
    user: str = "U0ALICE",
    groups: frozenset[str] = ML,
    **standing: Any,
) -> Admission:
    return admit(
        POLICY,
        request,
        User(id=user, groups=groups),
        images=IMAGES,
        standing=Standing(now=NOW, **{"estimate_gpu_hours": 8.0, **standing}),
    )


# request, user, groups, standing -> allowed, field, needs approval, words in the reason
REFUSALS = [
    (req("a3u"), "U0ALICE", ML, {}, "", "no policy rule covers you there"),
    (req("a4"), "U0ALICE", frozenset(), {}, "", "no policy rule covers you there"),
    (req("a4", 5), "U0ALICE", ML, {}, "", "nodes=5 is more than you may use on a4"),
    (req("a4"), "U0ALICE", ML, {"active_launches": 2}, "", "your limit is 2"),
    (req("a4", over_budget=True), "U0ALICE", ML, {}, "over_budget", "for trainbot admins only"),
    (req("a4", image="/home/x/evil.sqsh"), "U0ALICE", ML, {}, "image", "not in a directory"),
    (req("a3m", image="/scratch/images/x.sqsh"), "U0BOB", frozenset(), {}, "image", "not allowed"),
]


@pytest.mark.parametrize(("request_", "user", "groups", "standing", "key", "words"), REFUSALS)
def test_refusals_say_why_and_name_the_key(
    request_: TrainRequest, user: str, groups: frozenset[str], standing: Any, key: str, words: str
) -> None:
    admission = ask(request_, user, groups, **standing)
    assert not admission.allowed
    assert admission.field == key
    assert words in admission.reason


def test_an_allowed_launch_carries_everything_train_needs() -> None:
    admission = ask(req("a4", 2), charged_gpu_hours=50.0, held_gpu_hours=10.0)
    assert admission.allowed and not admission.needs_approval
    assert admission.reason == "Allowed by policy rule 1."
    assert (admission.max_concurrent, admission.limit) == (2, 2)
    assert admission.account == "ml-team"
    assert admission.image_secrets
    assert admission.budget is not None and admission.budget.allowed
    assert "40.0 GPU-hours left" in admission.budget.reason
    assert (admission.budget_total, admission.week) == (100.0, "2025-W49")
    assert admission.teams == (TeamPot("group:S0ML", "2025-W49", 500.0),)


def test_a_budget_without_room_or_an_estimate_is_said_not_refused_here() -> None:
    full = ask(req("a4"), charged_gpu_hours=95.0)
    assert full.allowed and full.over_budget and full.budget is not None
    assert "only 5.0 GPU-hours" in full.budget.reason
    unknown = ask(req("a4"), estimate_gpu_hours=None)
    assert unknown.over_budget and unknown.budget is not None
    assert "has no estimate" in unknown.budget.reason


def test_no_budget_rule_no_budget_and_no_account() -> None:
    admission = ask(req("a3m"), "U0BOB", frozenset())
    assert admission.allowed and admission.budget is None and not admission.over_budget
    assert (admission.account, admission.teams, admission.week) == ("", (), "")
    assert admission.limit is None


@pytest.mark.parametrize(
    ("request_", "recheck", "approval"),
    [(req("a3m", 2), False, True), (req("a3m", 2), True, False), (req("a3m", 1), False, False)],
)
def test_approval_is_asked_once_at_train_not_again_as_it_moves(
    request_: TrainRequest, recheck: bool, approval: bool
) -> None:
    admission = ask(request_, "U0BOB", frozenset(), recheck=recheck)
    assert admission.allowed and admission.needs_approval is approval


def test_a_recheck_does_not_count_the_launch_against_its_own_max_concurrent() -> None:
    assert ask(req("a4"), active_launches=2, recheck=True).allowed


def test_a_person_out_of_the_group_is_refused_on_recheck() -> None:
    admission = ask(req("a4"), "U0ALICE", frozenset(), recheck=True)
    assert not admission.allowed and "no policy rule covers you" in admission.reason


@pytest.mark.parametrize(
    ("image", "user", "groups", "secrets"),
    [
        ("nemo", "U0ALICE", ML, True),  # the cluster's own, by name
        ("/images/nemo-20250721.sqsh", "U0ALICE", ML, True),  # and by path
        ("/scratch/images/mine.sqsh", "U0ALICE", ML, False),  # custom: no job secrets
        ("/trusted/x.sqsh", "U0TRUST", ML, True),  # a rule that gives them
    ],
)
def test_image_secrets(image: str, user: str, groups: frozenset[str], secrets: bool) -> None:
    admission = ask(req("a4", image=image), user, groups)
    assert admission.allowed and admission.image_secrets is secrets


def test_admins_pass_rules_and_may_go_over_budget() -> None:
    admission = ask(req("a3u", 8, over_budget=True), "U0ADMIN", frozenset())
    assert admission.allowed and not admission.needs_approval
    assert admission.teams == ()  # over_budget=true counts in no team pot


def test_dry_runs_are_held_to_dry_runs_at_once_and_count_in_no_team() -> None:
    admission = ask(req("a4", dry_run=True), active_launches=2)
    assert admission.allowed
    assert admission.limit == POLICY.limits.dry_runs_at_once
    assert admission.teams == ()


def test_interactive_requests_are_admitted_the_same_way() -> None:
    request = InteractiveRequest(cluster="a4", nodes=1)
    assert ask(request).allowed
    assert not ask(request, groups=frozenset()).allowed
