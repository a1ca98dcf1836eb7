"""Thousands of tracked launches on four dev nodes, and what tracking them costs
(P2: Slurm RPCs per minute against nemo-run's status path; P5: the bot's memory,
Redis bytes per launch and one poll's wall time).

How the launches are made: each is a ``/train dpo llama3p1_8b cluster=<c>
name=<tag>-fleet`` parsed by the bot's own command parser into a ``Launch``; its
Slurm job is submitted by the launch path's own plan (``Clusters.spec_for`` ->
``plan_launch``: the same ``sbatch ... launch.sh`` script the worker sends on
stdin to ``bash -l -s``) with ``--hold`` added after ``sbatch``, 250 launches per
SSH round trip; the job id is read from sbatch's answer by the framework's own
``tracking()``; and the launch is stored with ``store.launches.create`` and moved to
SUBMITTED with the attempt and tracking record exactly as the worker records a
submission (``store.launches.mutate``; no thread messages are written for them). The
poller then tracks them as it tracks any launch: held jobs stay PENDING and
use no node.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass

from bench.common import job_info_rpcs, slurm_counters
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.settings.config import Config
from bot.settings.env import Settings
from bot.store.store import Store
from cluster.launching.launch import LaunchPlan, plan_launch
from commands.context import User
from commands.dispatch import parse_command

BATCH = 250
FLEET_USER = "U0BENCHFLEET"
MARK = "@@bench-launch "


@dataclass
class Window:
    seconds: float
    ctld: int  # slurmctld job-information RPCs
    dbd: int  # slurmdbd job queries (sacct)
    extra: dict[str, float]

    @property
    def per_minute(self) -> float:
        return (self.ctld + self.dbd) * 60 / self.seconds if self.seconds else 0.0


async def window(seconds: float) -> Window:
    before = slurm_counters()
    started = time.monotonic()
    await asyncio.sleep(seconds)
    after = slurm_counters()
    ctld, dbd = job_info_rpcs(before, after)
    return Window(time.monotonic() - started, ctld, dbd, {})


class Fleet:
    """Held launches on one cluster, grown in steps; their job ids kept for cleanup."""

    def __init__(
        self, config: Config, store: Store, clusters: Clusters, *, cluster: str, tag: str
    ) -> None:
        self.config, self.store, self.clusters = config, store, clusters
        self.cluster, self.tag = cluster, tag
        self.job_ids: list[str] = []
        self.launch_ids: list[str] = []
        self.submit_s = 0.0

    def _launch(self) -> Launch:
        request = parse_command(
            "/train",
            f"dpo llama3p1_8b cluster={self.cluster} name={self.tag}-fleet",
            user=User(id=FLEET_USER, name="bench"),
            context=self.config.command_context(),
        )
        return Launch(request=request, user_id=FLEET_USER, user_name="bench", channel="C0BENCH")

    def _held_plan(self, launch: Launch) -> LaunchPlan:
        plan = plan_launch(self.clusters.spec_for(launch).spec)
        argv = list(plan.argv)
        if argv[0] != "sbatch":
            raise ValueError("the fleet is made of NeMo-RL launches (sbatch)")
        return LaunchPlan(spec=plan.spec, argv=(argv[0], "--hold", *argv[1:]))

    async def grow(self, total: int) -> None:
        while len(self.job_ids) < total:
            count = min(BATCH, total - len(self.job_ids))
            launches = [self._launch() for _ in range(count)]
            plans = {launch.id: self._held_plan(launch) for launch in launches}
            script = "".join(
                f"echo '{MARK}{lid}'\n( {plan.script(redact=False)} ) 2>&1 || true\n"
                for lid, plan in plans.items()
            )
            profile = self.clusters.profile(self.cluster)
            started = time.monotonic()
            result = await self.clusters.pool.run(
                profile.login, "bash -l -s", input=script, timeout_s=600, cluster=self.cluster
            )
            self.submit_s += time.monotonic() - started
            outputs = _split(result.stdout)
            records = []
            for launch in launches:
                spec = plans[launch.id].spec
                tracking = spec.fw.tracking(spec, outputs.get(launch.id, ""))  # raises if refused
                self.job_ids.append(tracking.job_id)
                records.append((launch, tracking))
            for start in range(0, len(records), 50):
                await asyncio.gather(
                    *(self._store(one, t) for one, t in records[start : start + 50])
                )

    async def _store(self, launch: Launch, tracking: object) -> None:
        await self.store.launches.create(launch, [], enqueue=False)

        def submitted(stored: Launch) -> list[Event]:  # as the worker records a submission
            attempt = Attempt(number=1, job_id=tracking.job_id, submitted_at=time.time())  # type: ignore[attr-defined]
            attempt.tracking = tracking  # type: ignore[assignment]
            stored.attempts.append(attempt)
            stored.phase = Phase.SUBMITTED
            return []

        await self.store.launches.mutate(launch.id, submitted)
        self.launch_ids.append(launch.id)


def _split(stdout: str) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    current = ""
    for line in stdout.splitlines():
        if line.startswith(MARK):
            current = line[len(MARK) :].strip()
            out[current] = []
        elif current:
            out[current].append(line)
    return {k: "\n".join(v) + "\n" for k, v in out.items()}


# nemo-run 0.11.1's status path, per job: SlurmTunnelScheduler.describe() runs
# ``sacct --parsable2 -j <id>`` through its tunnel (a LocalTunnel on the login node:
# invoke runs it with bash -c), and Runner.wait(app_handle, wait_interval=2) asks
# again every 2 s for each job it waits on. Experiment.status() asks twice per job.
NEMO_RUN_STATUS = """
import json, subprocess, sys, time

def main(args):
    ids, end, interval = args["ids"], time.monotonic() + args["window_s"], args["interval_s"]
    calls = sweeps = 0
    while time.monotonic() < end:
        began = time.monotonic()
        for job_id in ids:
            if time.monotonic() >= end:
                break
            subprocess.run(["/bin/bash", "-c", f"sacct --parsable2 -j {job_id}"],
                           capture_output=True, text=True)
            calls += 1
        else:
            sweeps += 1
        rest = min(interval - (time.monotonic() - began), end - time.monotonic())
        if rest > 0:
            time.sleep(rest)
    print(json.dumps({"calls": calls, "sweeps": sweeps}))
"""


async def nemo_run_window(
    clusters: Clusters, cluster: str, job_ids: list[str], seconds: float
) -> Window:
    """nemo-run's status path for ``job_ids`` for ``seconds``, on the login node."""
    profile = clusters.profile(cluster)
    args = {"ids": job_ids, "window_s": seconds, "interval_s": 2.0}
    script = f"{NEMO_RUN_STATUS}\nmain(json.loads({json.dumps(json.dumps(args))}))\n"
    before = slurm_counters()
    started = time.monotonic()
    result = await clusters.pool.run(
        profile.login, "python3 -", input=script, timeout_s=seconds + 120, cluster=cluster
    )
    elapsed = time.monotonic() - started
    after = slurm_counters()
    ctld, dbd = job_info_rpcs(before, after)
    done = json.loads(result.stdout.strip().splitlines()[-1])
    return Window(elapsed, ctld, dbd, {"sacct_calls": done["calls"], "sweeps": done["sweeps"]})


def clusters_for(config: Config, pool: object) -> Clusters:
    settings = Settings.from_environ({"TRAINBOT_HF_TOKEN": "hf_bench_placeholder_value"})
    return Clusters(config, settings, pool)  # type: ignore[arg-type]


JOB_ID = re.compile(r"Slurm job (\d+)")
