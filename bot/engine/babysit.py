"""What the bot does when a run ends or goes wrong: diagnose, retry or stop, page on-call,
and the facts of its closing line.

Pure: called inside a launch's transaction (see bot.engine.tracking), it edits the
launch and returns the events to write with it. The failure catalog and the
retry rules live in cluster.watching.diagnosis; this module applies them to a launch.
"""

from __future__ import annotations

from bot.lifecycle import measures, phases
from bot.lifecycle.events import Event, dedup_key
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.settings.sections import Watch
from cluster.site.profiles import ClusterProfile
from cluster.slurm.reasons import explain_pending
from cluster.watching.collector import JobSnapshot
from cluster.watching.diagnosis import Diagnosis, retry_decision
from cluster.watching.progress import TIME_BUDGET
from commands.requests import TrainRequest

EVIDENCE_LINES = 5


def alert_key(launch: Launch, cause_key: str) -> str:
    return dedup_key(launch.cluster, launch.id, cause_key)


def oncall(launch: Launch, cause_key: str, **facts: object) -> list[Event]:
    """A page (once per launch and cause) for the on-call channel and webhook: the cause
    and what is done about it as facts (bot.wording.pages words them)."""
    key = alert_key(launch, cause_key)
    if key in launch.open_alerts:
        return []
    launch.open_alerts.append(key)
    data = {"dedup_key": key, "cause_key": cause_key, "facts": facts}
    return [Event("oncall", launch.id, data=data)]


def resolve_alerts(launch: Launch, outcome: str) -> list[Event]:
    events = [
        Event("resolve", launch.id, data={"dedup_key": k, "outcome": outcome})
        for k in launch.open_alerts
    ]
    launch.open_alerts.clear()
    return events


def on_failure(
    launch: Launch,
    watch: Watch,
    *,
    state: str,
    diagnosis: Diagnosis | None,
    now: float,
) -> tuple[list[Event], bool]:
    """The attempt ended ``state`` (not COMPLETED) and its evidence showed ``diagnosis``
    (:func:`cluster.watching.diagnosis.diagnose`). Returns the events, and whether the launch goes
    on (a retry is queued) rather than ending here."""
    attempt = launch.attempts[-1]
    if launch.cancelled_by:  # a cancel is final: whatever the log shows, nothing is retried
        said = {"move": "cancel_ended", "job": attempt.job_id, "state": state}
        launch.ending = said | {"by": launch.cancelled_by}
        return [Event("thread", launch.id, data=dict(launch.ending))], False
    if diagnosis is None:
        return [], False
    attempt.cause_key = diagnosis.key
    previous = [a.cause_key for a in launch.attempts[:-1] if a.cause_key]
    decision = retry_decision(
        diagnosis,
        attempt=len(launch.attempts),
        max_attempts=watch.max_attempts,
        previous_keys=previous,
        newer_checkpoint=len(launch.checkpoints) > attempt.checkpoints_at_start,
    )
    ran_s = now - (attempt.started_at or attempt.submitted_at or now)
    facts: dict[str, object] = {"move": "job_failed", "job": attempt.job_id, "state": state}
    facts |= {"ran_s": ran_s, "cause": diagnosis.cause, "reason": decision.reason}
    if evidence := list(diagnosis.evidence[-EVIDENCE_LINES:]):
        facts["evidence"] = evidence
    if diagnosis.read:
        facts["read"] = diagnosis.read
    if diagnosis.output_cut:
        facts["output_cut"] = True
    events = [Event("thread", launch.id, data=facts)]
    if decision.page:
        events += oncall(launch, diagnosis.key, cause=diagnosis.cause, retry=decision.retry)
    if not decision.retry:
        launch.ending = {"move": "job_failed", "cause": diagnosis.cause}
        launch.ending["reason"] = decision.reason
        return events, False
    number = len(launch.attempts) + 1
    attempt = Attempt(
        number=number,
        reason=f"{diagnosis.cause}",
        exclude=decision.exclude_node or "",
        seed_tokenizer=decision.seed_tokenizer,
        resume=decision.resume,
        checkpoints_at_start=len(launch.checkpoints),
        from_step=launch.progress.step,
        not_before=now + watch.retry_backoff_s * (number - 1),
    )
    _, queued = phases.retry_failure(launch, phases.Facts(attempt=attempt))
    return events + queued, True


