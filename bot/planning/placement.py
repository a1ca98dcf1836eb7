"""``cluster=auto``: ask each cluster that could take a launch when Slurm would start it
(``sbatch --test-only``, all at once, nothing submitted), and pick the first
(:func:`commands.placement.choose`; ties go to the config's order)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection

from bot.gateway.asks import ClusterCalls
from bot.gateway.on_cluster import Clusters
from bot.planning.cost import StartEstimates, estimate_shape
from cluster.errors import ClusterError, CommandTimeout
from commands.access import slurm_account
from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.placement import NOW_TOLERANCE_S, Answer, choose
from commands.requests import InteractiveRequest, TrainRequest
from commands.train import auto_fits

PLACE_TIMEOUT_S = 10.0  # each cluster's answer is waited for at most this long

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
