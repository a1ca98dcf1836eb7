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

from collections.abc import Callable, Mapping
from typing import Any

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.lifecycle.measures import duration
from bot.text.mrkdwn import code_block, escape
from bot.wording import after_training, health, refusals, sweeps
from cluster.site.image_refs import IMPORT_NOTE
from cluster.ssh.remote import quote_path

Facts = Mapping[str, Any]
SHOWN_MAX = 300  # characters of the thread line a DM repeats


def _s(facts: Facts, key: str) -> str:
    """A fact as text ("" when absent): who wrote it is the move, from what it was given."""
    value = facts.get(key, "")
    return value if isinstance(value, str) else str(value)


def _n(facts: Facts, key: str) -> int:
    value = facts.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _mention(user: str) -> str:
    """``<@U123>``: Slack shows the person's name. A user id is letters and digits."""
    return f"<@{escape(user)}>"


# -- /train, approval ------------------------------------------------------------------


def queue(facts: Facts) -> str:
    """``Queued by @alice: `/train sft ...```, then what it waits for (the core's words)."""
    return f"Queued by {_mention(_s(facts, 'by'))}: {command(facts)}{_s(facts, 'waits')}"


def ask_approval(facts: Facts) -> str:
    return (
        f"✋ asks for {command(facts)}. {escape(_s(facts, 'reason'))} A trainbot admin or an "
        f"approver for {escape(_s(facts, 'cluster'))} can approve it."
    )


def command(facts: Facts) -> str:
    """The command as it was understood, in code: ``/train sft llama3p1_8b ...``."""
    return f"`{escape(_s(facts, 'command'))}`"


def sweep_approval(facts: Facts) -> str:
    """The one approval a sweep asks, in its thread."""
    return (
        f"✋ {_mention(_s(facts, 'by'))} asks for sweep {escape(_s(facts, 'sweep'))} "
        f"({_n(facts, 'members')} launches): {command(facts)}. {escape(_s(facts, 'reason'))} "
        "A trainbot admin or an approver can approve the whole sweep."
    )


def approve(facts: Facts) -> str:
    return f"✅ Approved by {_mention(_s(facts, 'by'))}. Queued."


def reject(facts: Facts) -> str:
    return f"⛔ Not approved by {_mention(_s(facts, 'by'))}. Nothing was submitted."


# -- a worker: submit ------------------------------------------------------------------


def submitting(facts: Facts) -> str:
    """``Pre-flight ok: partition a4 up (4 of 4 nodes usable, 24 GPUs free), image
    nemo.sqsh found, recipe sft/x.py found, directories writable.``, then its notes."""
    parts = []
    part = facts.get("partition")
    if isinstance(part, Mapping):
        parts.append(
            f"partition {part.get('name', '')} up ({part.get('usable', 0)} of "
            f"{part.get('nodes', 0)} nodes usable, {part.get('gpus_idle', 0)} GPUs free)"
        )
    if facts.get("registry_image"):
        parts.append(f"image {_s(facts, 'registry_image')} from its registry ({IMPORT_NOTE})")
    else:
        parts.append(f"image {_s(facts, 'image')} found")
    if facts.get("script"):
        parts.append(f"{_s(facts, 'script_label')} {_s(facts, 'script')} found")
    parts.append("directories writable")
    notes = "".join(f"\nNote: {escape(str(n))}." for n in facts.get("notes") or [])
    return "Pre-flight ok: " + ", ".join(escape(p) for p in parts) + "." + notes


HOW = {
    "submitted": "Submitted",
    "found_after_restart": "Found the job submitted before a restart",
    "found_after_error": "The launcher reported an error after its sbatch worked; following",
}


