"""After training: ``then=export`` and ``then=eval:<tasks>`` once a launch has completed.

When the poller sees a launch end COMPLETED whose request says ``then=``, it starts
:meth:`AfterTraining.start` in the background (no poll waits on it): the launch's newest
complete checkpoint is exported to Hugging Face format, and evaluated with the site's
recipe for ``then=eval``, by one Slurm job (:mod:`cluster.launching.after_training`) submitted as
the launch's person, in the launch's container, on the launch's cluster and partition.
Its job id, its end, the exported directory and the results table (with the change
against the parent's results, for a launch started ``from=`` one, or against the mean of
the sweep's other members) go into the launch's record and its thread.

The record is only what Redis says: the checkpoint directory it names must lie under the
directories the cluster's config keeps jobs' files in (as ``from=`` asks), and the person
it runs as is derived from the config again (:meth:`Clusters.profile_for`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from bot.gateway.on_cluster import Clusters
from bot.gateway.trust import log_roots
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.planning.after_training import (
    NOT_RUN,
    asked_then,
    chosen_checkpoint,
    following,
    mean_of,
    plan_of,
    result_key,
    wants_steps,
)
from bot.planning.start_from import checkpoint_outside
from bot.store.store import Store
from cluster.errors import ClusterError
from cluster.launching import after_training as steps
from commands.after_training import eval_tasks
from commands.requests import TrainRequest

log = logging.getLogger(__name__)
LOOK_S = 10.0  # how often the step's job is asked after (one sacct as the person)
MAX_WAIT_S = 3 * 3600.0  # a step not ended by then is no longer followed (said)


class AfterTraining:
    """The steps after training, each in a task of its own; the launches to run or follow
    are kept in Redis per cluster (:meth:`Store.after_pending`), so a poller that takes a
    cluster over (or starts again) takes them up."""

    def __init__(self, store: Store, clusters: Clusters, *, look_s: float = LOOK_S) -> None:
        self.store, self.clusters, self.look_s = store, clusters, look_s
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def take_up(self, cluster: str) -> int:
        """Start a task for each pending launch of ``cluster`` that has none here."""
        started = 0
        for launch_id in await self.store.launches.after_pending(cluster):
            if launch_id in self.tasks:
                continue
            task = asyncio.create_task(self._drive(cluster, launch_id), name=f"after-{launch_id}")
            self.tasks[launch_id] = task
            task.add_done_callback(self._forget)
            started += 1
        return started

    def _forget(self, task: asyncio.Task[None]) -> None:
        self.tasks = {i: t for i, t in self.tasks.items() if t is not task}

    async def _drive(self, cluster: str, launch_id: str) -> None:
        try:
            launch = await self.store.launches.get(launch_id)
            if launch is not None and following(launch):
                await self.follow(launch_id, launch.after_job)
            elif launch is not None and wants_steps(launch):
                await self.run(launch_id)
            await self.store.launches.after_done(cluster, launch_id)
        except Exception:  # the launch has ended; only its export or evaluation is missing
            log.exception("after-training steps of %s failed", launch_id)  # tried again later

    def shutdown(self) -> None:
        for task in list(self.tasks.values()):
            task.cancel()

    async def _tell(self, launch_id: str, said: Mapping[str, object], **fields: object) -> Launch:
        """Record ``fields`` on the launch and say ``said`` (facts: what happened, worded by
        bot.wording.after_training) in its thread."""
        facts = {"move": "after_training", **said}

        def record(stored: Launch) -> list[Event]:
            for name, value in fields.items():
                setattr(stored, name, value)
            return [Event("thread", stored.id, data=facts)]

        stored, _ = await self.store.launches.mutate(launch_id, record)
        return stored

    async def run(self, launch_id: str) -> None:
        """Submit the step for the launch, follow it to its end and say what it found."""
        launch = await self.store.launches.get(launch_id)
        if launch is None or not wants_steps(launch):
            return
        request = launch.request
        then = asked_then(launch)
        assert isinstance(request, TrainRequest) and then
        tasks = eval_tasks(then)
        what = f"evaluation ({', '.join(tasks)})" if tasks else "export"  # for the log
        found = chosen_checkpoint(launch)
        if found is None:
            said: dict[str, object] = {"said": "no_checkpoint", "then": then}
            if launch.after_step is not None:
                said["at_step"] = launch.after_step
            await self._tell(launch_id, said, after_state=NOT_RUN)
            return
        tracking, name, step = found
        plan = steps.plan_step(tracking.checkpoint_dir, name, tasks)
        profile = self.clusters.profile(launch.cluster)
        problem = checkpoint_outside(plan.checkpoint, launch, profile)
        if problem:
            log.warning("launch %s: no export: %s", launch_id, problem)
            outside = {"said": "outside", "tasks": tasks, "problem": problem}
            await self._tell(launch_id, outside, after_state=NOT_RUN)
            return
        try:
            spec = self.clusters.spec_for(launch).spec
            job_name = f"{spec.job_name}-{'eval' if tasks else 'export'}"
            script = steps.step_script(
                spec, plan, model=request.model, job_name=job_name, redact=False
            )
            job_id = await steps.submit_step(self.clusters.pool, spec.profile, script)
        except (ClusterError, NotImplementedError) as exc:
            refused = {"said": "not_submitted", "tasks": tasks, "step": step, "error": str(exc)}
            await self._tell(launch_id, refused, after_state=NOT_RUN)
            return
        log.info("job=%s cluster=%s %s of launch %s", job_id, launch.cluster, what, launch_id)
        going = {"said": "submitted", "step": step, "tool": spec.fw.export_tool, "tasks": tasks}
        going |= {"job": job_id, "cluster": launch.cluster}
        await self._tell(launch_id, going, after_job=job_id)
        await self.follow(launch_id, job_id)

    async def follow(self, launch_id: str, job_id: str) -> None:
        """Wait for the step's job to end, then read its log and say what it found."""
        launch = await self.store.launches.get(launch_id)
        if launch is None:
            return
        plan = plan_of(launch)
        if plan is None:
            return
        person = self.clusters.profile_for(launch)
        pool = self.clusters.pool
        state = ""
        waited = 0.0
        while waited < MAX_WAIT_S:
            try:
                state = await steps.step_state(pool, person, job_id)
            except ClusterError as exc:
                log.warning("job=%s: state not read: %s", job_id, exc)
            if steps.ended(state):
                break
            await asyncio.sleep(self.look_s)
            waited += self.look_s
        else:
            lost = {"said": "unfollowed", "job": job_id, "hours": MAX_WAIT_S / 3600}
            await self._tell(launch_id, lost, after_state="UNFOLLOWED")
            return
        roots = log_roots(self.clusters.profile(launch.cluster))
        try:
            text = await steps.step_log(pool, person, plan.log_path(job_id), roots)
        except ClusterError as exc:
            text = ""
            log.warning("job=%s: log not read: %s", job_id, exc)
        outcome = steps.read_outcome(text)
        await self._ended(launch, job_id, state, plan, outcome, text)

    async def _ended(
        self,
        launch: Launch,
        job_id: str,
        state: str,
        plan: steps.StepPlan,
        outcome: steps.StepOutcome,
        text: str,
    ) -> None:
        exported = outcome.exported_to == plan.hf_dir or (
            bool(outcome.exported_to) and state == "COMPLETED"
        )
        results = {result_key(r): r.value for r in outcome.results}
        said: dict[str, object] = {"said": "ended", "job": job_id, "state": state}
        said |= {"exported": exported, "hf_dir": plan.hf_dir, "tasks": list(plan.tasks)}
        if plan.tasks and outcome.results:
            against, name = await self._baseline(launch)
            said["results"] = [
                {"task": r.task, "metric": r.metric, "value": r.value, "stderr": r.stderr}
                for r in outcome.results
            ]
            said |= {"against": against, "baseline": name}
        if state != "COMPLETED" or (plan.tasks and not outcome.results):
            said["tail"] = "\n".join(text.strip().splitlines()[-15:])
        await self._tell(
            launch.id,
            said,
            after_state=state,
            exported_to=plan.hf_dir if exported else "",
            eval_results=results,
        )

    async def _baseline(self, launch: Launch) -> tuple[dict[str, float], str]:
        """What the results are compared with: the parent's (from=), else the mean of the
        sweep's other members that have results; ({}, "") when neither has any."""
        if launch.starts_from:
            parent = await self.store.launches.get(launch.starts_from)
            if parent is not None and parent.eval_results:
                return dict(parent.eval_results), parent.id
        if launch.sweep:
            sweep = await self.store.launches.get_sweep(launch.sweep)
            if sweep is not None:
                others = [
                    m
                    for m in await self.store.launches.get_many(sweep.members)
                    if m is not None and m.id != launch.id and m.eval_results
                ]
                if others:
                    return mean_of(others), f"the sweep's others (mean of {len(others)})"
        return {}, ""
