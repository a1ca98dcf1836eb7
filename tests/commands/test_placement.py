"""``cluster=auto`` and ``policy.placement``: which clusters fit, the choice among
Slurm's answers, and the per-team default."""

from __future__ import annotations

import pytest

from commands import CommandError, Policy, PolicyRule, Principals, TrainRequest, User
from commands.placement import Answer, Placement, PlacementDefault, choose, wait_words
from commands.train import auto_fits
from tests.commands.conftest import build_context, build_profile
from tests.commands.lines import parse_line

ALICE = User(id="U0ALICE", name="alice", groups=frozenset({"S0ML"}))


def test_the_first_to_start_wins_and_the_thread_says_why() -> None:
    answers = [
        Answer("a3m", None, "Requested node configuration is not available"),
        Answer("a4", 2 * 3600 + 10 * 60),
        Answer("a3u", 0.0),
    ]
    assert choose(answers) == (
        "a3u",
        "a3m: n/a (Requested node configuration is not available); a4: in 2 h 10 min; a3u: now",
    )


def test_ties_go_to_the_config_order_and_a_second_of_clock_skew_is_a_tie() -> None:
    assert choose([Answer("a4", 1.0), Answer("a3u", 0.0)]) == ("a4", "a4: now; a3u: now")
    assert choose([Answer("a4", 600.0), Answer("a3u", 600.0)]) == (
        "a4",
        "a4: in 10 min; a3u: in 10 min",
    )
    # The same start read a second apart ties too; a minute apart does not.
    assert choose([Answer("a4", 601.0), Answer("a3u", 600.0)])[0] == "a3u"  # type: ignore[index]
    assert choose([Answer("a4", 599.0), Answer("a3u", 598.0)])[0] == "a4"  # type: ignore[index]
    assert choose([Answer("a4", 661.0), Answer("a3u", 600.0)])[0] == "a3u"  # type: ignore[index]


def test_no_cluster_slurm_can_place_it_on_gives_none() -> None:
    assert choose([Answer("a4", None, "x"), Answer("a3u", None, "y")]) is None
    assert wait_words(Answer("a4", None)) == "n/a (Slurm cannot place it)"
    assert wait_words(Answer("a4", 59.0)) == "in 1 min"


def test_fits_say_why_a_cluster_is_left_out() -> None:
    clusters = {n: build_profile(n) for n in ("a3m", "a3u", "a3h")}
    clusters["a4"] = build_profile("a4", images={"nemo-next": "~/images/nemo-next.sqsh"})
    clusters = {n: clusters[n] for n in ("a3m", "a3u", "a4", "a3h")}
    context = build_context(
        clusters=clusters,
        policy=Policy(rules=(PolicyRule(users=("*",), clusters=("a3u", "a4"), max_nodes=2),)),
    )
    assert [f.why for f in auto_fits(context, ALICE, nodes=1, image="nemo-next")] == [
        "you may not launch there",
        "no image nemo-next",
        "",
        "you may not launch there",
    ]
    found = auto_fits(context, ALICE, nodes=2, image=None)
    assert [(f.cluster, f.why) for f in found] == [
        ("a3m", "you may not launch there"),
        ("a3u", ""),
        ("a4", ""),
        ("a3h", "you may not launch there"),
    ]
    found = auto_fits(context, ALICE, nodes=3, image=None)
    assert [f.why for f in found if f.cluster == "a4"] == ["at most 2 nodes there"]


def test_cluster_auto_parses_and_keeps_its_keys() -> None:
    request = parse_line(
        "/train sft llama3p1_8b cluster=auto nodes=2", user=ALICE, context=build_context()
    )
    assert isinstance(request, TrainRequest)
    assert request.cluster == "auto"
    assert request.nodes == 2
    assert "cluster=auto" in request.to_text()


def test_cluster_auto_refusals_say_what_would_be_right() -> None:
    context = build_context()
    with pytest.raises(CommandError, match=r"partition= names a partition of one cluster"):
        parse_line("/train sft llama3p1_8b cluster=auto partition=a4", user=ALICE, context=context)
    small = build_context(
        policy=Policy(rules=(PolicyRule(users=("*",), clusters=("a4",), max_nodes=1),))
    )
    with pytest.raises(CommandError) as raised:
        parse_line("/train sft llama3p1_8b cluster=auto nodes=2", user=ALICE, context=small)
    text = str(raised.value)
    assert text.startswith("cluster=auto: no cluster can take this launch (")
    assert "a4: at most 1 nodes there" in text and "a3m: you may not launch there" in text


def test_a_teams_default_is_used_when_cluster_is_left_out() -> None:
    placement = Placement(
        defaults=(
            PlacementDefault(groups=("S0ML",), cluster="auto"),
            PlacementDefault(users=("*",), cluster="a3u"),
        )
    )
    policy = Policy(
        admins=Principals(users=("U0ADMIN",)),
        rules=(PolicyRule(users=("*",), max_nodes=4),),
        placement=placement,
    )
    context = build_context(policy=policy)
    mine = parse_line("/train sft llama3p1_8b", user=ALICE, context=context)
    other = parse_line("/train sft llama3p1_8b", user=User(id="U0BOB"), context=context)
    named = parse_line("/train sft llama3p1_8b cluster=a4", user=ALICE, context=context)
    assert isinstance(mine, TrainRequest) and mine.cluster == "auto"
    assert isinstance(other, TrainRequest) and other.cluster == "a3u"
    assert isinstance(named, TrainRequest) and named.cluster == "a4"
    assert policy.group_ids() == frozenset({"S0ML"})
