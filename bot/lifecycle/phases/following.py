"""The moves once Slurm has the job: the poller's word on it, retries held until the old
job is gone, reroutes, and Cancel."""

from __future__ import annotations

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch
from bot.lifecycle.phases.table import (
    FOLLOWED,
    Facts,
    P,
    check,
    ending_of,
    enqueue,
    go,
    thread_line,
    update_parent,
)

# -- the poller: Slurm's word on the job -----------------------------------------------


def running(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """First sight of the job running (or already past it), on ``facts.nodes``."""
    check(launch, "running")
    go(launch, "running", P.RUNNING)
    attempt = launch.attempts[-1]
    if attempt.started_at:  # running again after a requeue: the wait was not a hang
        launch.progress.updated_at = facts.now
    attempt.started_at = attempt.started_at or facts.now
    attempt.node_list = facts.nodes or attempt.node_list
    line = thread_line(launch, "running", job=attempt.job_id, nodes=attempt.node_list)
    return launch, [line]


def requeued(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Slurm put the running job back in its queue (same job id)."""
    check(launch, "requeued")
    go(launch, "requeued", P.SUBMITTED)
    return launch, [thread_line(launch, "requeued", job=facts.job_id)]


def ended(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """The job ended ``facts.outcome`` (Slurm's word) and nothing retries it: the launch is
    done, CANCELLED when someone cancelled it and it did not complete. The closing line
    is the caller's (it needs the cluster's profile), said after this."""
    check(launch, "ended")
    go(launch, "ended", P.DONE)
    state = facts.outcome
    launch.outcome = "CANCELLED" if launch.cancelled_by and state != "COMPLETED" else state
    return launch, []


def retry_failure(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """The failure catalog retries the job: ``facts.attempt`` goes after its backoff."""
    check(launch, "retry_failure")
    assert facts.attempt is not None, "retry_failure needs the new attempt"
    launch.attempts.append(facts.attempt)
    go(launch, "retry_failure", P.RETRYING)
    due = {"due": facts.attempt.not_before}
    return launch, [Event("enqueue", launch.id, data=due), update_parent(launch)]


def resume(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """The job ended COMPLETED short of its total because it stopped early on purpose
    (``facts.data``: where, why, its checkpoint): ``facts.attempt`` goes on from its newest
    checkpoint.
    The launch stays active, so ``after=`` dependents wait for the real end."""
    check(launch, "resume")
    assert facts.attempt is not None, "resume needs the new attempt"
    previous = launch.attempts[-1]
    previous.ended_at = previous.ended_at or facts.now
    launch.attempts.append(facts.attempt)
    launch.resumes += 1
    launch.progress.stopped_early, launch.progress.finished = "", False
    go(launch, "resume", P.RETRYING)
    line = thread_line(launch, "resume", job=previous.job_id, **facts.data)
    due = {"due": facts.attempt.not_before} if facts.attempt.not_before else {}
    return launch, [line, Event("enqueue", launch.id, data=due), update_parent(launch)]


def stopped_early(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """The job ended COMPLETED short of its total (``facts.reason`` says why) and is not
    resumed: the launch ends STOPPED_EARLY, never a plain success, so an ``after=`` child
    that needs success does not start from a half-trained checkpoint. Its end is
    ``facts.data`` (where it stopped, why, why it was not resumed); the closing line is the
    caller's."""
    check(launch, "stopped_early")
    go(launch, "stopped_early", P.DONE)
    launch.outcome = "CANCELLED" if launch.cancelled_by else "STOPPED_EARLY"
    launch.ending = {"move": "stopped_early", **facts.data}
    return launch, []


# -- retries: held until the old job is gone ---------------------------------------------


def retry(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Retry (``facts.by``) of job ``facts.job_id``: a new attempt, resuming, is held and
    queued; a worker cancels the old job and lets the new one go once Slurm shows it gone.
    Nothing when the launch follows another job by now, or was cancelled."""
    check(launch, "retry")
    old = facts.job_id
    if launch.job_id != old or launch.cancelled_by:  # a cancel is final
        return launch, []
    launch.attempts.append(
        Attempt(
            number=len(launch.attempts) + 1,
            reason=f"retry asked for by {facts.by_name or facts.by}",
            resume=True,
            checkpoints_at_start=len(launch.checkpoints),
            held=True,
            held_at=facts.now,
            from_step=launch.progress.step,
        )
    )
    go(launch, "retry", P.RETRYING)
    line = thread_line(launch, "retry", by=facts.by, job=old)
    return launch, [line, update_parent(launch), enqueue(launch)]


def reroute(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Still pending (job ``facts.job_id``) where ``facts.cluster`` would start it now: a
    new attempt there is held while the old job is cancelled. Queued for ``facts.due``:
    should the rerouting process die first, a worker checks on the old job then."""
    check(launch, "reroute")
    if launch.job_id != facts.job_id or launch.rerouted or launch.cancelled_by:
        return launch, []
    launch.rerouted = True
    launch.attempts.append(
        Attempt(
            number=len(launch.attempts) + 1,
            reason=f"moved from {launch.cluster} to {facts.cluster}",
            held=True,
            cluster=facts.cluster,
            terms=facts.terms,
        )
    )
    go(launch, "reroute", P.RETRYING)
    return launch, [update_parent(launch), enqueue(launch, facts.due)]


def move_refused(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Still pending (on ``facts.data["left"]``) where ``facts.cluster`` would start it now,
    but its owner may not launch there (``facts.data``: ``reason`` and ``ask``, the policy's
    answer): it stays, and is not offered a move again."""
    check(launch, "move_refused")
    if launch.rerouted or launch.cancelled_by:
        return launch, []
    launch.rerouted = True
    go(launch, "move_refused", P.SUBMITTED)
    line = thread_line(
        launch, "move_refused", job=launch.job_id, cluster=facts.cluster, **facts.data
    )
    return launch, [line]


def _held(launch: Launch) -> bool:
    return bool(launch.attempts) and launch.attempts[-1].held


def _release(launch: Launch, now: float) -> str:
    """The held attempt goes on: the old job ran until ``now`` at the latest, and a
    rerouted launch takes its new attempt's cluster. The cluster it left, or ""."""
    launch.attempts[-1].held = False
    launch.attempts[-2].close(now)  # billed until now, not until the end
    return settle_move(launch)


def settle_move(launch: Launch) -> str:
    """A rerouted launch whose old job is confirmed gone takes its new attempt's cluster:
    the earlier attempts keep theirs (their jobs are not looked for on the new one).
    Returns the cluster it left ("" when it does not move)."""
    target = launch.attempts[-1].cluster if launch.attempts else ""
    if not target or target == launch.cluster:
        return ""
    left = launch.cluster
    for attempt in launch.attempts[:-1]:
        attempt.cluster = attempt.cluster or left
    launch.request = launch.request.model_copy(update={"cluster": target})
    terms = launch.attempts[-1].terms
    if terms is not None:  # who it runs as there was derived for there, not kept from here
        launch.cluster_user, launch.slurm_account = terms.cluster_user, terms.slurm_account
        launch.image_secrets = terms.image_secrets
    return left


def old_job_gone(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A worker saw the held retry's old job ``facts.job_id`` gone at ``facts.now``: the new
    attempt is submitted (on the cluster a cut-short reroute chose)."""
    check(launch, "old_job_gone")
    if not _held(launch):
        return launch, []
    go(launch, "old_job_gone", P.RETRYING)
    old = facts.job_id
    if left := _release(launch, facts.now):  # a reroute cut short
        line = thread_line(launch, "old_job_gone", job=old, left=left, cluster=launch.cluster)
        return launch, [line, update_parent(launch)]
    return launch, [thread_line(launch, "old_job_gone", job=old)]


def moved(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A reroute cancelled the old job ``facts.job_id`` before it started: the launch takes
    its new cluster and goes on the queue. ``facts.data`` says from where, after how long
    and why it moved (``left``, ``waited_s``, ``why``)."""
    check(launch, "moved")
    if not _held(launch):
        return launch, []  # a cancel meanwhile made it DONE: nothing new
    go(launch, "moved", P.RETRYING)
    _release(launch, facts.now)
    line = thread_line(launch, "moved", job=facts.job_id, cluster=launch.cluster, **facts.data)
    return launch, [line, enqueue(launch), update_parent(launch)]


def old_job_stays(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """The held retry's old job could not be cancelled (or started meanwhile, for a
    reroute): the new attempt is dropped and the launch follows the old job again.
    ``facts.reason``, why it could not be cancelled, is said in the thread when given."""
    check(launch, "old_job_stays")
    if not _held(launch):
        return launch, []
    launch.attempts.pop()
    go(launch, "old_job_stays", P.RUNNING if launch.attempts[-1].started_at else P.SUBMITTED)
    line = thread_line(launch, "old_job_stays", job=facts.job_id, error=facts.reason)
    return launch, [line, update_parent(launch)] if facts.reason else [update_parent(launch)]


def retry_failed(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """The retry could not be prepared (``facts.reason`` says why): its attempt is dropped
    and the launch ends FAILED."""
    check(launch, "retry_failed")
    launch.attempts.pop()
    go(launch, "retry_failed", P.DONE)
    launch.outcome = "FAILED"
    line = thread_line(launch, "retry_failed", error=facts.reason)
    launch.ending = ending_of(line)
    return launch, [line, update_parent(launch)]


# -- Cancel -----------------------------------------------------------------------------


def cancel(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Cancel by ``facts.by`` at ``facts.now``: final. Who and when are written first;
    a launch without a job to follow ends here, CANCELLED; one whose job Slurm has ends
    when the job does (:func:`ended`). A submit in flight is looked up by a worker."""
    check(launch, "cancel")
    events = []
    if not launch.cancelled_by:
        launch.cancelled_by, launch.cancelled_at = facts.by, facts.now
    target = launch.phase
    if launch.phase not in FOLLOWED or not launch.job_id:
        target = P.DONE
        launch.outcome, launch.ending = "CANCELLED", {"move": "cancel", "by": facts.by}
    go(launch, "cancel", target)
    in_flight = bool(launch.submit_started_at)
    if in_flight:  # a worker looks the job up and cancels it
        events.append(enqueue(launch))
    line = thread_line(launch, "cancel", by=facts.by, job=launch.job_id, in_flight=in_flight)
    return launch, [line, update_parent(launch), *events]
