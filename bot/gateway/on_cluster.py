"""The bot's view of its clusters: a launch in, cluster-layer calls out.

Builds a :class:`~cluster.LaunchSpec` from a stored launch (recipe from
the catalog, secrets from the settings) and holds the shared SSH pool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from dataclasses import dataclass, field

from pydantic import SecretStr

from bot.gateway.trust import log_path_problem, log_roots, user_problem
from bot.lifecycle.launch import Launch
from bot.settings.config import Config
from bot.settings.env import Settings
from bot.settings.logs import launch_fields
from bot.store.store import Store
from cluster.errors import ClusterError, PersonRefused
from cluster.images.jobs import ImageJob, JobState, image_job_state, submit_image_job
from cluster.images.listing import ImageListing, list_images
from cluster.launching import jobs, wandb_run
from cluster.launching import launch as plans
from cluster.launching.spec import LaunchSpec, interactive_framework
from cluster.preflight import checks
from cluster.preflight.discovery import ClusterCapacity, cluster_capacity, start_estimate
from cluster.site.accounts import Account, lookup_account
from cluster.site.launcher_options import LauncherOptions
from cluster.site.login import cert_key_id
from cluster.site.nodes import NodeAction, update_node
from cluster.site.profiles import ClusterProfile
from cluster.slurm.sacct import Usage
from cluster.slurm.sbatch import JobShape, StartEstimate
from cluster.ssh.pool import SSHPool
from cluster.watching.checkpoint_files import delete_checkpoints
from commands.access import is_custom_image
from commands.requests import TrainRequest

log = logging.getLogger(__name__)
LAUNCHER_TTL_S = 6 * 3600  # how long what a launcher's --help listed is trusted


@dataclass
class Spec:
    spec: LaunchSpec
    notes: list[str] = field(default_factory=list)  # e.g. a secret that is not configured


def job_comment(launch: Launch) -> str:
    """What Slurm's ``--comment`` says about a launch: which launch, and whose."""
    who = re.sub(r"[^A-Za-z0-9._@-]", "", launch.user_id)[:40] or "unknown"
    return f"trainbot {launch.id} by {who}"


def wandb_env(launch: Launch, cluster: str) -> dict[str, str]:
    """The W&B variables of a launch's job (:mod:`cluster.launching.wandb_run`): one run for
    every attempt, the sweep as its group, tagged with the launch, the cluster and the owner's
    name."""
    owner = launch.cluster_user or launch.user_name or launch.user_id
    return wandb_run.run_env(
        launch.id, cluster=cluster, owner=owner, sweep=launch.sweep, notes=launch.request.to_text()
    )


CANCEL_CONFIRM_TRIES = 15  # seconds to wait for a cancelled job to leave the queue