def submitted(facts: Facts) -> str:
    """``Submitted: Slurm job 41 on a4, partition a4, 2 nodes. Logs: `...```, or, for a
    job that appeared after a cancel, that it is being cancelled."""
    job = escape(_s(facts, "job"))
    if facts.get("after_cancel"):
        return f"🚫 Slurm job {job} appeared after the launch was cancelled: cancelling it."
    how = HOW.get(_s(facts, "how"), HOW["submitted"])
    nodes = _n(facts, "nodes")
    unit = "node" if nodes == 1 else "nodes"
    as_user = f" as {escape(_s(facts, 'user'))}" if facts.get("user") else ""
    logs = f" Logs: `{escape(_s(facts, 'log_dir'))}`" if facts.get("log_dir") else ""
    text = (
        f"{how}: Slurm job {job} on {escape(_s(facts, 'cluster'))}, partition "
        f"{escape(_s(facts, 'partition'))}, {nodes} {unit}{as_user}.{logs}"
    )
    if _n(facts, "attempt") > 1:
        text += f" (attempt {_n(facts, 'attempt')})"
    if facts.get("record"):
        text += "\n" + escape(_s(facts, "record"))
    return text


# -- a waiting launch that is due, but does not start --------------------------------------


def not_started(facts: Facts) -> str:
    """Why a launch that waited ends without a job (``why``): the launch it waited for ended
    badly or is still unapproved, the budget has no room, its owner may no longer launch,
    or its ``from=`` cannot be used. The policy's answer is worded by
    :mod:`bot.wording.refusals`; ``parent_detail`` is worded already, by the parent's end."""
    why = _s(facts, "why")
    parent, owner = escape(_s(facts, "parent")), _mention(_s(facts, "owner"))
    start_from, error = escape(_s(facts, "start_from")), escape(_s(facts, "error"))
    if why == "parent_ended":
        detail = _s(facts, "parent_detail")
        said = f" ({detail.rstrip('.')})" if detail else ""
        return (
            f"⛔ Not started, because {parent}, which this launch waited for, ended "
            f"{escape(_s(facts, 'parent_outcome'))}{said}. Nothing was submitted. To run it "
            f"whatever the end, `/train` again with after={parent}:any."
        )
    if why == "parent_unapproved":
        hours = facts.get("hours", 0)
        return (
            f"⛔ Not started: {parent}, which this launch waits for, has awaited approval for "
            f"over {hours:g} h. This launch ends here, so it no longer counts against your "
            f"active launches (max_concurrent) and budget. Once {parent} is approved, "
            f"`/train` it again with after={parent}."
        )
    if why == "over_budget":
        return f"⛔ Not started now that it is due: {refusals.refused(facts)}"
    if why == "no_longer_allowed":
        return (
            f"⛔ {owner}: not started now that it is due: {refusals.refused(facts)} "
            "Nothing was submitted."
        )
    if why == "no_checkpoint":
        return (
            f"⛔ {owner}: not started (NO_CHECKPOINT): from={start_from}, but {error}. Nothing "
            "was submitted. `/train` again without from= to start from the recipe's own "
            "weights, or from a launch that saved a checkpoint."
        )
    if why == "not_allowed":
        return (
            f"⛔ {owner}: not started (NOT_ALLOWED): from={start_from}: {error} Nothing was "
            "submitted."
        )
    if why == "no_copy":
        return (
            f"⛔ {owner}: not started (NO_CHECKPOINT): from={start_from}: {error}. Nothing was "
            "submitted."
        )
    return f"⛔ Not started ({escape(_s(facts, 'outcome'))}). Nothing was submitted."


def start_from(facts: Facts) -> str:
    """``▶️ Starts from L-1's newest complete checkpoint, step 30 (`name`): `key=value`.``
    and, for a framework that goes on writing where it starts, the copy it starts from."""
    which = "newest complete checkpoint" if facts.get("newest") else "checkpoint"
    parent = escape(_s(facts, "parent"))
    text = (
        f"▶️ Starts from {parent}'s {which}, step {_n(facts, 'step'):,} "
        f"(`{escape(_s(facts, 'checkpoint'))}`): "
        f"`{escape(_s(facts, 'key'))}={escape(_s(facts, 'value'))}`."
    )
    if facts.get("copy"):
        linked = "linked " if facts.get("linked") else ""
        text += (
            f" It starts from a {linked}copy (`{escape(_s(facts, 'copy'))}`): {parent}'s own "
            "checkpoint directory is left as it is."
        )
    return text


