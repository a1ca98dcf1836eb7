"""/checkpoints' buttons on one checkpoint (their value ``<launch id>@<step>``): Resume from
this one (the launch's request again, started ``from=<launch id>@<step>``, admitted as a
typed /train is), New run from it (the launch form, filled in with that ``from=``, to
change and launch) and Export (``then=export`` of that checkpoint, not the newest).

Pure: the launch's record in, a request, a form or a checked step out; the core looks the
launch up (its owner only) and launches or records what these return."""

from __future__ import annotations

import re

from bot.lifecycle.launch import Launch
from bot.planning.checkpoints import saved, steps_text
from bot.text.actions import (
    ACTION_CKPT_EXPORT,
    ACTION_CKPT_NEW_RUN,
    ACTION_CKPT_RESUME,
    ACTION_FORM_CHECK,
    VIEW_RELAUNCH,
)
from bot.text.front import Reply
from bot.text.mrkdwn import Block, actions, button, section, text_input
from commands.errors import CommandError
from commands.requests import TrainRequest

ACTIONS = frozenset({ACTION_CKPT_RESUME, ACTION_CKPT_NEW_RUN, ACTION_CKPT_EXPORT})
VALUE_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9-]{0,39})@([0-9]{1,12})")
BUTTONED = 5  # the newest checkpoints that get buttons (a Slack message stays short)


def split_value(value: str) -> tuple[str, int]:
    """A button's ``<launch id>@<step>`` as (launch id, step), or CommandError."""
    match = VALUE_RE.fullmatch(value.strip())
    if match is None:
        raise CommandError(
            f"That checkpoint button's value ({value[:60]!r}) is not one trainbot made "
            "(<launch id>@<step>); run /checkpoints <job> again."
        )
    return match.group(1), int(match.group(2))


def checked_step(launch: Launch, step: int) -> TrainRequest:
    """The launch's request, when ``step`` is one of its complete checkpoints and the
    launch has ended; CommandError saying which steps there are otherwise."""
    if not isinstance(launch.request, TrainRequest):
        raise CommandError(f"{launch.id} is an interactive allocation; it has no checkpoints.")
    if launch.active:
        raise CommandError(
            f"{launch.id} is still {launch.phase.value}; start from one of its checkpoints once "
            f"it has ended, or type /train ... from={launch.id}@{step} from_running=yes."
        )
    steps = [p.step for p in saved(launch)]
    if step not in steps:
        raise CommandError(
            f"{launch.id} has no complete checkpoint at step {step} (it has "
            f"{steps_text(saved(launch))}); run /checkpoints {launch.id} again."
        )
    return launch.request


def resume_request(launch: Launch, step: int) -> TrainRequest:
    """Resume from this one: the launch's own request, started from its checkpoint at
    ``step`` and waiting for nothing."""
    request = checked_step(launch, step)
    update = {
        "start_from": launch.id,
        "start_step": step,
        "from_running": False,
        "after": None,
        "after_any": False,
        "at": None,
    }
    return request.model_copy(update=update)


def new_run_form(launch: Launch, step: int) -> Reply:
    """New run from it: Edit & relaunch's form (checked as it is typed; launched in the
    launch's channel), filled in with the launch's request started ``from=`` that step."""
    text_now = resume_request(launch, step).to_text().removeprefix("/train ")
    text = (
        f"A new run from step {step:,} of {launch.id}; change the workload, model or "
        f"settings as you like. Its thread goes to <#{launch.channel}>."
    )
    blocks = [
        section(text),  # ids and numbers only: nothing typed by anyone
        text_input(
            launch.id,
            "/train",
            text_now,
            "checked as you type (the policy, budget and GPU-hours); Slurm's start estimate "
            "on Launch",
            check_as=ACTION_FORM_CHECK,
        ),
    ]
    return Reply(text, blocks=blocks, modal="New run from a checkpoint", modal_submit=VIEW_RELAUNCH)


def buttons(launch: Launch, *, export: bool) -> list[Block]:
    """One actions block per checkpoint of the newest :data:`BUTTONED` of an ended launch:
    Resume from this one, New run from it and (``export``) Export."""
    if launch.active or not isinstance(launch.request, TrainRequest):
        return []
    blocks: list[Block] = []
    for point in reversed(saved(launch)[-BUTTONED:]):
        value = f"{launch.id}@{point.step}"
        row = [
            button(f"Resume from step {point.step:,}", ACTION_CKPT_RESUME, value),
            button(f"New run from step {point.step:,}", ACTION_CKPT_NEW_RUN, value),
        ]
        if export:
            row.append(button(f"Export step {point.step:,}", ACTION_CKPT_EXPORT, value))
        blocks.append(actions(*row))
    return blocks