class Clusters:
    def __init__(
        self, config: Config, settings: Settings, pool: SSHPool, store: Store | None = None
    ) -> None:
        self.config = config
        self.settings = settings
        self.pool = pool
        self.store = store  # where what each launcher accepts is kept between processes
        self._launchers: dict[tuple[str, str], tuple[float, LauncherOptions]] = {}

    @property
    def profiles(self) -> dict[str, ClusterProfile]:
        return dict(self.config.clusters)

    def profile(self, name: str) -> ClusterProfile:
        try:
            return self.config.clusters[name]
        except KeyError:
            raise ClusterError(f"unknown cluster {name!r}", cluster=name) from None

    def profile_for(self, launch: Launch) -> ClusterProfile:
        """The launch's cluster as its person: logged in as their Unix user, with
        certificates whose key id names them and the launch. The record's Unix user is
        checked against the config first (a record is only what Redis says): one the
        config cannot give its person is refused (PersonRefused), nothing is run."""
        profile = self.profile(launch.cluster)
        problem = user_problem(profile, launch.user_id, launch.cluster_user)
        if problem:
            log.warning(
                "launch %s refused: its record says it runs as %r on %s, but %s",
                launch.id, launch.cluster_user or profile.login.user, launch.cluster, problem,
                extra=launch_fields(launch.id, cluster=launch.cluster),
            )  # fmt: skip
            raise PersonRefused(
                f"launch {launch.id} is not run: its record names the Unix user "
                f"{launch.cluster_user or profile.login.user}, and {problem}",
                cluster=launch.cluster,
            )
        key_id = cert_key_id(launch.user_id, launch.cluster_user, launch.id)
        return profile.as_user(launch.cluster_user, key_id)

    def profile_of_person(
        self, cluster: str, user_id: str, cluster_user: str, work_id: str
    ) -> ClusterProfile:
        """``cluster`` as the Unix user a record (an image run's) names for ``user_id``,
        checked against the config first as :meth:`profile_for` checks a launch's: one the
        config cannot give them is refused (PersonRefused), nothing is run."""
        profile = self.profile(cluster)
        problem = user_problem(profile, user_id, cluster_user)
        if problem:
            log.warning(
                "%s refused: its record says it runs as %r on %s, but %s",
                work_id, cluster_user or profile.login.user, cluster, problem,
            )  # fmt: skip
            raise PersonRefused(
                f"{work_id} is not run: its record names the Unix user "
                f"{cluster_user or profile.login.user}, and {problem}",
                cluster=cluster,
            )
        return profile.as_user(cluster_user, cert_key_id(user_id, cluster_user, work_id))

    async def submit_image_job(self, profile: ClusterProfile, job: ImageJob) -> str:
        """Submit an image job (``profile``: as its person); its Slurm job id."""
        return await submit_image_job(self.pool, profile, job)

    async def image_job_state(
        self, profile: ClusterProfile, job: ImageJob, job_id: str
    ) -> JobState:
        return await image_job_state(self.pool, profile, job, job_id)

    def secrets(self, profile: ClusterProfile) -> tuple[dict[str, SecretStr], list[str]]:
        """The profile's ``{env: NAME}`` job secrets from the bot's environment, by job
        variable, and a note for each one that is unset (the launch goes on without it).
        ``{file: PATH}`` secrets are read on the login node, by the launch script."""
        values: dict[str, SecretStr] = {}
        notes = []
        for job_name, ref in profile.job_secrets.items():
            if ref.env is None:
                continue
            value = self.settings.env_secret(ref.env)
            if value is None:
                notes.append(
                    f"{job_name} is not configured for {profile.name} ({ref.env} is unset)"
                )
            else:
                values[job_name] = value
        return values, notes

    def spec_for(self, launch: Launch) -> Spec:
        profile = self.profile_for(launch)
        req = launch.request
        custom = is_custom_image(req.image, {*profile.images, *profile.images.values()})
        # policy.custom_images: no job secrets (env or file)
        if custom and not launch.image_secrets:
            profile = profile.model_copy(update={"job_secrets": {}})
        withheld: list[str] = []
        if launch.cluster_user and profile.identity is not None:  # a person's own job
            people = profile.people_secrets()  # identity.org_secrets: the bot's, if allowed
            withheld = sorted(set(profile.job_secrets) - set(people))
            profile = profile.model_copy(update={"job_secrets": people})
        if launch.slurm_account:  # policy.accounts: the person's Slurm account
            profile = profile.model_copy(update={"account": launch.slurm_account})
        secrets, notes = self.secrets(profile)
        notes += [
            f"{name} is the organisation's and not given to people's jobs on {profile.name} "
            "(identity.org_secrets)"
            for name in withheld
        ]
        if isinstance(req, TrainRequest):
            recipe = self.config.catalog.find(req.workload, req.model, req.framework)
            if recipe is None:
                raise ClusterError(
                    f"no recipe for {req.workload} {req.model} ({req.framework})",
                    cluster=profile.name,
                )
            spec = LaunchSpec.from_recipe(
                profile,
                recipe,
                launch_id=launch.id,
                nodes=req.nodes,
                partition=req.partition,
                time_limit=req.time,
                name=req.name,
                image=req.image,
                overrides=tuple(req.overrides),
                env=wandb_env(launch, profile.name),
                secrets=secrets,
                comment=job_comment(launch),
            )
            if launch.start_key and not launch.checkpoints:  # from=, until it saved its own
                spec = dataclasses.replace(spec, start_from=(launch.start_key, launch.start_path))
        else:
            spec = LaunchSpec(
                profile=profile,
                launch_id=launch.id,
                framework=interactive_framework().name,
                nodes=req.nodes,
                partition=req.partition,
                time_limit=req.time,
                name=req.name,
                image=req.image,
                interactive=True,
                comment=job_comment(launch),
                env=wandb_env(launch, profile.name),
                secrets=secrets,
            )
        return Spec(self._for_attempt(launch, spec), notes)

    def _for_attempt(self, launch: Launch, spec: LaunchSpec) -> LaunchSpec:
        """A retry keeps away from a failed node and resumes from the older checkpoints."""
        attempt = launch.attempt
        if attempt is None or attempt.job_id:
            return spec
        changes: dict[str, object] = {}
        if attempt.exclude:
            changes["exclude"] = attempt.exclude
        earlier = [a.tracking for a in launch.attempts[:-1] if a.tracking is not None]
        if attempt.resume and earlier:
            changes["overrides"] = spec.fw.retry_overrides(
                spec.overrides, earlier[-1], spec.profile
            )
        return dataclasses.replace(spec, **changes) if changes else spec  # type: ignore[arg-type]

    async def preflight(self, spec: LaunchSpec) -> checks.PreflightResult:
        spec = await self.fitted(spec)
        result = await checks.preflight(self.pool, spec)
        await self.remember(spec, result)
        return result

    async def dry_run(self, spec: LaunchSpec) -> checks.DryRun:
        spec = await self.fitted(spec)
        dry = await checks.dry_run(self.pool, spec)
        await self.remember(spec, dry.preflight)
        return dry

    async def submit(self, spec: LaunchSpec) -> plans.Submission:
        return await plans.submit(self.pool, plans.plan_launch(await self.fitted(spec)))

    @staticmethod
    def _launcher_key(spec: LaunchSpec) -> tuple[str, str]:
        return spec.cluster, f"{spec.framework}@{spec.profile.login.user}"

    async def fitted(self, spec: LaunchSpec) -> LaunchSpec:
        """The spec with what its launcher accepts, when pre-flight or ``doctor`` learned it
        (kept here and in Redis for :data:`LAUNCHER_TTL_S`); as given while it is not known,
        so that pre-flight reads the launcher's ``--help`` in its round trip."""
        if spec.launcher is not None or not spec.fw.help_argv:
            return spec
        key = self._launcher_key(spec)
        held = self._launchers.get(key)
        options = held[1] if held and time.time() - held[0] < LAUNCHER_TTL_S else None
        if options is None and self.store is not None:
            raw = await self.store.history.launcher_options(*key)
            options = LauncherOptions.decode(raw) if raw else None
            if options is not None:
                self._launchers[key] = (time.time(), options)
        return dataclasses.replace(spec, launcher=options) if options else spec

    async def remember(self, spec: LaunchSpec, result: checks.PreflightResult) -> None:
        """Keep what pre-flight learned of the launcher (read from its ``--help``)."""
        if spec.launcher is not None or result.launcher is None:
            return
        key = self._launcher_key(spec)
        self._launchers[key] = (time.time(), result.launcher)
        if self.store is not None:
            await self.store.history.save_launcher_options(
                *key, result.launcher.encode(), ttl_s=LAUNCHER_TTL_S
            )

    async def find(self, launch: Launch) -> list[jobs.FoundJob]:
        return await jobs.find_jobs_for_launch(self.pool, self.profile_for(launch), launch.id)

    async def cancel(
        self, launch: Launch, job_ids: list[str], *, pending_only: bool = False
    ) -> None:
        """``scancel`` as the launch's person: Slurm itself refuses anyone else's job;
        ``pending_only``: Slurm leaves a job that has started alone."""
        await jobs.cancel(self.pool, self.profile_for(launch), job_ids, pending_only=pending_only)

    async def cancel_and_confirm(
        self, launch: Launch, job_id: str, *, pending_only: bool = False
    ) -> str:
        """``scancel`` the job and wait until Slurm shows it ended; "" or why not."""
        try:
            await self.cancel(launch, [job_id], pending_only=pending_only)
            for _ in range(CANCEL_CONFIRM_TRIES):
                found = {j.job_id: j for j in await self.find(launch)}
                if job_id not in found or not found[job_id].active:
                    return ""
                await asyncio.sleep(1.0)
        except ClusterError as exc:
            return str(exc)
        return f"Slurm still shows it running after {CANCEL_CONFIRM_TRIES} s"

    async def usage(self, launch: Launch) -> Usage:
        """What ``sacct`` recorded for every job of the launch: those its attempts recorded
        and any other Slurm has under its id (as the launch's person)."""
        here = ("", launch.cluster)  # a job left behind on another cluster never started
        job_ids = [a.job_id for a in launch.attempts if a.job_id and a.cluster in here]
        return await jobs.launch_usage(self.pool, self.profile_for(launch), launch.id, job_ids)

    async def tail(self, launch: Launch, path: str, lines: int) -> str:
        """The last lines of the launch's own log, as its person: ``path`` must be the log
        its record names, look like one of its job's logs, and resolve (links followed, on
        the login node) inside the cluster's directories; else ClusterError, nothing read."""
        problem = log_path_problem(launch, path)
        if problem:
            log.warning(
                "launch %s: refused to read %s: %s", launch.id, path, problem,
                extra=launch_fields(launch.id, cluster=launch.cluster),
            )  # fmt: skip
            raise ClusterError(
                f"trainbot reads only {launch.id}'s own log, and {path} is not it: {problem}",
                cluster=launch.cluster,
            )
        profile = self.profile_for(launch)
        return await jobs.tail_log(
            self.pool, profile, path, lines=lines, roots=log_roots(self.profile(launch.cluster))
        )

    async def delete_checkpoints(
        self, launch: Launch, directory: str, names: list[str], pattern: str
    ) -> None:
        """Delete some of the launch's checkpoints, as its person where the cluster maps them."""
        await delete_checkpoints(self.pool, self.profile_for(launch), directory, names, pattern)

    async def capacity(self, cluster: str) -> ClusterCapacity:
        return await cluster_capacity(self.pool, self.profile(cluster))

    async def images(self, cluster: str) -> ImageListing:
        """/images: the cluster's image files, registry images and the guide's prebuilt ones."""
        return await list_images(self.pool, self.profile(cluster))

    async def account(self, cluster: str, name: str) -> Account:
        """What the login node says of the Unix user ``name`` (asked as the shared account)."""
        return await lookup_account(self.pool, self.profile(cluster), name)

    @property
    def acts_as_people(self) -> bool:
        """Whether this process logs in as people (it holds the user CA key)."""
        return self.pool.act_as_people

    async def start_estimate(
        self,
        cluster: str,
        shape: JobShape,
        *,
        user_id: str,
        cluster_user: str,
        timeout_s: float,
        groups: frozenset[str] = frozenset(),  # for a worker's check of an ask (asks.py)
    ) -> StartEstimate:
        """Slurm's start estimate for a job of ``shape``, asked as the person's Unix user
        (``cluster_user``) where this process logs in as people, else as the shared account."""
        profile = self._as_person(cluster, user_id, cluster_user, "estimate")
        return await start_estimate(self.pool, profile, shape, timeout_s=timeout_s)

    async def update_node(
        self,
        cluster: str,
        node: str,
        action: NodeAction,
        reason: str = "",
        *,
        user_id: str,
        cluster_user: str,
        groups: frozenset[str] = frozenset(),
    ) -> str:
        """Drain or resume ``node`` (``scontrol update``) as the person's Unix user where this
        process logs in as people, else as the shared account; Slurm's state for it after."""
        profile = self._as_person(cluster, user_id, cluster_user, action)
        return await update_node(self.pool, profile, node, action, reason)

    def _as_person(
        self, cluster: str, user_id: str, cluster_user: str, purpose: str
    ) -> ClusterProfile:
        """``cluster``'s profile as the person's Unix user where this process logs in as
        people (its certificate naming ``purpose``), else as the shared account."""
        profile = self.profile(cluster)
        if self.pool.act_as_people:
            profile = profile.as_user(cluster_user, cert_key_id(user_id, cluster_user, purpose))
        return profile
