"""The words of a launch's thread lines: one function per move, from the facts its event
carries (``event.data``: ``move``, ``by``, ``job``, ``nodes``...). A line that no move
writes names what it tells in ``move`` too (``health``: bot.wording.health words it).

Pure: a launch and an outbox event in, Slack mrkdwn out. Every fact that a person typed,
a cluster printed or a config named is escaped here. An entry written before events
carried facts holds its text, and that text is posted as it is; so is a line whose
caller still words it (``event.text``). A front end other than Slack, or the API, reads
the same facts and words them its own way: the moves know no words.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.wording import after_training, endings, health, sweeps
from bot.wording.facts import Facts, mention
from bot.wording.following import (
    attach_ready,
    cancel,
    cancel_failed,
    checkpoint,
    hang,
    image_digest,
    job_stuck,
    late_job,
    launcher_error,
    lookup_unreachable,
    move_refused,
    moved,
    old_job_gone,
    old_job_stays,
    outcome_unknown,
    paged,
    pruned,
    requeued,
    resume,
    retry,
    run_link,
    running,
    set_aside,
    slurm_requeue,
    slurm_state,
    tensorboard,
    tokenizer_seeded,
    wandb_summary,
)
from bot.wording.starting import (
    approve,
    ask_approval,
    not_started,
    queue,
    reject,
    start_from,
    submitted,
    submitting,
    sweep_approval,
)

SHOWN_MAX = 300  # characters of the thread line a DM repeats


SAYINGS: dict[str, Callable[[Facts], str]] = {
    "queue": queue,
    "ask_approval": ask_approval,
    "sweep_approval": sweep_approval,
    "approve": approve,
    "reject": reject,
    "submitting": submitting,
    "submitted": submitted,
    "not_started": not_started,
    "start_from": start_from,
    "running": running,
    "requeued": requeued,
    "retry": retry,
    "old_job_gone": old_job_gone,
    "move_refused": move_refused,
    "moved": moved,
    "old_job_stays": old_job_stays,
    "late_job": late_job,
    "set_aside": set_aside,
    "resume": resume,
    "job_stuck": job_stuck,
    "hang": hang,
    "lookup_unreachable": lookup_unreachable,
    "outcome_unknown": outcome_unknown,
    "launcher_error": launcher_error,
    "tokenizer_seeded": tokenizer_seeded,
    "cancel": cancel,
    "cancel_failed": cancel_failed,
    "pruned": pruned,
    "paged": paged,
    # lines no move writes: what the poller reads of the job,
    "checkpoint": checkpoint,
    "run_link": run_link,
    "tensorboard": tensorboard,
    "slurm_requeue": slurm_requeue,
    "attach_ready": attach_ready,
    "slurm_state": slurm_state,
    "image_digest": image_digest,
    # ... what a run's health calls for (bot.lifecycle.health), and what
    # W&B says of a run and of a sweep's runs
    "health": health.note,
    "wandb_summary": wandb_summary,
    "wandb_comparison": sweeps.wandb_comparison,
    "after_training": after_training.after_training,  # then=export, then=eval: its steps
    "after_asked": after_training.asked,  # ... asked for by a button on a finished launch
    # how a launch ends: a failed attempt, the closing line, the ends before Slurm ran it
    **endings.SAYINGS,
}


def line(event: Event) -> str:
    """What a thread event says. Its own text when it has one (an entry written before
    events carried facts, or a line its caller words); else its move's words."""
    if event.text:
        return event.text
    move = str(event.data.get("move", ""))
    say = SAYINGS.get(move)
    if say is None:
        raise ValueError(
            f"thread event {event.id or '(unsaved)'} of launch {event.launch_id} has no text "
            f"and its move {move!r} has no words here (one of: {', '.join(sorted(SAYINGS))})"
        )
    return say(event.data)


def posted(launch: Launch, event: Event) -> str:
    """A thread line as posted: with the owner's mention first when it concerns them."""
    text = line(event)
    return f"{mention(launch.user_id)} {text}" if event.data.get("mention") else text


def dm(launch: Launch, line_text: str, link: str) -> str:
    """``sft llama3p1_8b on a4 (L-7f3a9c): ✅ COMPLETED in 41 min · ... · <link|thread>``:
    the first line of the thread line it refers to (already escaped mrkdwn)."""
    first = line_text.split("\n", 1)[0]
    if len(first) > SHOWN_MAX:
        first = first[: SHOWN_MAX - 1] + "…"
    thread = f" · <{link}|thread>" if link else ""
    return f"{launch.words} on {launch.cluster} (`{launch.id}`): {first}{thread}"


def summary(lines: list[str]) -> str:
    """What waited through quiet hours, as one message."""
    if len(lines) == 1:
        return lines[0]
    return f"While your quiet hours lasted ({len(lines)} updates):\n" + "\n".join(
        f"• {line}" for line in lines
    )
