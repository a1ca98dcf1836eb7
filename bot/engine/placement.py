"""``cluster=auto``: ask each cluster that could take a launch when Slurm would start it
(``sbatch --test-only``, all at once, nothing submitted), and pick the first
(:func:`commands.placement.choose`; ties go to the config's order)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection

from bot.engine.asks import ClusterCalls
from bot.engine.authority import Authority
from bot.engine.cost import StartEstimates, estimate_shape
from bot.engine.on_cluster import Clusters
from bot.lifecycle import phases
from bot.lifecycle.launch import Launch, Phase, Terms
from bot.lifecycle.render import duration
from bot.store.store import Store
from bot.text.mrkdwn import escape
from cluster.errors import ClusterError, CommandTimeout
from commands.access import slurm_account
from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.placement import NOW_TOLERANCE_S, Answer, choose
from commands.requests import InteractiveRequest, TrainRequest
from commands.train import auto_fits

PLACE_TIMEOUT_S = 10.0  # each cluster's answer is waited for at most this long
HELD_MOVE_CHECK_S = 60.0  # a move cut short: a worker checks on the old job after this

log = logging.getLogger(__name__)

ClusterUser = Callable[[str, User], Awaitable[str]]


async def ask(
    clusters: Clusters,
    calls: ClusterCalls,
    context: CommandContext,
    estimates: StartEstimates,
    request: TrainRequest | InteractiveRequest,
    user: User,
    name: str,
    cluster_user: ClusterUser,
    *,
    timeout_s: float = PLACE_TIMEOUT_S,
) -> Answer:
    """When Slurm would start ``request`` on cluster ``name`` (as the person's Unix
    user there, with their Slurm account), or why it cannot say; ``calls`` asks (the
    clusters themselves, or a worker for a process without SSH keys)."""
    try:
        unix_user = await cluster_user(name, user)
    except CommandError as exc:
        return Answer(name, None, str(exc).rstrip("."))
    profile = clusters.profile(name)
    account = slurm_account(context.policy, user_id=user.id, group_ids=user.groups, cluster=name)
    task = estimates.ask(
        calls,
        name,
        estimate_shape(request, profile, account),
        user_id=user.id,
        cluster_user=unix_user,
        timeout_s=timeout_s,
        groups=user.groups,
    )
    try:
        estimate = await asyncio.shield(task)
    except CommandTimeout:
        return Answer(name, None, f"no answer within {timeout_s:g} s")
    except ClusterError as exc:
        return Answer(name, None, str(exc)[:200])
    if estimate.start is None:
        return Answer(name, None, estimate.error or "Slurm cannot place it")
    wait = estimate.wait_s
    return Answer(name, wait if wait is not None else max(0.0, estimate.start - time.time()))


async def place(
    clusters: Clusters,
    calls: ClusterCalls,
    context: CommandContext,
    estimates: StartEstimates,
    request: TrainRequest | InteractiveRequest,
    user: User,
    cluster_user: ClusterUser,
    *,
    only: Collection[str] | None = None,
    left_out: str = "",
    timeout_s: float = PLACE_TIMEOUT_S,
) -> tuple[str, str, bool]:
    """The cluster ``cluster=auto`` picks for ``request``, why ("a3u: now; a4: in
    2 h 10 min") and whether Slurm would start it there now; CommandError saying why
    none. ``only``: the clusters it may pick from, ``left_out`` saying why the others
    are not (``from=`` needs its parent's; a reroute, another)."""
    found = auto_fits(context, user, nodes=request.nodes, image=request.image)
    names = [f.cluster for f in found if not f.why and (only is None or f.cluster in only)]
    if not names:
        why = "; ".join(f"{f.cluster}: {f.why or left_out}" for f in found)
        raise CommandError(
            f"cluster=auto: no cluster can take this launch ({why}). Give cluster=<name>.",
            field="cluster",
        )
    answers = await asyncio.gather(
        *(
            ask(
                clusters,
                calls,
                context,
                estimates,
                request,
                user,
                n,
                cluster_user,
                timeout_s=timeout_s,
            )  # fmt: skip
            for n in names
        )
    )
    chosen = choose(answers)
    if chosen is None:
        why = "; ".join(f"{a.cluster}: {a.problem}" for a in answers)
        raise CommandError(
            f"cluster=auto: Slurm can place this launch on none of the clusters you may use "
            f"({why}). Give cluster=<name> to queue it on one anyway.",
            field="cluster",
        )
    name, why = chosen
    best = next(a for a in answers if a.cluster == name)
    return name, why, best.wait_s is not None and best.wait_s <= NOW_TOLERANCE_S


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
    store: Store,
    clusters: Clusters,
    cluster: str,
    estimates: StartEstimates,
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
    policy = clusters.config.policy
    after_s = policy.placement.reroute_after_s
    if after_s is None:
        return 0
    context = CommandContext(
        clusters=clusters.profiles, catalog=clusters.config.catalog, policy=policy
    )
    moved = 0
    now = time.time()
    for launch in await store.launches.get_many(await store.history.tracked_ids(cluster)):
        if launch is None or not _due(launch, after_s, now):
            continue
        user = await authority.user(launch)
        others = [name for name in clusters.profiles if name != cluster]
        try:
            target, why, now_there = await place(
                clusters,
                clusters,
                context,
                estimates,
                launch.request,
                user,
                authority.people.cluster_user,
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
            text = (
                f"🔀 Still pending on {cluster}; {target} would start it now, but it was not "
                f"moved there: {answer.why}"
            )
            facts = phases.Facts(cluster=target, text=text)
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
    text = (
        f"🔀 Still pending on {left} after {duration(after_s)} while {target} would start it "
        f"now ({escape(why)}): cancelled job {old_job} there before it started and moved "
        f"the launch to {target}, once; its GPU-hour estimate counts on {target} now."
    )
    facts = phases.Facts(now=time.time(), job_id=old_job, text=text)
    moved, _ = await store.launches.mutate(launch.id, phases.step(phases.moved, facts))
    return moved.cluster == target