# -- the poller: Slurm's word on the job -------------------------------------------------


def running(facts: Facts) -> str:
    nodes = _s(facts, "nodes")
    return f"Running on {escape(nodes)}." if nodes else "Running."


def requeued(facts: Facts) -> str:
    return f"Job {escape(_s(facts, 'job'))} is pending again (requeued)."


# -- retries, Cancel ---------------------------------------------------------------------


def retry(facts: Facts) -> str:
    return (
        f"🔁 Retry asked for by {_mention(_s(facts, 'by'))}: cancelling job "
        f"{escape(_s(facts, 'job'))}; a new attempt is submitted once Slurm shows it gone."
    )


def old_job_gone(facts: Facts) -> str:
    job = escape(_s(facts, "job"))
    if facts.get("left"):  # a reroute cut short: it moved
        left, cluster = escape(_s(facts, "left")), escape(_s(facts, "cluster"))
        return f"🔀 Job {job} on {left} is gone; moved to {cluster}."
    return f"Job {job} is gone: submitting a new attempt."


def move_refused(facts: Facts) -> str:
    """The policy's answer, worded by :mod:`bot.wording.refusals`."""
    return (
        f"🔀 Still pending on {escape(_s(facts, 'left'))}; {escape(_s(facts, 'cluster'))} "
        f"would start it now, but it was not moved there: {refusals.refused(facts)}"
    )


def moved(facts: Facts) -> str:
    cluster, job = escape(_s(facts, "cluster")), escape(_s(facts, "job"))
    waited = facts.get("waited_s", 0)
    return (
        f"🔀 Still pending on {escape(_s(facts, 'left'))} after "
        f"{duration(waited if isinstance(waited, int | float) else 0)} while {cluster} would "
        f"start it now ({escape(_s(facts, 'why'))}): cancelled job {job} there before it "
        f"started and moved the launch to {cluster}, once; its GPU-hour estimate counts on "
        f"{cluster} now."
    )


def old_job_stays(facts: Facts) -> str:
    return (
        f"⚠️ Job {escape(_s(facts, 'job'))} could not be cancelled "
        f"({escape(_s(facts, 'error'))}); it keeps running and no second job was submitted."
    )


def lookup_unreachable(facts: Facts) -> str:
    return (
        f"⚠️ {escape(_s(facts, 'cluster'))} cannot be reached ({escape(_s(facts, 'error'))}), "
        "so trainbot cannot tell whether the job was submitted. It keeps looking it up by the "
        "launch id and submits nothing until Slurm answers."
    )


def outcome_unknown(facts: Facts) -> str:
    wait = facts.get("wait_s", 0)
    return (
        f"⚠️ The submission on {escape(_s(facts, 'cluster'))} did not finish "
        f"({escape(_s(facts, 'error'))}): the job may exist. Looking it up by the launch id "
        f"in {wait if isinstance(wait, int | float) else 0:.0f} s before anything else."
    )


def launcher_error(facts: Facts) -> str:
    return "The launcher's error:\n" + code_block(_s(facts, "output"))


def tokenizer_seeded(facts: Facts) -> str:
    return escape(_s(facts, "summary"))


def stopped_early_head(facts: Facts) -> str:
    """``⏸️ STOPPED EARLY at step 37 / 100 (its time budget; Slurm: COMPLETED) · checkpoint
    step 30``."""
    where = f"step {_n(facts, 'step'):,} / {_n(facts, 'total'):,}"
    ckpt = f" · checkpoint {escape(_s(facts, 'checkpoint'))}" if facts.get("checkpoint") else ""
    return f"⏸️ STOPPED EARLY at {where} ({escape(_s(facts, 'why'))}; Slurm: COMPLETED){ckpt}"


