"""A worker's paths when a launch is not simply pre-flighted and submitted: the look-up
after a submit whose outcome is unknown, settling a cancel that came during one, a retry
held until its old job is gone, and a cluster that cannot be reached.

"No job yet" is never "never submitted" while a submit may still be in flight: Slurm
is asked by the launch id once any submit must have ended (:func:`submit_deadline`).
"""

from __future__ import annotations

import time

from bot.engine import babysit
from bot.engine.holding import Hold, log
from bot.lifecycle import phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from cluster.errors import ClusterError, ClusterUnreachable, SlurmCommandFailed
from cluster.launching.launch import SUBMIT_TIMEOUT_S
from cluster.launching.tokenizer import seed_tokenizer_cache

UNREACHABLE_RETRIES = 5  # before anything was submitted
MAX_LOOKUP_WAIT_S = 300.0
LOOKUP_AGAIN_S = 20.0  # a SUBMITTING launch whose cluster went away: look again this much later
SUBMIT_SETTLE_S = 30.0  # after a submit whose outcome is unknown, before looking it up
RETRY_CANCEL_WAIT_S = 15.0  # a Retry's old job must be gone this long after the Retry,
RETRY_CANCEL_LOOK_S = 1.0  # looked at this far apart


def submit_deadline(launch: Launch) -> float:
    """When the login node ends the launch's submit (begun at ``submit_started_at``) at the
    latest."""
    return launch.submit_started_at + SUBMIT_TIMEOUT_S


async def look_up(hold: Hold, launch: Launch) -> bool:
    """A launch left SUBMITTING: adopt the job Slurm has for it (False), or go on to
    submit when Slurm answered that it has none (True). While the cluster does not
    answer, look again later (False)."""
    try:
        found = await hold.new_jobs(launch)
    except ClusterError as exc:
        tries = await hold.store.marks.count(f"lookup:{launch.id}:{len(launch.attempts)}")
        wait_s = min(2.0**tries, MAX_LOOKUP_WAIT_S)
        log.warning("launch %s: lookup failed (%d): %s", launch.id, tries, exc)
        if tries == 1:
            facts = {"cluster": launch.cluster, "error": str(exc)}
            await hold.tell(launch.id, "lookup_unreachable", **facts)
        await hold.store.queue.requeue(launch.id, after_s=wait_s)
        return False
    if found:  # submitted before a crash or a lost connection: adopt, never resubmit
        how = "found_after_restart"
        await hold.record(launch, job_id=found[-1].job_id, how=how)
        return False
    # "No job yet" is not "never submitted" while a submit may still be in flight (its
    # worker stalled, say): look again once any such submit must have ended.
    settled_at = submit_deadline(launch) + SUBMIT_SETTLE_S
    if launch.submit_started_at and time.time() < settled_at:
        wait_s = settled_at - time.time()
        log.info("launch %s: a submit may be in flight; looking again in %.0f s", launch.id, wait_s)
        await hold.store.queue.requeue(launch.id, after_s=wait_s)
        return False
    return True


async def settle_cancelled(hold: Hold, launch: Launch) -> None:
    """A launch cancelled while a submit's outcome was unknown: cancel whatever Slurm
    has for it, and keep looking until any submit still in flight must have ended."""
    try:
        found = [j for j in await hold.new_jobs(launch) if j.active]
    except ClusterError as exc:
        log.warning("launch %s: lookup after cancel failed: %s", launch.id, exc)
        await hold.store.queue.requeue(launch.id, after_s=LOOKUP_AGAIN_S)
        return
    for job in found:
        await hold.tell(launch.id, "submitted", job=job.job_id, after_cancel=True)
        await hold.cancel_late_job(launch, job.job_id)
    settled_at = submit_deadline(launch) + SUBMIT_SETTLE_S
    if time.time() < settled_at:  # a submit still in flight could yet land
        await hold.store.queue.requeue(launch.id, after_s=settled_at - time.time())
        return

    def settled(stored: Launch) -> list[Event]:
        stored.submit_started_at = 0.0
        return []

    await hold.mutate(launch.id, settled)


async def outcome_unknown(hold: Hold, launch: Launch, exc: ClusterError) -> None:
    facts = {"cluster": launch.cluster, "error": str(exc), "wait_s": SUBMIT_SETTLE_S}
    await hold.tell(launch.id, "outcome_unknown", **facts)
    await hold.store.queue.requeue(launch.id, after_s=SUBMIT_SETTLE_S)


