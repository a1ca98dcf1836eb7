"""from=<job>@<step>: the parse, which checkpoint each layout's step names, the refusal
that lists the steps there are, and what "delete all but the best k and the last" keeps."""

from __future__ import annotations

import pytest

from bot.core import checkpoint_list
from bot.lifecycle.launch import Attempt, Launch
from bot.planning import checkpoints
from bot.planning.checkpoints import Saved
from cluster.watching.tracking import Tracking
from commands import CommandError, TrainRequest, User
from tests.commands.conftest import build_context
from tests.commands.lines import parse_line

ALICE = User(id="U0ALICE", name="alice")
NEMO = r"-step=([0-9]+)(?:-|$)"
NEMO_RL = r"^step_([0-9]+)$"
MBRIDGE = r"^iter_([0-9]+)$"


def nemo_name(step: int, last: bool = False) -> str:
    return f"model_name=0--val_loss=0.00-step={step}-consumed_samples=1280.0" + (
        "-last" if last else ""
    )


def parent(names: list[str], pattern: str, fw: str = "nemo") -> Launch:
    request = TrainRequest(workload="pretrain", model="llama3p1_8b", framework=fw, cluster="a4")
    launch = Launch(request=request, user_id="U0ALICE", user_name="alice", channel="C1")
    tracking = Tracking(
        framework=fw, job_id="41", checkpoint_dir="~/ckpts", checkpoint_pattern=pattern
    )
    launch.attempts.append(Attempt(number=1, job_id="41", tracking=tracking))
    launch.checkpoints = names
    return launch


def test_from_at_step_parses_and_round_trips() -> None:
    context = build_context()
    request = parse_line(
        "/train sft llama3p1_8b cluster=a4 from=l-0A1b2c3d4e@1200", user=ALICE, context=context
    )
    assert isinstance(request, TrainRequest)
    assert (request.start_from, request.start_step) == ("L-0a1b2c3d4e", 1200)
    assert "from=L-0a1b2c3d4e@1200" in request.to_text()
    assert parse_line(request.to_text(), user=ALICE, context=context) == request
    plain = parse_line("/train sft llama3p1_8b from=4187", user=ALICE, context=context)
    assert isinstance(plain, TrainRequest) and plain.start_step is None
    assert "@" not in plain.to_text()
    with pytest.raises(CommandError, match=r"'?last'? is not a step\. After @ give the step"):
        parse_line("/train sft llama3p1_8b from=4187@last", user=ALICE, context=context)
    with pytest.raises(CommandError, match=r"is not a step.*from=4187@200"):
        parse_line("/train sft llama3p1_8b from=4187@", user=ALICE, context=context)


@pytest.mark.parametrize(
    ("names", "pattern"),
    [
        ([nemo_name(100), nemo_name(200), nemo_name(300, last=True), nemo_name(300)], NEMO),
        (["step_100", "step_200", "step_300"], NEMO_RL),
        (["iter_0000100", "iter_0000200", "iter_0000300"], MBRIDGE),
    ],
    ids=["nemo", "nemo-rl", "megatron-bridge"],
)
def test_a_step_names_its_checkpoint_in_each_layout(names: list[str], pattern: str) -> None:
    launch = parent(names, pattern)  # the tracking's pattern reads each layout's step
    assert [p.step for p in checkpoints.saved(launch)] == [100, 200, 300]
    found = checkpoints.chosen(launch, 200)
    assert found is not None and found[1:] == (names[1], 200)
    assert found[0].checkpoint_dir == "~/ckpts"
    newest = checkpoints.chosen(launch, None)
    assert newest is not None and newest[2] == 300
    assert checkpoints.chosen(launch, 250) is None
    assert checkpoints.missing_step(launch, 200) == ""
    assert checkpoints.missing_step(launch, 250) == (
        f"{launch.id} has no complete checkpoint at step 250; its complete checkpoints are "
        "at steps 100, 200 and 300. Give one of those after @, or leave @ out for the newest."
    )


def test_a_launch_without_checkpoints_says_none() -> None:
    launch = parent([], NEMO)
    assert checkpoints.chosen(launch, 5) is None
    assert "are at steps none" in checkpoints.missing_step(launch, 5)


