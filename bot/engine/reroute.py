"""Moving a launch still pending where another cluster would start it now
(``policy.placement.reroute_after_s``): the poller's pass over a cluster it holds, each
move admitted again (:class:`~bot.gateway.authority.Authority`) and done once."""

from __future__ import annotations

import logging
import time

from bot.gateway.authority import Authority
from bot.gateway.on_cluster import Clusters
from bot.lifecycle import phases
from bot.lifecycle.launch import Launch, Phase, Terms
from bot.planning.planner import PLACE_TIMEOUT_S, Planner
from bot.store.store import Store
from commands.errors import CommandError

HELD_MOVE_CHECK_S = 60.0  # a move cut short: a worker checks on the old job after this

log = logging.getLogger(__name__)


def _due(launch: Launch, after_s: float, now: float) -> bool:
    """Placed by cluster=auto, not moved yet, and its job still pending ``after_s`` on; one
    that starts from a parent's checkpoint (``from=``) stays on the parent's cluster."""
    attempt = launch.attempt
    return (
        bool(launch.placed)
        and not launch.starts_from
        and not launch.rerouted
        and not launch.cancelled_by
        and launch.phase == Phase.SUBMITTED
        and attempt is not None
        and bool(attempt.job_id)
        and not attempt.started_at
        and 0 < attempt.submitted_at <= now - after_s
    )


async def reroute(
    planner: Planner,
    cluster: str,
    authority: Authority,
    *,
    timeout_s: float = PLACE_TIMEOUT_S,
) -> int:
    """``policy.placement.reroute_after_s``: move each launch of ``cluster`` that is due
    (:func:`_due`) to another cluster that fits it and where Slurm would start it now,
    once: its job is cancelled only while still PENDING (``scancel --state=PENDING``),
    and only once Slurm shows it gone is a new attempt queued there, which a worker
    submits exactly once (the launch's lock, fence and look-up). The move is admitted
    as /train was (``authority``: the person's groups now, the policy, the identity map
    and budget of the target), and the launch runs there as the Unix user, with the
    account and secrets, derived for the target; where the target refuses the person,
    it stays and its thread says why. Returns how many moved."""
    store, clusters = planner.store, planner.clusters
    after_s = planner.context.policy.placement.reroute_after_s
    if after_s is None:
        return 0
    moved = 0
    now = time.time()
    for launch in await store.launches.get_many(await store.history.tracked_ids(cluster)):
        if launch is None or not _due(launch, after_s, now):
            continue
        user = await authority.user(launch)
        others = [name for name in clusters.profiles if name != cluster]
        try:
            target, why, now_there = await planner.place(
                launch.request,
                user,
                only=others,
                left_out="where it waits now",
                timeout_s=timeout_s,
            )
        except CommandError as exc:
            log.info("launch %s pending on %s, not moved: %s", launch.id, cluster, exc)
            continue  # no other cluster can take it: it stays
        if not now_there:
            log.info("launch %s pending on %s, not moved: %s", launch.id, cluster, why)
            continue  # nowhere would start it now either
        answer = await authority.readmit(launch, target)
        if answer.outcome == "UNSURE":
            continue  # Slack did not say the person's groups: asked again next pass
        if answer.outcome == "OVER_BUDGET":
            log.info(
                "launch %s pending on %s, not moved: over budget on %s", launch.id, cluster, target
            )
            continue  # the person's budget there has no room for its estimate
        if not answer.allowed:
            facts = phases.Facts(cluster=target, data={"left": cluster, **answer.facts()})
            await store.launches.mutate(launch.id, phases.step(phases.move_refused, facts))
            continue
        if await _move(store, clusters, launch, target, why, after_s, answer.terms):
            moved += 1
    return moved


async def _move(
    store: Store,
    clusters: Clusters,
    launch: Launch,
    target: str,
    why: str,
    after_s: float,
    terms: Terms,
) -> bool:
    old_job, left = launch.job_id, launch.cluster
    later = time.time() + HELD_MOVE_CHECK_S
    facts = phases.Facts(job_id=old_job, cluster=target, due=later, terms=terms)
    held, _ = await store.launches.mutate(launch.id, phases.step(phases.reroute, facts))
    if held.phase != Phase.RETRYING or not held.attempts[-1].held:
        return False
    problem = await clusters.cancel_and_confirm(held, old_job, pending_only=True)
    if problem:  # it started meanwhile (scancel left it), or Slurm did not answer
        log.info("launch %s not moved to %s: %s", launch.id, target, problem)
        await store.launches.mutate(launch.id, phases.step(phases.old_job_stays, phases.Facts()))
        return False
    facts = phases.Facts(
        now=time.time(),
        job_id=old_job,
        data={"left": left, "waited_s": after_s, "why": why},
    )
    moved, _ = await store.launches.mutate(launch.id, phases.step(phases.moved, facts))
    return moved.cluster == target