async def failed_submit(hold: Hold, launch: Launch, exc: SlurmCommandFailed) -> None:
    """The launcher exited with an error. nemo-run can fail after its sbatch worked,
    so Slurm is asked by the launch id before the launch is called refused."""
    try:
        found = await hold.new_jobs(launch)
    except ClusterError as lookup:
        await outcome_unknown(hold, launch, lookup)
        return
    if not found:
        await hold.reject(launch, "SUBMIT_FAILED", why="refused", output=exc.stderr or str(exc))
        return
    await hold.record(launch, job_id=found[-1].job_id, how="found_after_error")
    await hold.tell(launch.id, "launcher_error", output=exc.stderr or str(exc))


async def prepare_retry(hold: Hold, launch: Launch) -> bool:
    """Not before the backoff (a deferred entry, not a sleep); seed the tokenizer cache
    when the retry asks for it."""
    attempt = launch.attempts[-1]
    if attempt.held and not await held_retry_may_go(hold, launch):
        return False
    wait_s = attempt.not_before - time.time()
    if wait_s > 0.5:
        await hold.store.queue.requeue(launch.id, after_s=wait_s)
        return False
    if not attempt.seed_tokenizer:
        return True
    profile = hold.clusters.profile_for(launch)  # the person's own cache
    try:
        result = await seed_tokenizer_cache(hold.clusters.pool, profile)
    except ClusterError as exc:
        error = str(exc)
        facts = phases.Facts(reason=error)

        def give_up(stored: Launch) -> list[Event]:
            if not phases.allowed(stored, "retry_failed"):
                return []
            _, events = phases.retry_failed(stored, facts)
            return events + babysit.oncall(stored, "tokenizer_seed", cause=error)

        await hold.mutate(launch.id, give_up)
        return False
    await hold.tell(launch.id, "tokenizer_seeded", summary=result.summary())
    return True


async def held_retry_may_go(hold: Hold, launch: Launch) -> bool:
    """Retry's one rule: a Retry (or a reroute) holds the launch and queues it; here a
    worker cancels the old job and looks again a second later, until Slurm shows it
    gone. Gone: the new attempt goes on. Not cancelled (an error, or still there
    ``RETRY_CANCEL_WAIT_S`` after the Retry): the launch goes back to following it."""
    old = next((a.job_id for a in reversed(launch.attempts) if a.job_id), "")
    why = ""
    try:
        jobs = {j.job_id: j for j in await hold.clusters.find(launch)}
        gone = old not in jobs or not jobs[old].active
        if not gone and time.time() - launch.attempts[-1].held_at < RETRY_CANCEL_WAIT_S:
            # again each look: scancel is idempotent. A reroute's old job only while it
            # is pending: one that started meanwhile keeps running (phases.settle_move)
            moving = (
                bool(launch.attempts[-1].cluster) and launch.attempts[-1].cluster != launch.cluster
            )
            await hold.clusters.cancel(launch, [old], pending_only=moving)
            await hold.store.queue.requeue(launch.id, after_s=RETRY_CANCEL_LOOK_S)
            return False
    except ClusterError as exc:
        gone, why = False, str(exc)
    why = why or f"Slurm still shows it {RETRY_CANCEL_WAIT_S:g} s later"
    if gone:
        facts = phases.Facts(now=time.time(), job_id=old)
        stored, _ = await hold.move(launch.id, phases.old_job_gone, facts)
        if stored.cluster != launch.cluster:  # taken up again on its new cluster
            await hold.store.queue.requeue(launch.id, after_s=0.05)
            return False
        return True
    await hold.move(launch.id, phases.old_job_stays, phases.Facts(job_id=old, reason=why))
    return False


async def unreachable(hold: Hold, launch_id: str, exc: ClusterUnreachable) -> None:
    launch = await hold.store.launches.get(launch_id)
    if launch is None or not launch.active:
        return
    if launch.phase == Phase.SUBMITTING:  # something may have been submitted: look again
        await hold.store.queue.requeue(launch_id, after_s=LOOKUP_AGAIN_S)
        return
    tries = await hold.store.marks.count(f"unreachable:{launch.id}")
    if tries >= UNREACHABLE_RETRIES:
        await hold.reject(launch, "UNREACHABLE", why="unreachable", error=str(exc), tries=tries)
        return
    log.warning("launch %s: %s; retrying (%d)", launch.id, exc, tries)
    await hold.store.queue.requeue(launch.id, after_s=min(2**tries, 30))
