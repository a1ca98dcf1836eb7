"""bot.core.checkpoint_actions: /checkpoints' buttons on one checkpoint, their value read
back (never trusted), the request Resume launches, New run's form, and which checkpoints
get buttons."""

from __future__ import annotations

import pytest

from bot.core import checkpoint_actions as ca
from bot.core.checkpoint_list import listing
from bot.lifecycle.launch import Launch, Phase
from bot.planning.after_training import chosen_checkpoint
from bot.text.actions import ACTION_CKPT_EXPORT, ACTION_CKPT_NEW_RUN, ACTION_CKPT_RESUME
from commands import CommandError
from tests.bot.planning.test_checkpoints import NEMO_RL, parent


def ended(steps: list[int], outcome: str = "COMPLETED") -> Launch:
    launch = parent([f"step_{s}" for s in steps], NEMO_RL, fw="nemo-rl")
    launch.request = launch.request.model_copy(update={"workload": "sft", "after": "L-0a1b2c3d"})
    launch.phase, launch.outcome = Phase.DONE, outcome
    return launch


@pytest.mark.parametrize(
    "value", ["L-abc", "L-abc@", "L-abc@x", "@12", "L-abc@12;touch /tmp/x", "L abc@1", ""]
)
def test_a_value_trainbot_did_not_make_is_refused(value: str) -> None:
    with pytest.raises(CommandError, match="is not one trainbot made"):
        ca.split_value(value)


def test_a_value_reads_back_as_launch_and_step() -> None:
    assert ca.split_value("L-0a1b2c3d4e@1200") == ("L-0a1b2c3d4e", 1200)


def test_resume_is_the_same_request_from_that_step_waiting_for_nothing() -> None:
    launch = ended([10, 20, 30])
    request = ca.resume_request(launch, 20)
    assert (request.start_from, request.start_step) == (launch.id, 20)
    assert request.after is None and request.workload == "sft"
    assert f"from={launch.id}@20" in request.to_text()


def test_a_step_not_saved_or_a_running_launch_is_refused_saying_why() -> None:
    launch = ended([10, 20])
    with pytest.raises(CommandError) as caught:
        ca.resume_request(launch, 15)
    assert str(caught.value) == (
        f"{launch.id} has no complete checkpoint at step 15 (it has 10 and 20); "
        f"run /checkpoints {launch.id} again."
    )
    launch.phase, launch.outcome = Phase.RUNNING, ""
    with pytest.raises(CommandError, match=f"from={launch.id}@10 from_running=yes"):
        ca.resume_request(launch, 10)


def test_new_run_opens_the_relaunch_form_filled_in_with_from() -> None:
    launch = ended([10, 20])
    form = ca.new_run_form(launch, 10)
    (field,) = [b for b in form.blocks if b["type"] == "input"]
    assert field["block_id"] == launch.id and form.modal_submit == "trainbot_view_relaunch"
    assert field["element"]["initial_value"].startswith("sft llama3p1_8b ")
    assert f"from={launch.id}@10" in field["element"]["initial_value"]


def test_the_newest_five_get_buttons_newest_first_export_only_when_it_completed() -> None:
    launch = ended(list(range(1, 9)))
    rows = ca.buttons(launch, export=True)
    values = [r["elements"][0]["value"] for r in rows]
    assert values == [f"{launch.id}@{s}" for s in (8, 7, 6, 5, 4)]
    assert [e["action_id"] for e in rows[0]["elements"]] == [
        ACTION_CKPT_RESUME, ACTION_CKPT_NEW_RUN, ACTION_CKPT_EXPORT,
    ]  # fmt: skip
    failed = ended([1, 2], outcome="FAILED")
    shown = listing(failed)
    ids = [e["action_id"] for b in shown.blocks if b["type"] == "actions" for e in b["elements"]]
    assert ACTION_CKPT_EXPORT not in ids and ids.count(ACTION_CKPT_RESUME) == 2
    failed.phase = Phase.RUNNING
    assert ca.buttons(failed, export=False) == []


def test_export_of_a_chosen_checkpoint_plans_that_one_else_the_newest() -> None:
    launch = ended([10, 20, 30])
    assert chosen_checkpoint(launch) is not None
    assert chosen_checkpoint(launch)[1:] == ("step_30", 30)  # type: ignore[index]
    launch.after_step = 20
    assert chosen_checkpoint(launch)[1:] == ("step_20", 20)  # type: ignore[index]
    launch.after_step = 25  # deleted since, or never there
    assert chosen_checkpoint(launch) is None
