"""The moves that start a launch: /train and approval, then a worker's pre-flight and
submit, and the ways a launch ends before Slurm runs it."""

from __future__ import annotations

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.lifecycle.phases.table import (
    Facts,
    P,
    check,
    ending_of,
    enqueue,
    go,
    thread_line,
    update_parent,
)

# -- /train, approval ---------------------------------------------------------------


def queue(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A new launch goes on the queue. ``facts.data``: what it waits for (``at``,
    ``waits_for``), where cluster=auto put it, what it starts from."""
    check(launch, "queue")
    go(launch, "queue", P.QUEUED)
    command = launch.request.to_text()
    line = thread_line(launch, "queue", by=facts.by, command=command, **facts.data)
    return launch, [Event("parent", launch.id), line]


def ask_approval(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A new launch above the policy's node threshold waits for a second person
    (``facts.reason``: the policy's reason)."""
    check(launch, "ask_approval")
    go(launch, "ask_approval", P.AWAITING_APPROVAL)
    line = thread_line(
        launch,
        "ask_approval",
        by=facts.by,
        command=launch.request.to_text(),
        reason=facts.reason,
        cluster=launch.cluster,
        buttons=["approve", "reject"],
    )
    return launch, [Event("parent", launch.id), line]


def approve(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A second person lets it go: queued for a worker."""
    check(launch, "approve")
    if launch.cancelled_by:
        return launch, []
    go(launch, "approve", P.QUEUED)
    launch.approved_by = facts.by
    line = thread_line(launch, "approve", by=facts.by)
    return launch, [line, update_parent(launch), enqueue(launch)]


def reject(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Not approved (or withdrawn by its owner): nothing runs."""
    check(launch, "reject")
    if launch.cancelled_by:
        return launch, []
    go(launch, "reject", P.REJECTED)
    launch.outcome = "NOT_APPROVED"
    launch.ending = {"move": "reject", "by": facts.by}
    return launch, [thread_line(launch, "reject", by=facts.by), update_parent(launch)]


# -- a worker: pre-flight and submit ---------------------------------------------------


def preflight(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Pre-flight starts (again). Slurm was asked (a lookup) and has no job for it."""
    check(launch, "preflight")
    go(launch, "preflight", P.PREFLIGHT)
    launch.submit_started_at = 0.0
    return launch, []


def submitting(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Pre-flight passed: the submit begins at ``facts.now``. What pre-flight found
    (``facts.data``: the partition, the image, the script, notes) is said once per attempt,
    even when a worker that died before its submit already said it."""
    check(launch, "submitting")
    go(launch, "submitting", P.SUBMITTING)
    launch.submit_started_at = facts.now
    if launch.preflight_said == len(launch.attempts):
        return launch, [update_parent(launch)]
    launch.preflight_said = len(launch.attempts)
    return launch, [thread_line(launch, "submitting", **facts.data), update_parent(launch)]


def submitted(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Slurm has the launch's job ``facts.job_id`` (submitted, or found by the launch id):
    it is the current attempt's. One that appears after a cancel is recorded as CANCELLED
    (its worker cancels it). ``facts.how`` says how it came (``submitted``,
    ``found_after_restart``, ``found_after_error``); ``facts.tracking``, where its files are."""
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
        return launch, [thread_line(launch, "submitted", job=job_id, after_cancel=True)]
    go(launch, "submitted", P.SUBMITTED)
    line = thread_line(
        launch,
        "submitted",
        job=job_id,
        how=facts.how or "submitted",
        cluster=launch.cluster,
        partition=facts.partition,
        nodes=launch.request.nodes,
        user=launch.cluster_user,
        log_dir=facts.tracking.log_dir if facts.tracking else "",
        attempt=len(launch.attempts),
        record=facts.record.summary() if facts.record is not None else "",
    )
    return launch, [line, update_parent(launch)]


def _end_here(launch: Launch, move: str, target: Phase, facts: Facts) -> list[Event]:
    """The launch ends without a job: ``facts.outcome``. Its line is its facts
    (``facts.data``: ``why`` and what it needs), worded by bot.wording; its end is the
    same facts, or ``facts.detail``, a plain sentence, where the caller gave one."""
    check(launch, move)
    go(launch, move, target)
    launch.outcome = facts.outcome
    launch.submit_started_at = 0.0
    line = thread_line(launch, move, outcome=facts.outcome, **facts.data)
    launch.ending = {"move": "said", "text": facts.detail} if facts.detail else ending_of(line)
    return [line, update_parent(launch)]


def not_submitted(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Refused before Slurm ran anything (pre-flight, sbatch, no thread, unreachable):
    REJECTED with ``facts.outcome``; ``facts.data`` may ask for buttons."""
    return launch, _end_here(launch, "not_submitted", P.REJECTED, facts)


def dry_run(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A dry run ends after its pre-flight; ``facts.data`` says what would have run."""
    return launch, _end_here(launch, "dry_run", P.DRY_RUN, facts)


def not_started(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A waiting launch that is due ends here: its parent ended without completing, its
    budget has no room, or its parent has no checkpoint (``facts.outcome``)."""
    return launch, _end_here(launch, "not_started", P.DONE, facts)


def given_up(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """It failed inside trainbot on every try (``facts.data``: the error, the tries): it
    ends INTERNAL_ERROR."""
    check(launch, "given_up")
    go(launch, "given_up", P.DONE)
    launch.outcome = "INTERNAL_ERROR"
    line = thread_line(launch, "given_up", **facts.data)
    launch.ending = ending_of(line)
    return launch, [line, update_parent(launch)]
