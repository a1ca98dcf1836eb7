"""then=export and then=eval:<tasks>: parsed to one canonical value, checked against the
framework and the cluster, and never taken for a sweep."""

from __future__ import annotations

import pytest

from commands import CommandError, User
from commands.after_training import eval_tasks, parse_then
from commands.requests import TrainRequest
from tests.commands.lines import parse_line

MB = "/train pretrain llama3p1_8b framework=megatron-bridge"

ACCEPTED = [
    ("export", "export"),
    ("EXPORT", "export"),
    ("eval:arc_easy", "eval:arc_easy"),
    ("eval:arc_easy,hellaswag", "eval:arc_easy,hellaswag"),
    ("eval: mmlu , gsm8k", "eval:mmlu,gsm8k"),
    ("eval:mmlu,mmlu", "eval:mmlu"),
]


@pytest.mark.parametrize(("raw", "canonical"), ACCEPTED)
def test_accepted(raw: str, canonical: str) -> None:
    assert parse_then(raw) == canonical


REJECTED = [
    ("evaluate", "is not a step trainbot runs after training. Use then=export or then=eval:"),
    ("exprot", "Did you mean export?"),
    ("export:hf", "export takes nothing after it"),
    ("eval", "say which tasks to evaluate"),
    ("eval:", "say which tasks to evaluate"),
    ("eval:a,,b", "say which tasks to evaluate"),
    ("eval:arc$(id)", "is not a task name"),
    ("eval:" + ",".join(f"t{n}" for n in range(17)), "names 17 tasks; at most 16"),
]


@pytest.mark.parametrize(("raw", "message"), REJECTED)
def test_rejected(raw: str, message: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse_then(raw)
    assert message in str(caught.value)
    assert caught.value.field == "then"


def test_eval_tasks() -> None:
    assert eval_tasks("eval:a,b") == ("a", "b")
    assert eval_tasks("export") == ()
    assert eval_tasks(None) == ()


def test_a_launch_keeps_then_and_says_it_back(make_context, make_profile, user: User) -> None:  # type: ignore[no-untyped-def]
    context = make_context(clusters={"a4": make_profile("a4", eval_command="lm_eval {model}")})
    request = parse_line(
        f"{MB} cluster=a4 then=eval:arc_easy,hellaswag", user=user, context=context
    )
    assert isinstance(request, TrainRequest)
    assert request.then == "eval:arc_easy,hellaswag"  # a comma in then= is no sweep
    assert "then=eval:arc_easy,hellaswag" in request.to_text()
    again = parse_line(request.to_text(), user=user, context=context)
    assert again == request


def test_eval_needs_the_clusters_recipe(parse) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError) as caught:
        parse(f"{MB} cluster=a4 then=eval:arc_easy")
    assert str(caught.value) == (
        "then=eval:arc_easy: cluster a4 has no evaluation recipe (its operators set "
        "clusters.a4.eval_command in trainbot.yaml). Use then=export here, or a cluster that "
        "has one."
    )
    assert isinstance(parse(f"{MB} cluster=a4 then=export"), TrainRequest)


@pytest.mark.parametrize("framework", ["nemo", "nemo-rl", "megatron-bridge"])
def test_every_framework_has_its_converter(parse, framework: str) -> None:  # type: ignore[no-untyped-def]
    request = parse(f"/train sft llama3p1_8b framework={framework} then=export")
    assert isinstance(request, TrainRequest) and request.then == "export"
