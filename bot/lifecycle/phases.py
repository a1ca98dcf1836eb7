"""A launch's life: its phases, the moves allowed between them (:data:`TABLE`), and one
named function per move.

Pure: no I/O, no clock. A move takes the launch (the record inside a store transaction,
edited in place) and the :class:`Facts` of the move (who, which job, why, when), and
returns the launch and the events to write with it. Core, the workers and the poller
decide *that* something happened (a person pressed Cancel, Slurm has the job, the old
job is gone); the move decides what that does to the launch. A move from a phase the
table does not list for it raises :class:`NotAllowed`; :func:`step` makes a move the
change :meth:`bot.store.store.Store.mutate` applies, which does nothing when the launch
is no longer where the move starts (a cancel came first).

Retry's one rule: a retry holds the launch (a new attempt, ``held``) and queues it
(:func:`retry`, :func:`reroute`); only once the old job is known to be gone does the
held attempt go on (:func:`old_job_gone`, :func:`moved`), and when it cannot be cancelled
the launch goes back to following it (:func:`old_job_stays`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bot.lifecycle.events import Event
from bot.lifecycle.launch import ACTIVE_PHASES, Attempt, Launch, Phase
from bot.text.mrkdwn import escape

if TYPE_CHECKING:
    from cluster.framework_base import Tracking

P = Phase


@dataclass(frozen=True)
class Edge:
    """One allowed move: ``name`` takes a launch from ``source`` to ``target``. A ``new``
    edge starts a launch that is not stored yet (its phase is the default, QUEUED)."""

    name: str
    source: Phase
    target: Phase
    new: bool = False


def _edges(name: str, sources: Iterable[Phase], target: Phase) -> tuple[Edge, ...]:
    return tuple(Edge(name, source, target) for source in sorted(sources))


_WAITING = (P.QUEUED, P.PREFLIGHT, P.SUBMITTING, P.RETRYING)  # no job of its own to follow
_FOLLOWED = (P.SUBMITTED, P.RUNNING)  # Slurm has its job

TABLE: tuple[Edge, ...] = (
    # /train
    Edge("queue", P.QUEUED, P.QUEUED, new=True),
    Edge("ask_approval", P.QUEUED, P.AWAITING_APPROVAL, new=True),
    Edge("approve", P.AWAITING_APPROVAL, P.QUEUED),
    Edge("reject", P.AWAITING_APPROVAL, P.REJECTED),
    # a worker: pre-flight and submit
    *_edges("preflight", _WAITING, P.PREFLIGHT),
    Edge("dry_run", P.PREFLIGHT, P.DRY_RUN),
    Edge("submitting", P.PREFLIGHT, P.SUBMITTING),
    Edge("submitted", P.SUBMITTING, P.SUBMITTED),
    Edge("submitted", P.DONE, P.DONE),  # the job appeared after a cancel: recorded, cancelled
    *_edges("not_submitted", _WAITING, P.REJECTED),
    Edge("not_started", P.QUEUED, P.DONE),  # due, but its parent failed, no budget, no checkpoint
    *_edges("given_up", ACTIVE_PHASES, P.DONE),  # failed inside trainbot, for good
    # the poller: Slurm's word on the job
    Edge("running", P.SUBMITTED, P.RUNNING),
    Edge("requeued", P.RUNNING, P.SUBMITTED),
    *_edges("ended", _FOLLOWED, P.DONE),
    *_edges("retry_failure", _FOLLOWED, P.RETRYING),  # the failure catalog retries it
    # retries: held until the old job is gone
    *_edges("retry", _FOLLOWED, P.RETRYING),  # the Retry button
    Edge("reroute", P.SUBMITTED, P.RETRYING),  # still pending where another would start it
    Edge("old_job_gone", P.RETRYING, P.RETRYING),
    Edge("moved", P.RETRYING, P.RETRYING),
    Edge("old_job_stays", P.RETRYING, P.RUNNING),
    Edge("old_job_stays", P.RETRYING, P.SUBMITTED),
    Edge("retry_failed", P.RETRYING, P.DONE),  # the retry could not be prepared
    # Cancel: final. A launch with a job ends when the job does (ended, CANCELLED).
    *_edges("cancel", ACTIVE_PHASES, P.DONE),
    *(Edge("cancel", phase, phase) for phase in _FOLLOWED),
)

MOVES: frozenset[str] = frozenset(edge.name for edge in TABLE)
_SOURCES: dict[str, frozenset[Phase]] = {
    name: frozenset(e.source for e in TABLE if e.name == name) for name in MOVES
}
_EDGES = frozenset((e.name, e.source, e.target) for e in TABLE)


class NotAllowed(ValueError):
    """A move the table does not allow from the launch's phase."""


