"""What the bot does when a run goes wrong: diagnose, retry or stop, page on-call.

Pure: called inside a launch's transaction (see bot.engine.tracking), it edits the
launch and returns the events to write with it. The failure catalog and the
retry rules live in cluster.watching.diagnosis; this module applies them to a launch.
"""

from __future__ import annotations

from bot.lifecycle import measures, phases
from bot.lifecycle.events import Event, dedup_key
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.settings.sections import Watch
from bot.text.mrkdwn import code_block, escape
from bot.wording import health as health_words
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


def evidence_block(diagnosis: Diagnosis) -> str:
    lines = list(diagnosis.evidence[-EVIDENCE_LINES:])
    return code_block("\n".join(lines)) if lines else ""


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
        job = f"Job {attempt.job_id}" if attempt.job_id else "The job"
        who = health_words.canceller(launch)
        launch.detail = f"Cancelled by {who}."
        text = f"🚫 {job} ended ({state}) after {who} cancelled it; not retried."
        return [Event("thread", launch.id, text)], False
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
    ran = measures.duration(now - (attempt.started_at or attempt.submitted_at or now))
    job = f"Job {attempt.job_id}" if attempt.job_id else "The job"
    text = f"⚠️ {job} failed ({state}) after {ran}: {escape(diagnosis.cause)}."
    if block := evidence_block(diagnosis):
        text += "\n" + block
    if diagnosis.read:
        text += f"\nRead: {escape(diagnosis.read)}."
    if diagnosis.output_cut:
        text += (
            "\nsrun force-terminated the job's tasks after the first one failed, and output "
            "still on its way to the log is lost then: the cause may be missing from the logs."
        )
    text += "\n" + escape(decision.reason)
    events = [Event("thread", launch.id, text)]
    if decision.page:
        events += oncall(launch, diagnosis.key, cause=diagnosis.cause, retry=decision.retry)
    if not decision.retry:
        launch.detail = f"{escape(diagnosis.cause)}. {escape(decision.reason)}"[:300]
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
) -> tuple[list[Event], str]:
    """The job ended COMPLETED short of its total (``why``, :func:`early_stop_reason`).
    Resumed from its newest checkpoint as a new attempt when ``watch.resume_stopped_early``
    says so (the launch stays active: ``after=`` dependents wait), else the launch ends
    STOPPED_EARLY. Returns the events and, when not resumed, the line that explains it
    ("" when resumed)."""
    attempt, p = launch.attempts[-1], launch.progress
    saved = len(launch.checkpoints) > attempt.checkpoints_at_start
    where = f"step {p.step:,} / {p.total:,}"
    ckpt = ""
    if launch.checkpoints:
        ckpt = f" · checkpoint {escape(measures.checkpoint_label(launch, launch.checkpoints[-1]))}"
    head = f"⏸️ STOPPED EARLY at {where} ({escape(why)}; Slurm: COMPLETED){ckpt}"
    mode = watch.resume_stopped_early
    wanted = mode == "always" or (mode == "time_budget" and why == TIME_BUDGET)
    if launch.cancelled_by:
        blocker = "it was cancelled"
    elif not wanted:
        which = "no run" if mode == "never" else "only a run that stopped on its time budget"
        blocker = f"the policy resumes {which} (watch.resume_stopped_early)"
    elif not saved:
        blocker = "it saved no checkpoint in this attempt"
    elif p.step <= attempt.from_step:
        blocker = "it made no progress in this attempt"
    elif launch.resumes >= watch.max_resumes:
        blocker = f"it was resumed {launch.resumes} times already (watch.max_resumes)"
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
        if launch.checkpoints:
            facts["checkpoint"] = measures.checkpoint_label(launch, launch.checkpoints[-1])
        _, events = phases.resume(launch, phases.Facts(now=now, attempt=new, data=facts))
        return events, ""
    request, again = launch.request, ""
    if isinstance(request, TrainRequest):
        update = {"start_from": launch.id, "after": None, "after_any": False, "at": None}
        again = request.model_copy(update=update).to_text()
    detail = f"Stopped early at {where} ({why}); not resumed: {blocker}."
    phases.stopped_early(launch, phases.Facts(detail=detail[:300]))
    line = f"{head}. Not resumed: {escape(blocker)}."
    if again:
        line += f" To go on from its checkpoint: `{escape(again)}`"
    return [], line


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
    facts = {"move": "job_stuck", "job": job, "held": why.held, "words": why.words}
    facts |= {"code": code, "fix": why.fix, "buttons": ["cancel"]}
    events.append(Event("thread", launch.id, data=facts))
    if why.page:
        events += oncall(launch, "job_held", job=job, words=why.words, code=code)
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
