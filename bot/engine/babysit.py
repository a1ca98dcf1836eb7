"""What the bot does when a run goes wrong: diagnose, retry or stop, page on-call.

Pure: called inside a launch's transaction (see bot.engine.tracking), it edits the
launch and returns the events to write with it. The failure catalog and the
retry rules live in cluster.diagnosis; this module applies them to a launch.
"""

from __future__ import annotations

from bot.lifecycle import health, phases, render
from bot.lifecycle.events import Event, dedup_key
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.settings.sections import Watch
from bot.text.mrkdwn import code_block, escape
from cluster.diagnosis import Diagnosis, retry_decision

EVIDENCE_LINES = 5


def alert_key(launch: Launch, cause_key: str) -> str:
    return dedup_key(launch.cluster, launch.id, cause_key)


def oncall(launch: Launch, cause_key: str, cause: str, action: str) -> list[Event]:
    """A page (once per launch and cause) for the on-call channel and webhook."""
    key = alert_key(launch, cause_key)
    if key in launch.open_alerts:
        return []
    launch.open_alerts.append(key)
    data = {"dedup_key": key, "cause_key": cause_key, "cause": cause, "action": action}
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
    (:func:`cluster.diagnosis.diagnose`). Returns the events, and whether the launch goes
    on (a retry is queued) rather than ending here."""
    attempt = launch.attempts[-1]
    if launch.cancelled_by:  # a cancel is final: whatever the log shows, nothing is retried
        job = f"Job {attempt.job_id}" if attempt.job_id else "The job"
        who = health.canceller(launch)
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
    ran = render.duration(now - (attempt.started_at or attempt.submitted_at or now))
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
    action = "Retrying." if decision.retry else "Not retried."
    if decision.page:
        events += oncall(launch, diagnosis.key, escape(diagnosis.cause), action)
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


def check_hang(launch: Launch, watch: Watch, now: float) -> list[Event]:
    """RUNNING with no new progress line for too long: say so once, and page.

    Before the attempt's first step, start-up counts as progress while the log grows
    (``attempt.log_grew_at``): a long start-up that keeps printing is not a hang, a
    silent one still is, and one past ``watch.startup_max_s`` is, whatever it prints."""
    attempt = launch.attempt
    if launch.phase != Phase.RUNNING or attempt is None or attempt.hang_reported:
        return []
    if launch.interactive or not attempt.started_at:
        return []
    starting = launch.progress.updated_at < attempt.started_at  # no step in this attempt yet
    last = max(launch.progress.updated_at, attempt.started_at)
    bound = watch.hang_after_s(launch.progress.median_step_time_s)
    if starting:
        last, bound = max(last, attempt.log_grew_at), watch.hang_min_s
        if now - attempt.started_at >= watch.startup_max_s:
            last, bound = attempt.started_at, watch.startup_max_s
    if now - last < bound:
        return []
    attempt.hang_reported = True
    quiet = render.duration(now - last)
    where = f"step {launch.progress.step:,}" if not starting else "start-up"
    if starting and attempt.tail.strip():
        where += f", last line `{escape(attempt.tail.strip().splitlines()[-1][:120])}`"
    text = (
        f"⚠️ No progress for {quiet} (last seen at {where}; the bound is {render.duration(bound)}). "
        f"Job {attempt.job_id} is still RUNNING and may be hung. "
        "Cancel or Retry below."
    )
    data = {"buttons": ["cancel", "retry"]}
    events = [Event("thread", launch.id, text, data=data), Event("update", launch.id)]
    cause = f"no progress for {quiet} while RUNNING (silent hang?)"
    return events + oncall(launch, "silent_hang", cause, "Cancel or Retry from the thread.")