def early_stop_reason(launch: Launch) -> str:
    """Why a run that ended COMPLETED stopped short of its total ("its time budget"), or ""
    when it finished: its own early-stop line, else its last step short of the total by more
    than its log interval (a run that printed its last step, or said it reached it, did not
    stop early)."""
    p = launch.progress
    if p.finished or not p.total or p.step >= p.total:
        return ""  # (a time budget that runs out at the last step ends nothing early)
    if p.stopped_early:
        return p.stopped_early
    if p.step + max(1, p.log_interval) > p.total:
        return ""
    return "no early-stop line; its last step is short of the total"


def on_stopped_early(
    launch: Launch, watch: Watch, *, why: str, now: float
) -> tuple[list[Event], dict[str, object]]:
    """The job ended COMPLETED short of its total (``why``, :func:`early_stop_reason`).
    Resumed from its newest checkpoint as a new attempt when ``watch.resume_stopped_early``
    says so (the launch stays active: ``after=`` dependents wait), else the launch ends
    STOPPED_EARLY. Returns the events and, when not resumed, the facts of why (where it
    stopped, why it was not resumed, the command that goes on: bot.wording.endings words
    them in the closing line); {} when resumed."""
    attempt, p = launch.attempts[-1], launch.progress
    saved = len(launch.checkpoints) > attempt.checkpoints_at_start
    where = f"step {p.step:,} / {p.total:,}"
    ckpt = measures.checkpoint_label(launch, launch.checkpoints[-1]) if launch.checkpoints else ""
    mode = watch.resume_stopped_early
    wanted = mode == "always" or (mode == "time_budget" and why == TIME_BUDGET)
    blocker: dict[str, object] = {}
    if launch.cancelled_by:
        blocker = {"blocker": "cancelled"}
    elif not wanted:
        blocker = {"blocker": "policy_never" if mode == "never" else "policy_time_budget"}
    elif not saved:
        blocker = {"blocker": "no_checkpoint"}
    elif p.step <= attempt.from_step:
        blocker = {"blocker": "no_progress"}
    elif launch.resumes >= watch.max_resumes:
        blocker = {"blocker": "max_resumes", "resumes": launch.resumes}
    else:
        number = len(launch.attempts) + 1
        new = Attempt(
            number=number,
            reason=f"resumed after it stopped early at {where} ({why})",
            resume=True,
            checkpoints_at_start=len(launch.checkpoints),
            from_step=p.step,
        )
        facts = {"step": p.step, "total": p.total, "why": why, "attempt": number}
        if ckpt:
            facts["checkpoint"] = ckpt
        _, events = phases.resume(launch, phases.Facts(now=now, attempt=new, data=facts))
        return events, {}
    ended = {"step": p.step, "total": p.total, "why": why, **blocker}
    phases.stopped_early(launch, phases.Facts(data=ended))
    said = dict(ended)
    if ckpt:
        said["checkpoint"] = ckpt
    request = launch.request
    if isinstance(request, TrainRequest):
        update = {"start_from": launch.id, "after": None, "after_any": False, "at": None}
        said["again"] = request.model_copy(update=update).to_text()
    return [], said


def pending_reason(launch: Launch, snap: JobSnapshot) -> list[Event]:
    """While the job waits, why (squeue's reason, :func:`cluster.slurm.reasons.explain_pending`):
    each new reason updates the parent; one that never clears by itself (a hold, a limit
    the request is over, a dependency that can no longer be met) is said at once in the
    thread with the fix, and a hold only on-call can lift (a node's prolog failed, an
    admin's hold) is paged, once per launch."""
    attempt = launch.attempts[-1]
    if launch.phase != Phase.SUBMITTED or snap.state != "PENDING" or snap.queue is None:
        attempt.pending_reason = ""
        return []
    why = explain_pending(snap.queue.reason)
    code = why.code if why is not None else ""
    if code == attempt.pending_reason:
        return []
    attempt.pending_reason = code
    events = [Event("update", launch.id)]
    if why is None or not why.stuck:
        return events
    job = snap.job_id
    facts = {"move": "job_stuck", "job": job, "code": code, "buttons": ["cancel"]}  # worded by code
    events.append(Event("thread", launch.id, data=facts))
    if why.page:
        events += oncall(launch, "job_held", job=job, code=code)
    return events


