"""Export and Evaluate on a finished thread: ``then=export`` and ``then=eval:<tasks>`` asked
after the end. The web role only checks and records the ask (the launch's record and the
cluster's pending set in Redis); the poller holding the cluster submits the job and says
what it found in the thread (:mod:`bot.engine.after_training`)."""

from __future__ import annotations

from bot.core.checkpoint_actions import checked_step
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.planning.after_training import following
from bot.store.store import Store
from bot.text.actions import VIEW_EVALUATE
from bot.text.front import Reply
from bot.text.mrkdwn import escape, section, text_input
from commands.after_training import EXPORT, check_then, eval_tasks, parse_then
from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.requests import TrainRequest


def _askable(launch: Launch) -> TrainRequest:
    """The launch's request, or CommandError when it cannot be exported or evaluated now."""
    if launch.active:
        raise CommandError(
            f"{launch.id} is still {launch.phase.value}; Export and Evaluate are for a run "
            "that completed (or give then= when you launch)."
        )
    if launch.outcome != "COMPLETED" or not isinstance(launch.request, TrainRequest):
        raise CommandError(
            f"{launch.id} ended {launch.outcome or launch.phase.value}; only a training run "
            "that completed is exported or evaluated."
        )
    if following(launch):
        raise CommandError(
            f"{launch.id}'s export (Slurm job {launch.after_job}) is still running; its "
            "thread says when it ends."
        )
    return launch.request


def evaluate_form(context: CommandContext, launch: Launch) -> Reply:
    """Evaluate: a modal asking which tasks (the launch's own then=eval tasks first)."""
    request = _askable(launch)
    check_then("eval:x", request.framework, context.profile(launch.cluster))
    tasks = eval_tasks(launch.after_then or request.then)
    text = (
        f"Export {launch.id}'s newest checkpoint to Hugging Face format and run "
        f"{escape(launch.cluster)}'s evaluation recipe on these tasks."
    )
    blocks = [
        section(text),
        text_input(
            launch.id,
            "Tasks",
            ",".join(tasks),
            "lm-evaluation-harness task names, comma-separated: arc_easy,hellaswag",
        ),
    ]
    return Reply(text, blocks=blocks, modal="Evaluate", modal_submit=VIEW_EVALUATE)


async def ask(
    store: Store,
    context: CommandContext,
    launch: Launch,
    user: User,
    tasks_text: str = "",
    step: int | None = None,
) -> Reply:
    """Export (``tasks_text`` empty) or Evaluate (its tasks) asked for a finished launch by
    its owner: recorded on the launch and queued for the poller of its cluster. ``step``:
    the checkpoint /checkpoints' Export was pressed on (None: the newest)."""
    request = _askable(launch)
    then = parse_then(f"eval:{tasks_text}") if tasks_text.strip() else EXPORT
    check_then(then, request.framework, context.profile(launch.cluster))
    what = "evaluation" if eval_tasks(then) else "export"
    if step is not None:
        checked_step(launch, step)
    which = "" if step is None else f" of step {step:,}"

    def record(stored: Launch) -> list[Event]:
        if following(stored):
            return []
        stored.after_then, stored.after_job, stored.after_state = then, "", ""
        stored.after_step = step
        said: dict[str, object] = {"move": "after_asked", "what": what, "then": then}
        if step is not None:
            said["step"] = step
        return [Event("thread", stored.id, data=said)]

    stored, events = await store.launches.mutate(launch.id, record)
    if not events:
        raise CommandError(f"{launch.id}'s export is already running (job {stored.after_job}).")
    await store.launches.ask_after(stored.cluster, stored.id)
    return Reply(
        f"The {what}{which} of {launch.id} is queued (then={then}); its thread says the Slurm job "
        "and what it finds."
    )