def resume(facts: Facts) -> str:
    return f"{stopped_early_head(facts)} · resuming from it (attempt {_n(facts, 'attempt')})."


def job_stuck(facts: Facts) -> str:
    """A pending job that does not start by itself (a hold, a limit, a dead dependency)."""
    label = "⛔ HELD" if facts.get("held") else "⛔ CANNOT START"
    text = (
        f"{label} · job {escape(_s(facts, 'job'))} is {escape(_s(facts, 'words'))} "
        f"(Slurm: `{escape(_s(facts, 'code'))}`)."
    )
    return f"{text} {escape(_s(facts, 'fix'))}" if facts.get("fix") else text


def _seconds(facts: Facts, key: str) -> float:
    value = facts.get(key, 0)
    return float(value) if isinstance(value, int | float) else 0.0


def hang(facts: Facts) -> str:
    """No progress for longer than the run's bound: at a step, or in start-up (with the
    log's last line when there is one)."""
    if "step" in facts:
        where = f"step {_n(facts, 'step'):,}"
    else:
        where = "start-up"
        if facts.get("last_line"):
            where += f", last line `{escape(_s(facts, 'last_line'))}`"
    return (
        f"⚠️ No progress for {duration(_seconds(facts, 'quiet_s'))} (last seen at {where}; "
        f"the bound is {duration(_seconds(facts, 'bound_s'))}). Job {escape(_s(facts, 'job'))} "
        "is still RUNNING and may be hung. Cancel or Retry below."
    )


def set_aside(facts: Facts) -> str:
    """A launch that failed inside trainbot on every delivery, set aside to be tried again."""
    return (
        f"⚠️ This launch failed inside trainbot ({escape(_s(facts, 'error'))}), "
        f"{_n(facts, 'tries')} times; it was set aside (dead letters) and is tried again in "
        f"{_seconds(facts, 'wait_s') / 60:.0f} min, for up to "
        f"{_seconds(facts, 'retry_for_h'):g} h. `/cancel` stops it."
    )


def late_job(facts: Facts) -> str:
    """A job that appeared after its launch was cancelled: cancelled, or not (``error``)."""
    job = escape(_s(facts, "job"))
    if not facts.get("error"):
        return f"Cancelled Slurm job {job}."
    return (
        f"⚠️ Could not cancel Slurm job {job} ({escape(_s(facts, 'error'))}): "
        f"cancel it by hand (`scancel {job}` on {escape(_s(facts, 'cluster'))})."
    )


def cancel_failed(facts: Facts) -> str:
    """Cancel's scancel failed: the launch stays cancelled, the poller sends it again."""
    job = escape(_s(facts, "job"))
    return (
        f"⚠️ Could not cancel Slurm job {job} now ({escape(_s(facts, 'error'))}). The launch "
        f"stays cancelled and will not be retried; trainbot sends the cancel again at each "
        f"poll until the job ends (by hand: `scancel {job}` on {escape(_s(facts, 'cluster'))})."
    )


def pruned(facts: Facts) -> str:
    """Checkpoints deleted by a person (the prune buttons of /checkpoints)."""
    return (
        f"🗑️ {_mention(_s(facts, 'by'))} deleted {_n(facts, 'count')} checkpoints of "
        f"{escape(_s(facts, 'launch'))} (steps {escape(_s(facts, 'steps'))}), keeping the best "
        f"{_n(facts, 'keep')} and the last, in `{escape(_s(facts, 'directory'))}`."
    )


PAGED_WHERE = {"slack": "in the on-call channel", "pagerduty": "through PagerDuty"}


def paged(facts: Facts) -> str:
    steps = [str(step) for step in facts.get("steps") or []]
    return f"📟 On-call was paged {' and '.join(PAGED_WHERE.get(n, n) for n in steps)}."


