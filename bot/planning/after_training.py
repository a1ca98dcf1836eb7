"""What a launch asks to be done after training (``then=export``, ``then=eval:<tasks>``)
and what has been: whether it is to be done, being followed, exportable; the step's plan;
the baseline its results are held against (bot.wording.after_training words them). Pure:
the loop that submits and follows the steps is :mod:`bot.engine.after_training`."""

from __future__ import annotations

from collections.abc import Sequence

from bot.lifecycle.launch import Launch
from bot.planning.checkpoints import saved
from bot.planning.start_from import newest_checkpoint
from cluster.launching import after_training as steps
from cluster.site.framework_registry import registered
from cluster.watching.tracking import Tracking
from commands.after_training import eval_tasks
from commands.requests import TrainRequest

NOT_RUN = "NOT_RUN"  # after_state when the step could not be submitted


def asked_then(launch: Launch) -> str:
    """The export or evaluation asked of the launch: a button's, else its request's ``then=``."""
    return launch.after_then or getattr(launch.request, "then", None) or ""


def exportable(launch: Launch) -> bool:
    """Whether the launch's framework has a converter trainbot runs (Export, Evaluate)."""
    framework = getattr(launch.request, "framework", "")
    return bool(framework) and bool(registered(framework).export_tool)


def wants_steps(launch: Launch) -> bool:
    """Whether the launch has an export or evaluation still to submit."""
    return (
        isinstance(launch.request, TrainRequest)
        and bool(asked_then(launch))
        and launch.outcome == "COMPLETED"
        and not launch.after_job
        and not launch.after_state
    )


def following(launch: Launch) -> bool:
    """Whether its export or evaluation was submitted and has not been seen to end."""
    return bool(launch.after_job) and not launch.after_state


def result_key(row: steps.EvalRow) -> str:
    return f"{row.task}/{row.metric}"


def chosen_checkpoint(launch: Launch) -> tuple[Tracking, str, int] | None:
    """The checkpoint to export: the one /checkpoints' Export was pressed on (its step in
    ``after_step``), else the newest; None when the launch lists no such one (any more)."""
    found = newest_checkpoint(launch)
    if found is None or launch.after_step is None:
        return found
    tracking = found[0]
    point = next((p for p in saved(launch) if p.step == launch.after_step), None)
    return None if point is None else (tracking, point.name, point.step)


def plan_of(launch: Launch) -> steps.StepPlan | None:
    """Where the launch's export goes (from the chosen checkpoint and what was asked)."""
    found = chosen_checkpoint(launch)
    if found is None:
        return None
    tracking, name, _ = found
    return steps.plan_step(tracking.checkpoint_dir, name, eval_tasks(asked_then(launch)))


def mean_of(members: Sequence[Launch]) -> dict[str, float]:
    """The mean of each task/metric over ``members``' results."""
    sums: dict[str, list[float]] = {}
    for member in members:
        for key, value in member.eval_results.items():
            sums.setdefault(key, []).append(value)
    return {key: sum(values) / len(values) for key, values in sums.items()}