@dataclass(frozen=True)
class Facts:
    """What happened, as the caller saw it. Each move reads the facts it needs."""

    now: float = 0.0  # when (the caller's clock)
    by: str = ""  # who: a Slack user id
    by_name: str = ""
    job_id: str = ""  # which Slurm job
    outcome: str = ""  # the launch's final word (PREFLIGHT, SUBMIT_FAILED, COMPLETED, ...)
    text: str = ""  # the thread line, as the caller wrote it (mrkdwn)
    detail: str = ""  # the record's short sentence about the outcome
    reason: str = ""  # why (a policy's reason, an error)
    data: Mapping[str, object] = field(default_factory=dict)  # the thread line's (buttons)
    attempt: Attempt | None = None  # the new attempt of a retry the failure catalog decided
    tracking: Tracking | None = None  # the job's files, as the framework records them
    partition: str = ""
    nodes: str = ""  # where the job runs
    cluster: str = ""  # where a reroute moves it
    due: float = 0.0  # not before this time


Move = Callable[[Launch, Facts], tuple[Launch, list[Event]]]
Change = Callable[[Launch], list[Event]]


def allowed(launch: Launch, move: str) -> bool:
    """Whether ``move`` starts from the launch's phase."""
    return launch.phase in _SOURCES.get(move, frozenset())


def _check(launch: Launch, move: str) -> None:
    if move not in MOVES:
        raise NotAllowed(f"{move!r} is not a move of a launch")
    if not allowed(launch, move):
        sources = ", ".join(sorted(p.value for p in _SOURCES[move]))
        raise NotAllowed(
            f"launch {launch.id}: {move} is not allowed from {launch.phase.value} "
            f"(only from {sources})"
        )


def _go(launch: Launch, move: str, target: Phase) -> None:
    if (move, launch.phase, target) not in _EDGES:
        raise NotAllowed(
            f"launch {launch.id}: {move} does not go from {launch.phase.value} to {target.value}"
        )
    launch.phase = target


def step(move: Move, facts: Facts) -> Change:
    """``move`` as a change for :meth:`Store.mutate`: applied when it starts from the
    stored launch's phase, else nothing (the launch moved on meanwhile: a cancel wins)."""

    def change(stored: Launch) -> list[Event]:
        if not allowed(stored, move.__name__):
            return []
        return move(stored, facts)[1]

    return change


def _line(launch: Launch, move: str, text: str, **facts: object) -> Event:
    """A thread line of a move, carrying its facts (the move, who, which job)."""
    data: dict[str, object] = {"move": move}
    data.update((key, value) for key, value in facts.items() if value)
    return Event("thread", launch.id, text, data=data)


def _update(launch: Launch) -> Event:
    return Event("update", launch.id)


def _enqueue(launch: Launch, due: float = 0.0) -> Event:
    return Event("enqueue", launch.id, data={"due": due} if due else {})


# -- /train, approval ---------------------------------------------------------------


