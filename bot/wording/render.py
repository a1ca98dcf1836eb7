"""What a launch looks like in a channel: the parent message, its status and progress,
the reply to /train, pre-flight's summary, the loss curve and TensorBoard's line.

Pure: a launch (and its cluster's profile) in, mrkdwn text and Block Kit out.
Every user- or log-derived string is escaped here. The plain measures it shows (a
duration, a checkpoint's step, why a job waits) are ``bot.lifecycle.measures``'.
"""

from __future__ import annotations

import time
from typing import Any

from bot.lifecycle import health
from bot.lifecycle.launch import Launch, Phase
from bot.lifecycle.measures import checkpoint_label, checkpoint_step, duration, waiting
from bot.text import mrkdwn as st
from bot.text.plot import AxisMarks, render_loss_png
from bot.wording.endings import OUTCOME_ICONS, OUTCOME_WORDS, sentence
from cluster.site.profiles import ClusterProfile

PHASE_LABELS = {
    Phase.AWAITING_APPROVAL: ("✋", "AWAITING APPROVAL"),
    Phase.QUEUED: ("⏳", "QUEUED"),
    Phase.PREFLIGHT: ("🔎", "PRE-FLIGHT"),
    Phase.SUBMITTING: ("📤", "SUBMITTING"),
    Phase.SUBMITTED: ("🕒", "PENDING"),
    Phase.RUNNING: ("🟢", "RUNNING"),
    Phase.RETRYING: ("🔁", "RETRYING"),
    Phase.REJECTED: ("⛔", "NOT SUBMITTED"),
    Phase.DRY_RUN: ("📝", "DRY RUN"),
}


def status_label(launch: Launch) -> tuple[str, str]:
    if launch.phase == Phase.DONE:
        word = launch.outcome or "DONE"
        return OUTCOME_ICONS.get(word, "❔"), OUTCOME_WORDS.get(word, word)
    icon, word = PHASE_LABELS.get(launch.phase, ("❔", launch.phase.upper()))
    if launch.phase in (Phase.SUBMITTED, Phase.RUNNING) and launch.attempt:
        state = launch.attempt.slurm_state
        if state and state not in ("PENDING", "RUNNING"):
            word = state
        why = waiting(launch)
        if why is not None and why.stuck:
            icon, word = "⛔", "HELD" if why.held else "CANNOT START"
    return icon, word


def waiting_line(launch: Launch) -> str:
    """``waiting behind jobs with a higher priority (Slurm: Priority)`` and what would help."""
    why = waiting(launch)
    if why is None:
        return ""
    line = f"{st.escape(why.words)} (Slurm: `{st.escape(why.code)}`)"
    return f"{line}. {st.escape(why.fix)}" if why.fix else line


def headline(launch: Launch, profile: ClusterProfile | None) -> str:
    req = launch.request
    gpus = profile.gpus_per_node if profile else 8
    where = f"{launch.cluster} ({profile.kind})" if profile else launch.cluster
    unit = "node" if req.nodes == 1 else "nodes"
    parts = [launch.title, f"{req.nodes} {unit} × {gpus} GPU", where]
    if launch.job_id:
        parts.append(f"job {launch.job_id}")
    if req.name:
        parts.append(f"`{st.escape(req.name)}`")
    icon, word = status_label(launch)
    return f"{icon} *{word}*  " + " · ".join(parts)


def progress_line(launch: Launch) -> str:
    p = launch.progress
    parts: list[str] = []
    if p.total:
        parts.append(f"step {p.step:,} / {p.total:,}")
        if p.reward is not None:  # RL: the reward and accuracy are what people watch
            parts.append(f"reward {p.reward:.3g}")
            if p.accuracy is not None:
                parts.append(f"accuracy {p.accuracy:.3g} (val)")
        elif p.loss is not None:
            parts.append(f"loss {p.loss:.3g}")
        if p.step_time_s:
            parts.append(f"{p.step_time_s:.2g} s/step")
            if launch.phase == Phase.RUNNING and p.total > p.step:
                parts.append(f"ETA {duration((p.total - p.step) * p.step_time_s)}")
    if gpu := health.gpu_text(launch):
        parts.append(gpu)
    if launch.attempts:
        parts.append(f"attempt {len(launch.attempts)}")
    return " · ".join(parts)


def footer(launch: Launch, now: float) -> str:
    parts = [f"launched by <@{launch.user_id}>", f"`{launch.id}`"]
    started = launch.attempts[0].submitted_at if launch.attempts else launch.created_at
    ended = launch.attempt.ended_at if launch.attempt and not launch.active else 0.0
    parts.append(f"elapsed {duration((ended or now) - started)}")
    if launch.checkpoints:
        parts.append(
            f"last checkpoint {st.escape(checkpoint_label(launch, launch.checkpoints[-1]))}"
        )
    return " · ".join(parts)


def parent(
    launch: Launch, profile: ClusterProfile | None, now: float | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """The parent message: one glance tells the state."""
    now = time.time() if now is None else now
    lines = [headline(launch, profile)]
    if wait := waiting_line(launch):
        lines.append(wait)
    if progress := progress_line(launch):
        lines.append(progress)
    if not launch.active and (said := sentence(launch.ending, launch.detail)):
        lines.append(said)
    text = "\n".join(lines)
    blocks: list[dict[str, Any]] = [st.section(text), st.context(footer(launch, now))]
    buttons = []
    if launch.job_id or launch.attempts:
        buttons.append(st.logs_button(launch.id))
    if launch.interactive and launch.attempt and launch.attempt.attach_ready and launch.active:
        buttons.append(st.attach_button(launch.id))
    if launch.active:
        label = f"job {launch.job_id}" if launch.job_id else f"launch {launch.id}"
        buttons.append(st.cancel_button(launch.id, job_label=label))
    if buttons:
        blocks.append(st.actions(*buttons))
    return text, st.fit_blocks(blocks)


def queued_reply(launch: Launch, profile: ClusterProfile | None) -> str:
    req = launch.request
    gpus = (profile.gpus_per_node if profile else 8) * req.nodes
    unit = "node" if req.nodes == 1 else "nodes"
    what = f"{launch.words}, {req.nodes} {unit} × {launch.cluster} ({gpus} GPUs)"
    if launch.cluster_user:
        what += f" as {launch.cluster_user}"
    if req.dry_run:
        return f"Dry run {launch.id}: {what}. The commands and checks follow in the thread."
    return f"Queued {launch.id}: {what}. Following it in the thread."


def loss_curve(launch: Launch) -> bytes:
    """The curve of the run's primary metric as a PNG: its loss, or for an RL run (one that
    reports a reward per step) its reward with the validation accuracy; ValueError while
    there are too few points to draw."""
    rl = len(launch.reward_history) >= 2
    metric = "reward" if rl else "loss"
    title = f"{launch.id} · {launch.words} · {metric}"
    steps = (checkpoint_step(launch, name) for name in launch.checkpoints)
    marks = AxisMarks(
        retries=[a.from_step for a in launch.attempts[1:] if a.from_step],
        checkpoints=[s for s in steps if s is not None],
    )
    return render_loss_png(
        launch.reward_history if rl else launch.progress_history,
        title=title,
        validation=launch.accuracy_history if rl else launch.validation_history,
        marks=marks,
        metric=metric,
        validation_label="validation accuracy" if rl else "validation loss",
    )