def check_hang(launch: Launch, watch: Watch, now: float) -> list[Event]:
    """RUNNING with no output for too long: say so once, and page.

    Any growth of the log counts (``attempt.log_grew_at``: a line, or the block a buffered
    run writes), not only a new step: a run whose driver writes in blocks, or prints every
    ``log_interval`` steps, is not silent while its log grows. The bound is
    ``watch.hang_after_s`` of the run's median step time times its log interval (the steps
    between two printed points). Before the first step, a start-up past
    ``watch.startup_max_s`` is a hang whatever it prints."""
    attempt = launch.attempt
    if launch.phase != Phase.RUNNING or attempt is None or attempt.hang_reported:
        return []
    if launch.interactive or not attempt.started_at:
        return []
    p = launch.progress
    starting = p.updated_at < attempt.started_at  # no step in this attempt yet
    last = max(p.updated_at, attempt.started_at, attempt.log_grew_at)
    interval = max(1, p.log_interval)
    bound = watch.hang_after_s((p.median_step_time_s or 0.0) * interval)
    if starting:
        bound = watch.hang_min_s
        if now - attempt.started_at >= watch.startup_max_s:
            last, bound = attempt.started_at, watch.startup_max_s
    if now - last < bound:
        return []
    attempt.hang_reported = True
    facts: dict[str, object] = {"move": "hang", "job": attempt.job_id, "quiet_s": now - last}
    facts |= {"bound_s": bound, "buttons": ["cancel", "retry"]}
    if not starting:
        facts["step"] = p.step
    elif attempt.tail.strip():
        facts["last_line"] = attempt.tail.strip().splitlines()[-1][:120]
    events = [Event("thread", launch.id, data=facts), Event("update", launch.id)]
    return events + oncall(launch, "silent_hang", quiet_s=now - last)


def used_gpu_hours(launch: Launch, profile: ClusterProfile, now: float) -> float:
    """GPU-hours of every attempt that ran: what Slurm's accounting says (elapsed time x
    allocated GPUs) where it was read, else run time x nodes x GPUs per node."""
    total = 0.0
    for a in launch.attempts:
        if a.gpu_hours is not None:
            total += a.gpu_hours
        elif a.started_at:
            ran_s = max(0.0, (a.ended_at or now) - a.started_at)
            total += ran_s * launch.request.nodes * profile.gpus_per_node / 3600
    return total


def closing_facts(
    launch: Launch, profile: ClusterProfile, now: float, *, state: str
) -> dict[str, object]:
    """The facts of the closing line (Slurm's ``state``, the launch's outcome, how long, how
    many attempts, GPU-hours, the last checkpoint, the exit code); also records the launch's
    GPU-hours. bot.wording.endings words them."""
    first = launch.attempts[0]
    start = first.started_at or first.submitted_at or launch.created_at
    elapsed = (launch.attempt.ended_at if launch.attempt else now) - start
    launch.gpu_hours = used_gpu_hours(launch, profile, now)
    facts: dict[str, object] = {"move": "closing", "state": state, "outcome": launch.outcome}
    facts |= {"elapsed_s": elapsed, "attempts": len(launch.attempts)}
    facts["gpu_hours"] = launch.gpu_hours
    if launch.checkpoints:
        facts["checkpoint"] = measures.checkpoint_label(launch, launch.checkpoints[-1])
    if launch.attempt and launch.attempt.exit_code:
        facts["exit_code"] = launch.attempt.exit_code
    if launch.health.nan_step is not None:
        facts["nan_step"] = launch.health.nan_step
    return facts
