"""A failed job's evidence and what it shows: read from everything the job left
(:func:`cluster.watching.evidence.gather`, one SSH round trip); when that names no known
cause, read once more after ``watch.evidence_reread_s`` (shared file systems lag) before
"unknown" stands. The node a diagnosis names as faulty goes into the node ledger."""

from __future__ import annotations

import logging
import time

from bot.gateway.on_cluster import Clusters
from bot.gateway.trust import log_roots
from bot.lifecycle.launch import Launch
from bot.store.base import StoreError
from bot.store.nodes import NodeEntry
from bot.store.store import Store
from cluster.site.profiles import ClusterProfile
from cluster.watching.collector import JobSnapshot
from cluster.watching.diagnosis import UNKNOWN, Diagnosis, diagnose
from cluster.watching.evidence import gather
from cluster.watching.tracking import Tracking

log = logging.getLogger(__name__)


class Diagnoser:
    """The poller's reader of failed jobs' evidence, with when each "unknown" was first read."""

    def __init__(self, clusters: Clusters) -> None:
        self.clusters = clusters
        self.unknown_at: dict[tuple[str, str], float] = {}  # (cluster, job): first "unknown" read

    async def diagnose(
        self, profile: ClusterProfile, job: Tracking, snap: JobSnapshot
    ) -> Diagnosis | None:
        """What the failed job's evidence shows; None while an "unknown" waits to be read
        again. The second read happens once ``watch.evidence_reread_s`` has passed, not at
        every poll in between."""
        key = (profile.name, job.job_id)
        first = self.unknown_at.get(key)
        delay_s = self.clusters.config.watch.evidence_reread_s
        if first is not None and time.monotonic() - first < delay_s:
            return None
        catalog = self.clusters.config.failure_catalog
        evidence = await gather(
            self.clusters.pool,
            profile.login,
            job,
            state=snap.state or "",
            record=snap.acct,
            cluster=profile.name,
            catalog=catalog,
            roots=log_roots(profile),
        )
        found = diagnose(evidence, catalog)
        if found is not None and found.kind is UNKNOWN and first is None and delay_s > 0:
            self.unknown_at[key] = time.monotonic()
            log.info(
                "job %s: no known cause in %s; reading again in %.0f s",
                job.job_id,
                evidence.describe_read(),
                delay_s,
            )
            return None
        self.unknown_at.pop(key, None)
        return found


async def record_faulty_node(
    store: Store, cluster: str, launch: Launch, job_id: str, diagnosis: Diagnosis, now: float
) -> None:
    """The node the diagnosis names as faulty goes into the node ledger (once per job)."""
    node = diagnosis.failed_node or ""
    entry = NodeEntry(
        at=now,
        launch_id=launch.id,
        job_id=job_id,
        cause_key=diagnosis.key,
        cause=diagnosis.cause[:300],
    )
    try:
        if await store.nodes.record_node(cluster, node, entry):
            log.info("node=%s cluster=%s job=%s in the node ledger", node, cluster, job_id)
    except (StoreError, ValueError) as exc:  # the launch moved on; only the ledger lacks it
        log.warning("node %s of job %s not written to the ledger: %s", node, job_id, exc)
