"""The words of a launch's export and evaluation after training
(bot/wording/after_training.py), from the facts bot/engine/after_training.py writes: one
test per thing it says, paths, tasks and errors escaped, the results held against a
baseline."""

from __future__ import annotations

from bot.lifecycle.events import Event
from bot.wording import thread


def says(**facts: object) -> str:
    return thread.line(Event("thread", "L-1", data={"move": "after_training", **facts}))


def test_nothing_to_export_or_outside_or_not_submitted() -> None:
    assert says(said="no_checkpoint", then="export") == (
        "then=export: the run has no checkpoint trainbot saw, so there is nothing to export."
    )
    assert says(said="no_checkpoint", then="export", at_step=30).startswith(
        "then=export: the run has no checkpoint at step 30 trainbot saw"
    )
    assert says(said="outside", tasks=["mmlu"], problem="not under <root>") == (
        "No evaluation (mmlu): not under &lt;root&gt;."
    )
    assert says(said="not_submitted", tasks=[], step=30, error="sbatch: error") == (
        "The export of step 30 was not submitted: sbatch: error"
    )


def test_submitted_and_unfollowed() -> None:
    going = says(said="submitted", step=30, tool="convert.py", tasks=["mmlu", "gsm8k"],
                 job="42", cluster="a4")  # fmt: skip
    assert going == (
        "Exporting step 30 to Hugging Face format with convert.py, then evaluating mmlu, "
        "gsm8k: Slurm job 42 on a4."
    )
    assert says(said="unfollowed", job="42", hours=24.0) == (
        "Job 42 (after training) has not ended after 24 h; trainbot no longer follows it."
    )


def test_ended_with_results_against_a_baseline_and_without_a_model() -> None:
    rows = [{"task": "mmlu", "metric": "acc", "value": 0.61, "stderr": 0.01}]
    facts = {"job": "42", "state": "COMPLETED", "exported": True, "hf_dir": "/hf/L-1"}
    facts |= {"tasks": ["mmlu"], "results": rows, "against": {"mmlu/acc": 0.6}, "baseline": "L-0"}
    said = says(said="ended", **facts)
    assert said.splitlines()[:3] == [
        "Exported to Hugging Face format: `/hf/L-1`",
        "Evaluation (mmlu):",
        "```",
    ]
    assert "mmlu  acc     0.6100  ±0.0100  +0.0100" in said
    failed = says(said="ended", job="42", state="FAILED", exported=False, hf_dir="/hf/L-1",
                  tasks=[], tail="Traceback <x>")  # fmt: skip
    assert failed == (
        "The export (job 42) ended FAILED without a model.\n```\nTraceback &lt;x&gt;\n```"
    )


def test_an_export_or_evaluation_asked_by_a_button_says_what_and_of_which_step() -> None:
    asked = {"move": "after_asked", "what": "export", "then": "export"}
    assert thread.line(Event("thread", "L-1", data=asked)) == "Export asked: then=export."
    of_step = {**asked, "what": "evaluation", "then": "eval:gsm8k", "step": 1200}
    assert thread.line(Event("thread", "L-1", data=of_step)) == (
        "Evaluation of step 1,200 asked: then=eval:gsm8k."
    )
