"""The moves that start a launch: /train and approval, then a worker's pre-flight and
submit, and the ways a launch ends before Slurm runs it."""

from __future__ import annotations

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.lifecycle.phases.table import (
    Facts,
    P,
    check,
    enqueue,
    go,
    thread_line,
    update_parent,
)
from bot.text.mrkdwn import escape

# -- /train, approval ---------------------------------------------------------------


def queue(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A new launch goes on the queue. ``facts.text``: the request as words (and what it
    waits for)."""
    check(launch, "queue")
    go(launch, "queue", P.QUEUED)
    text = f"Queued by <@{facts.by}>: {facts.text}"
    return launch, [Event("parent", launch.id), thread_line(launch, "queue", text, by=facts.by)]


def ask_approval(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A new launch above the policy's node threshold waits for a second person.
    ``facts.text``: the request as words; ``facts.reason``: the policy's reason."""
    check(launch, "ask_approval")
    go(launch, "ask_approval", P.AWAITING_APPROVAL)
    ask = (
        f"✋ asks for {facts.text}. {escape(facts.reason)} A trainbot admin or an approver "
        f"for {launch.cluster} can approve it."
    )
    line = thread_line(launch, "ask_approval", ask, by=facts.by, buttons=["approve", "reject"])
    return launch, [Event("parent", launch.id), line]


def approve(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A second person lets it go: queued for a worker."""
    check(launch, "approve")
    if launch.cancelled_by:
        return launch, []
    go(launch, "approve", P.QUEUED)
    launch.approved_by = facts.by
    text = f"✅ Approved by <@{facts.by}>. Queued."
    line = thread_line(launch, "approve", text, by=facts.by)
    return launch, [line, update_parent(launch), enqueue(launch)]


def reject(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Not approved (or withdrawn by its owner): nothing runs."""
    check(launch, "reject")
    if launch.cancelled_by:
        return launch, []
    go(launch, "reject", P.REJECTED)
    launch.outcome = "NOT_APPROVED"
    launch.detail = f"Not approved by <@{facts.by}>."
    text = f"⛔ {launch.detail} Nothing was submitted."
    return launch, [thread_line(launch, "reject", text, by=facts.by), update_parent(launch)]


# -- a worker: pre-flight and submit ---------------------------------------------------


def preflight(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Pre-flight starts (again). Slurm was asked (a lookup) and has no job for it."""
    check(launch, "preflight")
    go(launch, "preflight", P.PREFLIGHT)
    launch.submit_started_at = 0.0
    return launch, []


def submitting(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Pre-flight passed: the submit begins at ``facts.now``. ``facts.text`` (the pre-flight
    summary) is said once per attempt, even when a worker that died before its submit
    already said it."""
    check(launch, "submitting")
    go(launch, "submitting", P.SUBMITTING)
    launch.submit_started_at = facts.now
    if launch.preflight_said == len(launch.attempts):
        return launch, [update_parent(launch)]
    launch.preflight_said = len(launch.attempts)
    return launch, [thread_line(launch, "submitting", facts.text), update_parent(launch)]


def submitted(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Slurm has the launch's job ``facts.job_id`` (submitted, or found by the launch id):
    it is the current attempt's. One that appears after a cancel is recorded as CANCELLED
    (its worker cancels it). ``facts.text`` says how it came (``Submitted``, ``Found the
    job submitted before a restart``); ``facts.tracking``, where its files are."""
    check(launch, "submitted")
    job_id = facts.job_id
    launch.submit_started_at = 0.0  # Slurm has answered: this is the job
    if launch.attempts and launch.attempts[-1].job_id == job_id:
        return launch, []
    if not launch.attempts or launch.attempts[-1].job_id:
        launch.attempts.append(Attempt(number=len(launch.attempts) + 1))
    attempt = launch.attempts[-1]  # a retry's attempt was made when it was decided
    attempt.job_id, attempt.submitted_at = job_id, facts.now
    attempt.tracking = facts.tracking
    attempt.record = facts.record or attempt.record
    if launch.phase != P.SUBMITTING or launch.cancelled_by:  # cancelled meanwhile
        attempt.slurm_state = "CANCELLED"
        return launch, [thread_line(launch, "submitted", appeared_after_cancel(job_id), job=job_id)]
    go(launch, "submitted", P.SUBMITTED)
    unit = "node" if launch.request.nodes == 1 else "nodes"
    log_dir = facts.tracking.log_dir if facts.tracking else ""
    where = f" Logs: `{escape(log_dir)}`" if log_dir else ""
    as_user = f" as {launch.cluster_user}" if launch.cluster_user else ""
    text = (
        f"{facts.text}: Slurm job {job_id} on {launch.cluster}, partition {facts.partition}, "
        f"{launch.request.nodes} {unit}{as_user}.{where}"
    )
    if len(launch.attempts) > 1:
        text += f" (attempt {len(launch.attempts)})"
    if facts.record is not None:
        text += "\n" + escape(facts.record.summary())
    return launch, [thread_line(launch, "submitted", text, job=job_id), update_parent(launch)]


def appeared_after_cancel(job_id: str) -> str:
    return f"🚫 Slurm job {job_id} appeared after the launch was cancelled: cancelling it."


def _end_here(launch: Launch, move: str, target: Phase, facts: Facts) -> list[Event]:
    """The launch ends without a job: ``facts.outcome``, the first line of ``facts.text``
    (or ``facts.detail``) as its detail."""
    check(launch, move)
    go(launch, move, target)
    launch.outcome = facts.outcome
    launch.detail = facts.detail or facts.text.split("\n", 1)[0][:300]
    launch.submit_started_at = 0.0
    line = thread_line(launch, move, facts.text, **facts.data)
    return [line, update_parent(launch)]


def not_submitted(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Refused before Slurm ran anything (pre-flight, sbatch, no thread, unreachable):
    REJECTED with ``facts.outcome``; ``facts.data`` may ask for buttons."""
    return launch, _end_here(launch, "not_submitted", P.REJECTED, facts)


def dry_run(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A dry run ends after its pre-flight; ``facts.text`` says what would have run."""
    return launch, _end_here(launch, "dry_run", P.DRY_RUN, facts)


def not_started(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A waiting launch that is due ends here: its parent ended without completing, its
    budget has no room, or its parent has no checkpoint (``facts.outcome``)."""
    return launch, _end_here(launch, "not_started", P.DONE, facts)


def given_up(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """It failed inside trainbot on every try: it ends INTERNAL_ERROR."""
    check(launch, "given_up")
    go(launch, "given_up", P.DONE)
    launch.outcome, launch.detail = "INTERNAL_ERROR", facts.text
    return launch, [thread_line(launch, "given_up", facts.text), update_parent(launch)]
