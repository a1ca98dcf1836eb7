"""The words of a launch's lines once it has a job: running, requeues and retries, moves,
hangs, cancels, pages, and what the poller reads of the job (checkpoints, links, states)."""

from __future__ import annotations

from bot.lifecycle.measures import duration
from bot.text.mrkdwn import code_block, escape
from bot.wording import refusals
from bot.wording.facts import Facts, count, fact, mention, number
from cluster.slurm.reasons import explain_pending
from cluster.ssh.remote import quote_path

# -- the poller: Slurm's word on the job -------------------------------------------------


def running(facts: Facts) -> str:
    nodes = fact(facts, "nodes")
    return f"Running on {escape(nodes)}." if nodes else "Running."


def requeued(facts: Facts) -> str:
    return f"Job {escape(fact(facts, 'job'))} is pending again (requeued)."


# -- retries, Cancel ---------------------------------------------------------------------


def retry(facts: Facts) -> str:
    return (
        f"🔁 Retry asked for by {mention(fact(facts, 'by'))}: cancelling job "
        f"{escape(fact(facts, 'job'))}; a new attempt is submitted once Slurm shows it gone."
    )


def old_job_gone(facts: Facts) -> str:
    job = escape(fact(facts, "job"))
    if facts.get("left"):  # a reroute cut short: it moved
        left, cluster = escape(fact(facts, "left")), escape(fact(facts, "cluster"))
        return f"🔀 Job {job} on {left} is gone; moved to {cluster}."
    return f"Job {job} is gone: submitting a new attempt."


def move_refused(facts: Facts) -> str:
    """The policy's answer, worded by :mod:`bot.wording.refusals`."""
    return (
        f"🔀 Still pending on {escape(fact(facts, 'left'))}; {escape(fact(facts, 'cluster'))} "
        f"would start it now, but it was not moved there: {refusals.refused(facts)}"
    )


def moved(facts: Facts) -> str:
    cluster, job = escape(fact(facts, "cluster")), escape(fact(facts, "job"))
    return (
        f"🔀 Still pending on {escape(fact(facts, 'left'))} after "
        f"{duration(number(facts, 'waited_s'))} while {cluster} would "
        f"start it now ({escape(fact(facts, 'why'))}): cancelled job {job} there before it "
        f"started and moved the launch to {cluster}, once; its GPU-hour estimate counts on "
        f"{cluster} now."
    )


def old_job_stays(facts: Facts) -> str:
    return (
        f"⚠️ Job {escape(fact(facts, 'job'))} could not be cancelled "
        f"({escape(fact(facts, 'error'))}); it keeps running and no second job was submitted."
    )


def lookup_unreachable(facts: Facts) -> str:
    return (
        f"⚠️ {escape(fact(facts, 'cluster'))} cannot be reached ({escape(fact(facts, 'error'))}), "
        "so trainbot cannot tell whether the job was submitted. It keeps looking it up by the "
        "launch id and submits nothing until Slurm answers."
    )


def outcome_unknown(facts: Facts) -> str:
    return (
        f"⚠️ The submission on {escape(fact(facts, 'cluster'))} did not finish "
        f"({escape(fact(facts, 'error'))}): the job may exist. Looking it up by the launch id "
        f"in {number(facts, 'wait_s'):.0f} s before anything else."
    )


def launcher_error(facts: Facts) -> str:
    return "The launcher's error:\n" + code_block(fact(facts, "output"))


def tokenizer_seeded(facts: Facts) -> str:
    return escape(fact(facts, "summary"))


def stopped_early_head(facts: Facts) -> str:
    """``⏸️ STOPPED EARLY at step 37 / 100 (its time budget; Slurm: COMPLETED) · checkpoint
    step 30``."""
    where = f"step {count(facts, 'step'):,} / {count(facts, 'total'):,}"
    ckpt = f" · checkpoint {escape(fact(facts, 'checkpoint'))}" if facts.get("checkpoint") else ""
    return f"⏸️ STOPPED EARLY at {where} ({escape(fact(facts, 'why'))}; Slurm: COMPLETED){ckpt}"


def resume(facts: Facts) -> str:
    return f"{stopped_early_head(facts)} · resuming from it (attempt {count(facts, 'attempt')})."


def job_stuck(facts: Facts) -> str:
    """A pending job that does not start by itself (a hold, a limit, a dead dependency):
    squeue's reason ``code``, in words with its fix (:func:`cluster.slurm.reasons.
    explain_pending`; an entry an older version wrote holds them as ``words``/``fix``)."""
    code = fact(facts, "code")
    why = explain_pending(code)
    held = facts.get("held", why.held if why else False)
    words = fact(facts, "words") or (why.words if why else code)
    fix = fact(facts, "fix") or (why.fix if why and "words" not in facts else "")
    label = "⛔ HELD" if held else "⛔ CANNOT START"
    text = (
        f"{label} · job {escape(fact(facts, 'job'))} is {escape(words)} (Slurm: `{escape(code)}`)."
    )
    return f"{text} {escape(fix)}" if fix else text


def hang(facts: Facts) -> str:
    """No progress for longer than the run's bound: at a step, or in start-up (with the
    log's last line when there is one)."""
    if "step" in facts:
        where = f"step {count(facts, 'step'):,}"
    else:
        where = "start-up"
        if facts.get("last_line"):
            where += f", last line `{escape(fact(facts, 'last_line'))}`"
    return (
        f"⚠️ No progress for {duration(number(facts, 'quiet_s'))} (last seen at {where}; "
        f"the bound is {duration(number(facts, 'bound_s'))}). Job {escape(fact(facts, 'job'))} "
        "is still RUNNING and may be hung. Cancel or Retry below."
    )


