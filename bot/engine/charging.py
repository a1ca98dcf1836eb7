"""Charging what launches used: every GPU-hour once, as Slurm's accounting recorded it.

However a launch ends (its job's end, a cancel, a retry refused at pre-flight, a
give-up, a dead letter), the transaction that ends it marks it uncharged
(:meth:`bot.store.launches.Launches._ran`). The poller of its cluster then asks ``sacct`` what
all the launch's jobs used, every incarnation of each (``ElapsedRaw`` times the GPUs
of ``AllocTRES``), and once every job has ended charges that figure to its owner's
week in one transaction that also marks the launch charged
(:meth:`bot.store.budgets.Budgets.charge`): asked twice, after a restart or by two pollers,
a launch is charged once. Until then its estimate stays held against the budget.
"""

from __future__ import annotations

import logging
import time

from bot.gateway.on_cluster import Clusters
from bot.store.store import Store
from cluster.errors import ClusterError
from cluster.launching.launch import SUBMIT_TIMEOUT_S

log = logging.getLogger(__name__)

SUBMIT_SETTLED_S = SUBMIT_TIMEOUT_S + 60.0  # a submit started longer ago has ended either way
GIVE_UP_S = 24 * 3600.0  # sacct still without an end for a job: charge what it shows by then


async def charge_ended(store: Store, clusters: Clusters, cluster: str) -> int:
    """Charge the launches of ``cluster`` that ended and whose jobs have all ended in
    Slurm's accounting; the others wait for a later call. Returns how many were charged."""
    charged = 0
    for launch_id, ended_at in sorted((await store.budgets.uncharged(cluster)).items()):
        launch = await store.launches.get(launch_id)
        now = time.time()
        if launch is None or launch.charged or launch.active:
            await store.budgets.charge(launch_id, cluster, 0.0)  # nothing to charge: stop waiting
            continue
        if launch.submit_started_at and now - launch.submit_started_at < SUBMIT_SETTLED_S:
            continue  # a submit may still land a job
        try:
            usage = await clusters.usage(launch)
        except ClusterError as exc:
            log.warning("launch %s: GPU-hours not read from sacct yet: %s", launch_id, exc)
            continue
        if not usage.final:
            if now - ended_at < GIVE_UP_S:
                continue
            log.warning(
                "launch %s: charged as far as sacct shows after %.0f h (not recorded: %s; "
                "not ended: %s)",
                launch_id,
                GIVE_UP_S / 3600,
                ", ".join(usage.missing) or "none",
                ", ".join(usage.running) or "none",
            )
        if await store.budgets.charge(launch_id, cluster, usage.gpu_hours):
            charged += 1
            log.info(
                "launch %s charged %.4f GPU-hours (sacct: jobs %s)",
                launch_id,
                usage.gpu_hours,
                ", ".join(usage.jobs) or "none",
            )
    return charged