def test_pruning_keeps_the_best_k_and_the_last() -> None:
    points = [
        Saved("s100", 100, 2.0),
        Saved("s200", 200, 1.1),  # best
        Saved("s300", 300, 1.3),  # second best
        Saved("s400", 400, 1.5),
        Saved("s500", 500, 1.9),  # last, worse than most
    ]
    assert [p.name for p in checkpoints.prune_plan(points, keep_best=1)] == ["s100", "s300", "s400"]
    assert [p.name for p in checkpoints.prune_plan(points, keep_best=2)] == ["s100", "s400"]
    assert checkpoints.prune_plan(points, keep_best=9) == []
    # k=0 still keeps the best: the best is never deleted.
    assert [p.name for p in checkpoints.prune_plan(points, keep_best=0)] == ["s100", "s300", "s400"]


def test_pruning_without_losses_keeps_only_the_last_and_ties_keep_the_later() -> None:
    points = [Saved("a", 1), Saved("b", 2), Saved("c", 3)]
    assert [p.name for p in checkpoints.prune_plan(points, keep_best=1)] == ["a", "b"]
    tied = [Saved("a", 1, 1.0), Saved("b", 2, 1.0), Saved("c", 3, 3.0)]
    assert [p.name for p in checkpoints.prune_plan(tied, keep_best=1)] == ["a"]
    assert checkpoints.prune_plan([], keep_best=1) == []
    assert checkpoints.prune_plan([Saved("only", 7, 2.0)], keep_best=0) == []


def test_losses_are_the_validation_at_or_just_before_each_step() -> None:
    points = [Saved("a", 100), Saved("b", 200), Saved("c", 300)]
    got = checkpoints.with_losses(points, {150: 1.5, 200: 1.2, 50: 3.0})
    assert [p.val_loss for p in got] == [3.0, 1.2, 1.2]
    assert checkpoints.with_losses(points[:1], {150: 1.5})[0].val_loss is None


def test_the_list_marks_the_best_and_the_last_and_escapes_names() -> None:
    launch = parent([nemo_name(100), nemo_name(200), "model_name=<!channel>-step=300"], NEMO)
    launch.validation_history = [(100, 2.5), (200, 1.25), (300, 1.75)]
    text = checkpoint_list.listing(launch).text
    lines = text.splitlines()
    assert lines[0].startswith(f"*Checkpoints of {launch.id}* (") and lines[0].endswith(": 3")
    assert lines[1] == f"• step 100 · val loss 2.5 · `{nemo_name(100)}`"
    assert lines[2] == f"• step 200 · val loss 1.25 · *best* · `{nemo_name(200)}`"
    assert (
        lines[3] == "• step 300 · val loss 1.75 · *last* · `model_name=&lt;!channel&gt;-step=300`"
    )
    assert f"from={launch.id}@<step>" in lines[4]
    empty = checkpoint_list.listing(parent([], NEMO)).text
    assert "has no complete checkpoint yet" in empty


def test_the_list_says_each_size_and_the_totals_and_offers_export() -> None:
    launch = parent(["iter_0000100", "iter_0000200", "iter_0000300"], MBRIDGE, "megatron-bridge")
    launch.checkpoint_bytes = {"iter_0000100": 3 * 2**30, "iter_0000200": 1536 * 2**20, "gone": 9}
    launch.outcome = "COMPLETED"
    launch.phase = launch.phase.DONE
    reply = checkpoint_list.listing(launch, person=(6 * 2**40, 3))
    lines = reply.text.splitlines()
    assert lines[1] == "• step 100 · 3 GiB · `iter_0000100`"
    assert lines[2] == "• step 200 · 1.5 GiB · `iter_0000200`"
    assert lines[3] == "• step 300 · *last* · `iter_0000300`"  # not measured: no size
    assert lines[4] == f"Total: 4.5 GiB for {launch.id}; 6 TiB for <@U0ALICE> over 3 launches"
    buttons = [e["action_id"] for e in reply.blocks[-1]["elements"]]
    assert buttons[:2] == ["trainbot_export", "trainbot_evaluate"], buttons
    assert checkpoint_list.launch_bytes(launch) == 4608 * 2**20  # a name no longer listed: out


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1024, "1 KiB"),
        (1536 * 2**20, "1.5 GiB"),
        (812 * 2**20, "812 MiB"),
    ],
)
def test_sizes_read_in_binary_units(size: int, text: str) -> None:
    assert checkpoint_list.size_text(size) == text