def set_aside(facts: Facts) -> str:
    """A launch that failed inside trainbot on every delivery, set aside to be tried again."""
    return (
        f"⚠️ This launch failed inside trainbot ({escape(fact(facts, 'error'))}), "
        f"{count(facts, 'tries')} times; it was set aside (dead letters) and is tried again in "
        f"{number(facts, 'wait_s') / 60:.0f} min, for up to "
        f"{number(facts, 'retry_for_h'):g} h. `/cancel` stops it."
    )


def late_job(facts: Facts) -> str:
    """A job that appeared after its launch was cancelled: cancelled, or not (``error``)."""
    job = escape(fact(facts, "job"))
    if not facts.get("error"):
        return f"Cancelled Slurm job {job}."
    return (
        f"⚠️ Could not cancel Slurm job {job} ({escape(fact(facts, 'error'))}): "
        f"cancel it by hand (`scancel {job}` on {escape(fact(facts, 'cluster'))})."
    )


def cancel_failed(facts: Facts) -> str:
    """Cancel's scancel failed: the launch stays cancelled, the poller sends it again."""
    job = escape(fact(facts, "job"))
    return (
        f"⚠️ Could not cancel Slurm job {job} now ({escape(fact(facts, 'error'))}). The launch "
        f"stays cancelled and will not be retried; trainbot sends the cancel again at each "
        f"poll until the job ends (by hand: `scancel {job}` on {escape(fact(facts, 'cluster'))})."
    )


def pruned(facts: Facts) -> str:
    """Checkpoints deleted by a person (the prune buttons of /checkpoints)."""
    return (
        f"🗑️ {mention(fact(facts, 'by'))} deleted {count(facts, 'count')} checkpoints of "
        f"{escape(fact(facts, 'launch'))} (steps {escape(fact(facts, 'steps'))}), keeping the best "
        f"{count(facts, 'keep')} and the last, in `{escape(fact(facts, 'directory'))}`."
    )


PAGED_WHERE = {"slack": "in the on-call channel", "pagerduty": "through PagerDuty"}


def paged(facts: Facts) -> str:
    steps = [str(step) for step in facts.get("steps") or []]
    return f"📟 On-call was paged {' and '.join(PAGED_WHERE.get(n, n) for n in steps)}."


def cancel(facts: Facts) -> str:
    text = f"🚫 Cancelled by {mention(fact(facts, 'by'))}."
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
    return f"📈 W&B summary of run `{escape(fact(facts, 'run'))}`: " + " · ".join(parts) + tail


# -- what the poller reads of a running job -----------------------------------------------


def checkpoint(facts: Facts) -> str:
    return f"💾 Checkpoint step {count(facts, 'step'):,} saved."


TRACKERS = {"wandb": "W&B", "mlflow": "MLflow"}


def run_link(facts: Facts) -> str:
    """``📈 W&B run: <url|name>``: the link the run printed (its host allowed by the config)."""
    url, tracker = fact(facts, "url"), TRACKERS.get(fact(facts, "tracker"), "W&B")
    return f"📈 {tracker} run: <{escape(url)}|{escape(url.rsplit('/', 1)[-1])}>"


def tensorboard(facts: Facts) -> str:
    """The cluster's TensorBoard link when it has one (``url``), else how to view the logs
    on the login node (``host``)."""
    log_dir = fact(facts, "log_dir")
    if facts.get("url"):
        link = f"<{escape(fact(facts, 'url'))}|job {escape(fact(facts, 'job'))}>"
        return f"📊 TensorBoard: {link} (logs in `{escape(log_dir)}`)"
    return (
        f"📊 TensorBoard logs in `{escape(log_dir)}`. To view them, run "
        f"`tensorboard --logdir {escape(quote_path(log_dir))}` on the login node "
        f"({escape(fact(facts, 'host'))})."
    )


def slurm_requeue(facts: Facts) -> str:
    job, restart = escape(fact(facts, "job")), count(facts, "restart")
    again = "it will run again from its newest checkpoint"
    if facts.get("held"):
        again = f"it is {escape(fact(facts, 'held'))} and will not run again until it is released"
    if facts.get("node_failure"):
        return (
            f"⚠️ Slurm requeued job {job} (restart {restart}) after a node failure; {again}. "
            "No second job was submitted."
        )
    return (
        f"🔁 Slurm requeued job {job} (restart {restart}; the run before ended "
        f"{escape(fact(facts, 'before'))}, not a node failure); {again}. No second job was "
        "submitted."
    )


def attach_ready(facts: Facts) -> str:
    return (
        f"🔌 Interactive job {escape(fact(facts, 'job'))} is ready to attach: "
        f"`/attach {escape(fact(facts, 'launch'))}` shows you how "
        f"(`{escape(fact(facts, 'command'))}`)."
    )


def image_digest(facts: Facts) -> str:
    """A registry image's digest, as the job's import printed it."""
    return (
        f"Image {escape(fact(facts, 'image'))}: digest {escape(fact(facts, 'digest'))} (as the job "
        "imported it)."
    )


def slurm_state(facts: Facts) -> str:
    return f"Slurm state: {escape(fact(facts, 'state'))}."