def queue(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A new launch goes on the queue. ``facts.text``: the request as words (and what it
    waits for)."""
    _check(launch, "queue")
    _go(launch, "queue", P.QUEUED)
    text = f"Queued by <@{facts.by}>: {facts.text}"
    return launch, [Event("parent", launch.id), _line(launch, "queue", text, by=facts.by)]


def ask_approval(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A new launch above the policy's node threshold waits for a second person.
    ``facts.text``: the request as words; ``facts.reason``: the policy's reason."""
    _check(launch, "ask_approval")
    _go(launch, "ask_approval", P.AWAITING_APPROVAL)
    ask = (
        f"✋ asks for {facts.text}. {escape(facts.reason)} A trainbot admin or an approver "
        f"for {launch.cluster} can approve it."
    )
    line = _line(launch, "ask_approval", ask, by=facts.by, buttons=["approve", "reject"])
    return launch, [Event("parent", launch.id), line]


def approve(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A second person lets it go: queued for a worker."""
    _check(launch, "approve")
    if launch.cancelled_by:
        return launch, []
    _go(launch, "approve", P.QUEUED)
    text = f"✅ Approved by <@{facts.by}>. Queued."
    line = _line(launch, "approve", text, by=facts.by)
    return launch, [line, _update(launch), _enqueue(launch)]


def reject(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Not approved (or withdrawn by its owner): nothing runs."""
    _check(launch, "reject")
    if launch.cancelled_by:
        return launch, []
    _go(launch, "reject", P.REJECTED)
    launch.outcome = "NOT_APPROVED"
    launch.detail = f"Not approved by <@{facts.by}>."
    text = f"⛔ {launch.detail} Nothing was submitted."
    return launch, [_line(launch, "reject", text, by=facts.by), _update(launch)]


# -- a worker: pre-flight and submit ---------------------------------------------------


def preflight(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Pre-flight starts (again). Slurm was asked (a lookup) and has no job for it."""
    _check(launch, "preflight")
    _go(launch, "preflight", P.PREFLIGHT)
    launch.submit_started_at = 0.0
    return launch, []


def submitting(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Pre-flight passed: the submit begins at ``facts.now``. ``facts.text`` (the pre-flight
    summary) is said once per attempt, even when a worker that died before its submit
    already said it."""
    _check(launch, "submitting")
    _go(launch, "submitting", P.SUBMITTING)
    launch.submit_started_at = facts.now
    if launch.preflight_said == len(launch.attempts):
        return launch, [_update(launch)]
    launch.preflight_said = len(launch.attempts)
    return launch, [_line(launch, "submitting", facts.text), _update(launch)]


def submitted(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Slurm has the launch's job ``facts.job_id`` (submitted, or found by the launch id):
    it is the current attempt's. One that appears after a cancel is recorded as CANCELLED
    (its worker cancels it). ``facts.text`` says how it came (``Submitted``, ``Found the
    job submitted before a restart``); ``facts.tracking``, where its files are."""
    _check(launch, "submitted")
    job_id = facts.job_id
    launch.submit_started_at = 0.0  # Slurm has answered: this is the job
    if launch.attempts and launch.attempts[-1].job_id == job_id:
        return launch, []
    if not launch.attempts or launch.attempts[-1].job_id:
        launch.attempts.append(Attempt(number=len(launch.attempts) + 1))
    attempt = launch.attempts[-1]  # a retry's attempt was made when it was decided
    attempt.job_id, attempt.submitted_at = job_id, facts.now
    attempt.tracking = facts.tracking
    if launch.phase != P.SUBMITTING or launch.cancelled_by:  # cancelled meanwhile
        attempt.slurm_state = "CANCELLED"
        return launch, [_line(launch, "submitted", appeared_after_cancel(job_id), job=job_id)]
    _go(launch, "submitted", P.SUBMITTED)
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
    return launch, [_line(launch, "submitted", text, job=job_id), _update(launch)]


def appeared_after_cancel(job_id: str) -> str:
    return f"🚫 Slurm job {job_id} appeared after the launch was cancelled: cancelling it."


def _end_here(launch: Launch, move: str, target: Phase, facts: Facts) -> list[Event]:
    """The launch ends without a job: ``facts.outcome``, the first line of ``facts.text``
    (or ``facts.detail``) as its detail."""
    _check(launch, move)
    _go(launch, move, target)
    launch.outcome = facts.outcome
    launch.detail = facts.detail or facts.text.split("\n", 1)[0][:300]
    launch.submit_started_at = 0.0
    line = _line(launch, move, facts.text, **facts.data)
    return [line, _update(launch)]


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
    _check(launch, "given_up")
    _go(launch, "given_up", P.DONE)
    launch.outcome, launch.detail = "INTERNAL_ERROR", facts.text
    return launch, [_line(launch, "given_up", facts.text), _update(launch)]


# -- the poller: Slurm's word on the job -----------------------------------------------


def running(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """First sight of the job running (or already past it), on ``facts.nodes``."""
    _check(launch, "running")
    _go(launch, "running", P.RUNNING)
    attempt = launch.attempts[-1]
    if attempt.started_at:  # running again after a requeue: the wait was not a hang
        launch.progress.updated_at = facts.now
    attempt.started_at = attempt.started_at or facts.now
    attempt.node_list = facts.nodes or attempt.node_list
    text = f"Running on {escape(attempt.node_list)}." if attempt.node_list else "Running."
    return launch, [_line(launch, "running", text, job=attempt.job_id)]


def requeued(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Slurm put the running job back in its queue (same job id)."""
    _check(launch, "requeued")
    _go(launch, "requeued", P.SUBMITTED)
    text = f"Job {facts.job_id} is pending again (requeued)."
    return launch, [_line(launch, "requeued", text, job=facts.job_id)]


def ended(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """The job ended ``facts.outcome`` (Slurm's word) and nothing retries it: the launch is
    done, CANCELLED when someone cancelled it and it did not complete. The closing line
    is the caller's (it needs the cluster's profile), said after this."""
    _check(launch, "ended")
    _go(launch, "ended", P.DONE)
    state = facts.outcome
    launch.outcome = "CANCELLED" if launch.cancelled_by and state != "COMPLETED" else state
    return launch, []


def retry_failure(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """The failure catalog retries the job: ``facts.attempt`` goes after its backoff."""
    _check(launch, "retry_failure")
    assert facts.attempt is not None, "retry_failure needs the new attempt"
    launch.attempts.append(facts.attempt)
    _go(launch, "retry_failure", P.RETRYING)
    due = {"due": facts.attempt.not_before}
    return launch, [Event("enqueue", launch.id, data=due), _update(launch)]


# -- retries: held until the old job is gone ---------------------------------------------


def retry(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Retry (``facts.by``) of job ``facts.job_id``: a new attempt, resuming, is held and
    queued; a worker cancels the old job and lets the new one go once Slurm shows it gone.
    Nothing when the launch follows another job by now, or was cancelled."""
    _check(launch, "retry")
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
    _go(launch, "retry", P.RETRYING)
    text = (
        f"🔁 Retry asked for by <@{facts.by}>: cancelling job {old}; a new attempt is "
        "submitted once Slurm shows it gone."
    )
    line = _line(launch, "retry", text, by=facts.by, job=old)
    return launch, [line, _update(launch), _enqueue(launch)]


def reroute(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Still pending (job ``facts.job_id``) where ``facts.cluster`` would start it now: a
    new attempt there is held while the old job is cancelled. Queued for ``facts.due``:
    should the rerouting process die first, a worker checks on the old job then."""
    _check(launch, "reroute")
    if launch.job_id != facts.job_id or launch.rerouted or launch.cancelled_by:
        return launch, []
    launch.rerouted = True
    launch.attempts.append(
        Attempt(
            number=len(launch.attempts) + 1,
            reason=f"moved from {launch.cluster} to {facts.cluster}",
            held=True,
            cluster=facts.cluster,
        )
    )
    _go(launch, "reroute", P.RETRYING)
    return launch, [_update(launch), _enqueue(launch, facts.due)]


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
    return left


def old_job_gone(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A worker saw the held retry's old job ``facts.job_id`` gone at ``facts.now``: the new
    attempt is submitted (on the cluster a cut-short reroute chose)."""
    _check(launch, "old_job_gone")
    if not _held(launch):
        return launch, []
    _go(launch, "old_job_gone", P.RETRYING)
    old = facts.job_id
    if left := _release(launch, facts.now):  # a reroute cut short
        text = f"🔀 Job {old} on {left} is gone; moved to {launch.cluster}."
        return launch, [_line(launch, "old_job_gone", text, job=old), _update(launch)]
    text = f"Job {old} is gone: submitting a new attempt."
    return launch, [_line(launch, "old_job_gone", text, job=old)]


def moved(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """A reroute cancelled the old job ``facts.job_id`` before it started: the launch takes
    its new cluster and goes on the queue. ``facts.text`` says why it moved."""
    _check(launch, "moved")
    if not _held(launch):
        return launch, []  # a cancel meanwhile made it DONE: nothing new
    _go(launch, "moved", P.RETRYING)
    _release(launch, facts.now)
    line = _line(launch, "moved", facts.text, job=facts.job_id)
    return launch, [line, _enqueue(launch), _update(launch)]


def old_job_stays(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """The held retry's old job could not be cancelled (or started meanwhile, for a
    reroute): the new attempt is dropped and the launch follows the old job again.
    ``facts.text``, when given, says so in the thread."""
    _check(launch, "old_job_stays")
    if not _held(launch):
        return launch, []
    launch.attempts.pop()
    _go(launch, "old_job_stays", P.RUNNING if launch.attempts[-1].started_at else P.SUBMITTED)
    said = [_line(launch, "old_job_stays", facts.text, job=facts.job_id)] if facts.text else []
    return launch, [*said, _update(launch)]


def retry_failed(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """The retry could not be prepared (``facts.text`` says why): its attempt is dropped
    and the launch ends FAILED."""
    _check(launch, "retry_failed")
    launch.attempts.pop()
    _go(launch, "retry_failed", P.DONE)
    launch.outcome, launch.detail = "FAILED", facts.text
    return launch, [_line(launch, "retry_failed", facts.text), _update(launch)]


# -- Cancel -----------------------------------------------------------------------------


def cancel(launch: Launch, facts: Facts) -> tuple[Launch, list[Event]]:
    """Cancel by ``facts.by`` at ``facts.now``: final. Who and when are written first;
    a launch without a job to follow ends here, CANCELLED; one whose job Slurm has ends
    when the job does (:func:`ended`). A submit in flight is looked up by a worker."""
    _check(launch, "cancel")
    text = f"🚫 Cancelled by <@{facts.by}>."
    events = []
    if not launch.cancelled_by:
        launch.cancelled_by, launch.cancelled_at = facts.by, facts.now
    target = launch.phase
    if launch.phase not in _FOLLOWED or not launch.job_id:
        target = P.DONE
        launch.outcome, launch.detail = "CANCELLED", text
    _go(launch, "cancel", target)
    if launch.submit_started_at:  # a worker looks the job up and cancels it
        text += (
            " A submission was in flight: trainbot looks the job up by the launch id "
            "and cancels it if Slurm has it."
        )
        events.append(_enqueue(launch))
    line = _line(launch, "cancel", text, by=facts.by, job=launch.job_id)
    return launch, [line, _update(launch), *events]
