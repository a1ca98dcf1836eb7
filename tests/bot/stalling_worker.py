"""``trainbot serve --role worker`` for tests/bot/e2e/test_worker_stall.py: the worker's timings
shortened (lock, claim, submit bound) so a takeover happens in seconds, and, with
``STALL_BEFORE_SUBMIT=1``, the process stops itself (SIGSTOP) once, right before its
first submit reaches the login node: after every check a worker makes, the worst place
to stall. The test sends SIGCONT."""

from __future__ import annotations

import os
import signal

from bot.engine import recovery, worker
from bot.gateway.on_cluster import Clusters
from bot.runtime.cli import main
from cluster.launching.launch import Submission
from cluster.launching.spec import LaunchSpec

worker.LAUNCH_LOCK_MS = 3000
worker.LOCK_RENEW_S = 1.0
worker.CLAIM_IDLE_MS = 3000
worker.CLAIM_EVERY_S = 1.0
# recovery reads the SUBMIT_TIMEOUT_S it imported (cluster.launching.launch), so that name
# is the one to set
recovery.SUBMIT_TIMEOUT_S = float(  # type: ignore[attr-defined]
    os.environ.get("STALL_SUBMIT_TIMEOUT_S", "15")
)
recovery.SUBMIT_SETTLE_S = 5.0

if os.environ.get("STALL_BEFORE_SUBMIT") == "1":
    submit = Clusters.submit
    stalled: list[str] = []

    async def stalling_submit(self: Clusters, spec: LaunchSpec) -> Submission:
        if not stalled:
            stalled.append(spec.launch_id)
            os.kill(os.getpid(), signal.SIGSTOP)
        return await submit(self, spec)

    Clusters.submit = stalling_submit  # type: ignore[method-assign]

raise SystemExit(main(["serve", "--role", "worker"]))
