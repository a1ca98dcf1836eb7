"""What a launch looks like in a channel: the parent message and the thread lines.

Pure: a launch (and its cluster's profile) in, mrkdwn text and Block Kit out.
Every user- or log-derived string is escaped here.
"""

from __future__ import annotations

import re
import time
from typing import Any

from bot.lifecycle import health
from bot.lifecycle.launch import Launch, Phase
from bot.text import mrkdwn as st
from bot.text.plot import AxisMarks, render_loss_png
from cluster.launching.spec import LaunchSpec
from cluster.preflight.checks import PreflightResult
from cluster.site.image_refs import IMPORT_NOTE, is_registry_ref, pyxis_image
from cluster.site.profiles import ClusterProfile
from cluster.slurm.reasons import PendingWhy, explain_pending
from cluster.ssh.remote import quote_path

OUTCOME_ICONS = {
    "COMPLETED": "✅",
    "FAILED": "❌",
    "CANCELLED": "🚫",
    "TIMEOUT": "⌛",
    "NODE_FAIL": "💥",
    "OUT_OF_MEMORY": "❌",
    "PREEMPTED": "⏸️",
    "BOOT_FAIL": "💥",
    "DEADLINE": "⌛",
    "STOPPED_EARLY": "⏸️",
}
OUTCOME_WORDS = {"STOPPED_EARLY": "STOPPED EARLY"}  # trainbot's own outcomes, in words
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


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


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


def waiting(launch: Launch) -> PendingWhy | None:
    """Why the launch's job waits (squeue's reason, read), while it does."""
    attempt = launch.attempt
    if launch.phase != Phase.SUBMITTED or attempt is None or not attempt.pending_reason:
        return None
    return explain_pending(attempt.pending_reason)


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


def checkpoint_step(launch: Launch, name: str) -> int | None:
    """The step in one of the launch's checkpoint names, by its framework's rule (the
    tracking record's ``checkpoint_pattern``, group 1)."""
    for attempt in reversed(launch.attempts):
        if attempt.tracking is not None and attempt.tracking.checkpoint_pattern:
            match = re.search(attempt.tracking.checkpoint_pattern, name)
            return int(match.group(1)) if match else None
    return None


def checkpoint_label(launch: Launch, name: str) -> str:
    """``step 1,200`` for one of the launch's checkpoint names (the name when it has no step)."""
    step = checkpoint_step(launch, name)
    return name if step is None else f"step {step:,}"


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
    if launch.detail and not launch.active:
        lines.append(launch.detail)
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


def request_text(launch: Launch) -> str:
    """The command as it was understood, escaped, for the thread."""
    return f"`{st.escape(launch.request.to_text())}`"


def preflight_summary(result: PreflightResult, spec: LaunchSpec) -> str:
    """``partition a4 up (4 nodes, 24 GPUs free), image nemo-20250721.sqsh found, ...``."""
    parts = []
    info = next((p for p in result.partitions if p.name == spec.slurm_partition), None)
    if info is not None:
        parts.append(
            f"partition {info.name} up ({info.nodes_usable} of {info.nodes} nodes usable, "
            f"{info.gpus_idle} GPUs free)"
        )
    if is_registry_ref(spec.image_path):
        parts.append(f"image {pyxis_image(spec.image_path)} from its registry ({IMPORT_NOTE})")
    else:
        parts.append(f"image {spec.image_path.rsplit('/', 1)[-1]} found")
    if spec.script:
        parts.append(f"{spec.fw.script_label} {spec.script} found")
    parts.append("directories writable")
    return "Pre-flight ok: " + ", ".join(st.escape(p) for p in parts) + "."


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


def tensorboard_text(profile: ClusterProfile, log_dir: str, job_id: str, launch_id: str) -> str:
    """The thread line for a run that logs to TensorBoard in ``log_dir`` (a path from the
    cluster): the cluster's link when it has one, else how to view it on the login node."""
    url = profile.tensorboard_url(log_dir=log_dir, job_id=job_id, launch_id=launch_id)
    if url is not None:
        link = f"<{st.escape(url)}|job {st.escape(job_id)}>"
        return f"📊 TensorBoard: {link} (logs in `{st.escape(log_dir)}`)"
    return (
        f"📊 TensorBoard logs in `{st.escape(log_dir)}`. To view them, run "
        f"`tensorboard --logdir {st.escape(quote_path(log_dir))}` on the login node "
        f"({st.escape(profile.login.host)})."
    )