def cancel(facts: Facts) -> str:
    text = f"🚫 Cancelled by {_mention(_s(facts, 'by'))}."
    if facts.get("in_flight"):
        text += (
            " A submission was in flight: trainbot looks the job up by the launch id "
            "and cancels it if Slurm has it."
        )
    return text


# -- what the run says of itself --------------------------------------------------------

MAX_METRICS = 8  # of a W&B summary, shown in the thread


def wandb_summary(facts: Facts) -> str:
    """``📈 W&B summary of run `r1`: loss 0.98 · lr 3e-05``: every key escaped (anyone who
    writes the run chose them)."""
    metrics = facts.get("metrics") or {}
    shown = sorted(metrics.items())[:MAX_METRICS]
    parts = [f"{escape(str(key))} {float(value):.4g}" for key, value in shown]
    more = len(metrics) - len(shown)
    tail = f" (and {more} more)" if more > 0 else ""
    return f"📈 W&B summary of run `{escape(_s(facts, 'run'))}`: " + " · ".join(parts) + tail


# -- what the poller reads of a running job -----------------------------------------------


def checkpoint(facts: Facts) -> str:
    return f"💾 Checkpoint step {_n(facts, 'step'):,} saved."


TRACKERS = {"wandb": "W&B", "mlflow": "MLflow"}


def run_link(facts: Facts) -> str:
    """``📈 W&B run: <url|name>``: the link the run printed (its host allowed by the config)."""
    url, tracker = _s(facts, "url"), TRACKERS.get(_s(facts, "tracker"), "W&B")
    return f"📈 {tracker} run: <{escape(url)}|{escape(url.rsplit('/', 1)[-1])}>"


def tensorboard(facts: Facts) -> str:
    """The cluster's TensorBoard link when it has one (``url``), else how to view the logs
    on the login node (``host``)."""
    log_dir = _s(facts, "log_dir")
    if facts.get("url"):
        link = f"<{escape(_s(facts, 'url'))}|job {escape(_s(facts, 'job'))}>"
        return f"📊 TensorBoard: {link} (logs in `{escape(log_dir)}`)"
    return (
        f"📊 TensorBoard logs in `{escape(log_dir)}`. To view them, run "
        f"`tensorboard --logdir {escape(quote_path(log_dir))}` on the login node "
        f"({escape(_s(facts, 'host'))})."
    )


def slurm_requeue(facts: Facts) -> str:
    job, restart = escape(_s(facts, "job")), _n(facts, "restart")
    again = "it will run again from its newest checkpoint"
    if facts.get("held"):
        again = f"it is {escape(_s(facts, 'held'))} and will not run again until it is released"
    if facts.get("node_failure"):
        return (
            f"⚠️ Slurm requeued job {job} (restart {restart}) after a node failure; {again}. "
            "No second job was submitted."
        )
    return (
        f"🔁 Slurm requeued job {job} (restart {restart}; the run before ended "
        f"{escape(_s(facts, 'before'))}, not a node failure); {again}. No second job was "
        "submitted."
    )


def attach_ready(facts: Facts) -> str:
    return (
        f"🔌 Interactive job {escape(_s(facts, 'job'))} is ready to attach: "
        f"`/attach {escape(_s(facts, 'launch'))}` shows you how "
        f"(`{escape(_s(facts, 'command'))}`)."
    )


def image_digest(facts: Facts) -> str:
    """A registry image's digest, as the job's import printed it."""
    return (
        f"Image {escape(_s(facts, 'image'))}: digest {escape(_s(facts, 'digest'))} (as the job "
        "imported it)."
    )


def slurm_state(facts: Facts) -> str:
    return f"Slurm state: {escape(_s(facts, 'state'))}."


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
    return f"{_mention(launch.user_id)} {text}" if event.data.get("mention") else text


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
