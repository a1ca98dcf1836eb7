"""/train with comma lists and seeds=: the product, its order, its cap, and every refusal."""

from __future__ import annotations

import pytest

from cluster.launching.recipes import DEFAULT_CATALOG, RecipeEntry
from commands import CommandError, Policy, PolicyRule, Principals, TrainRequest, User
from commands.context import CommandContext
from commands.requests import SweepRequest
from tests.commands.conftest import build_context
from tests.commands.lines import parse_line


def _sweep(line: str, context: CommandContext | None = None) -> SweepRequest:
    request = parse_line(
        line, user=User(id="U0ALICE", name="alice"), context=context or build_context()
    )
    assert isinstance(request, SweepRequest)
    return request


def _error(line: str, context: CommandContext | None = None) -> str:
    with pytest.raises(CommandError) as caught:
        parse_line(line, user=User(id="U0ALICE", name="alice"), context=context or build_context())
    return str(caught.value)


def _seeded_context(**policy: object) -> CommandContext:
    nemo = DEFAULT_CATALOG.find("sft", "llama3p1_8b", "nemo")
    assert nemo is not None
    seeded = RecipeEntry.model_validate(
        {**nemo.model_dump(), "overrides": {**nemo.overrides, "seed": "[0-9]{1,6}"}}
    )
    return build_context(catalog=DEFAULT_CATALOG.merged([seeded]), **policy)


def test_two_lists_make_their_product_in_the_order_written() -> None:
    sweep = _sweep(
        "/train sft llama3p1_8b nodes=2 cluster=a4 optim.config.lr=1e-5,3e-5 "
        "trainer.max_steps=100,200"
    )
    assert sweep.axes == (
        ("optim.config.lr", ("1e-5", "3e-5")),
        ("trainer.max_steps", ("100", "200")),
    )
    got = [dict(m.overrides) for m in sweep.members]
    assert got == [
        {"optim.config.lr": "1e-5", "trainer.max_steps": "100"},
        {"optim.config.lr": "1e-5", "trainer.max_steps": "200"},
        {"optim.config.lr": "3e-5", "trainer.max_steps": "100"},
        {"optim.config.lr": "3e-5", "trainer.max_steps": "200"},
    ]
    assert all(
        isinstance(m, TrainRequest) and m.nodes == 2 and m.cluster == "a4" for m in sweep.members
    )
    assert [sweep.values_of(i) for i in range(4)] == [
        tuple(sorted(dict(m.overrides).items())) for m in sweep.members
    ]


def test_nodes_can_vary_and_each_member_is_checked_against_the_node_limit() -> None:
    sweep = _sweep("/train sft llama3p1_8b nodes=1,2 cluster=a4")
    assert [m.nodes for m in sweep.members] == [1, 2]
    assert "nodes=5" in _error("/train sft llama3p1_8b nodes=1,5 cluster=a4")


def test_text_round_trips_to_the_same_sweep() -> None:
    line = "/train sft llama3p1_8b cluster=a4 optim.config.lr=1e-5,3e-5 dry_run=true"
    sweep = _sweep(line)
    assert sweep.dry_run
    assert _sweep(sweep.to_text()) == sweep


def test_seeds_repeat_each_member_with_the_recipe_seed_key() -> None:
    context = _seeded_context()
    sweep = _sweep("/train sft llama3p1_8b cluster=a4 optim.config.lr=1e-5,3e-5 seeds=3", context)
    assert len(sweep.members) == 6
    assert [dict(m.overrides)["seed"] for m in sweep.members] == ["1", "2", "3"] * 2
    assert sweep.seed_key == "seed"
    assert "seeds=3" in sweep.to_text()
    assert _sweep(sweep.to_text(), context) == sweep


def test_seeds_without_a_seed_override_is_refused_with_the_overrides_named() -> None:
    text = _error("/train sft llama3p1_8b seeds=2")
    assert text.startswith("seeds= needs a recipe with a seed override")
    assert "optim.config.lr" in text


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("/train sft llama3p1_8b seeds=0", "seeds='0' is not a number of seeds; give 1 to 16"),
        ("/train sft llama3p1_8b seeds=3 seed=4", "Give either seeds=N or seed=..., not both"),
    ],
)
def test_bad_seeds(line: str, expected: str) -> None:
    assert expected in _error(line, _seeded_context())


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "/train sft llama3p1_8b cluster=a4,a3m",
            "only nodes and recipe overrides can take a list",
        ),
        ("/train sft llama3p1_8b optim.config.lr=1e-5,", "has an empty item"),
        ("/train sft llama3p1_8b optim.config.lr=1e-5,1e-5", "gives a value twice"),
        (
            "/train sft llama3p1_8b optim.config.lr=1e-5,fast",
            "optim.config.lr='fast' is not allowed",
        ),
        ("/train sft llama3p1_8b optim.config.lr=1e-5,3e-5 after=L-abcdef", "after= does not go"),
    ],
)
def test_bad_lists(line: str, expected: str) -> None:
    assert expected in _error(line)


def test_the_cap_is_policy_max_sweep() -> None:
    line = "/train sft llama3p1_8b optim.config.lr=1,2,3 trainer.max_steps=1,2,3"
    assert "That sweep is 9 launches (3 x 3), more than the 8 a sweep may have" in _error(line)
    policy = Policy(
        admins=Principals(users=("U0ADMIN",)),
        rules=(PolicyRule(users=("*",), max_nodes=4),),
        max_sweep=64,
    )
    assert len(_sweep(line, build_context(policy=policy)).members) == 9


def test_a_value_the_recipe_takes_whole_is_not_a_list() -> None:
    nemo = DEFAULT_CATALOG.find("sft", "llama3p1_8b", "nemo")
    assert nemo is not None
    listy = RecipeEntry.model_validate(
        {**nemo.model_dump(), "overrides": {**nemo.overrides, "data.splits": "[0-9,]+"}}
    )
    context = build_context(catalog=DEFAULT_CATALOG.merged([listy]))
    request = parse_line(
        "/train sft llama3p1_8b data.splits=98,1,1", user=User(id="U0A", name="a"), context=context
    )
    assert isinstance(request, TrainRequest)
    assert dict(request.overrides)["data.splits"] == "98,1,1"
