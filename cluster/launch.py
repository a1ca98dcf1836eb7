"""Launch specs and plans: what both launchers produce, and how a plan is submitted.

A :class:`LaunchSpec` is a checked request for one cluster (every field that
reaches a remote command line matches a strict pattern). :func:`plan_launch`
turns it into a :class:`LaunchPlan`: the script sent on stdin to ``bash -l -s``
(so secrets, exported there, never appear in a command line), and the exact
command it ends in. :func:`submit` runs it; :func:`dry_run` (in
``cluster.preflight``) shows it and checks it, submitting nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from pydantic import SecretStr

from cluster import nemo, nemo_rl
from cluster.collector import FrameworkName, TrackedJob
from cluster.profiles import (
    SLURM_NAME_PATTERN,
    ClusterProfile,
    check_remote_path,
    join_remote,
    slurm_time_seconds,
)
from cluster.recipes import OVERRIDE_KEY_PATTERN, OVERRIDE_VALUE_PATTERN, RecipeEntry
from cluster.remote import RemoteArg, export_lines, join_argv, quote_path
from cluster.slurm import parse_sbatch_parsable
from cluster.ssh import SSHPool

log = logging.getLogger(__name__)

LAUNCH_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,39}")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
ARG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:+,@=-]{0,299}")
NODELIST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,\[\]-]{0,199}")
SCRIPT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*")
REMOTE_SHELL = "bash -l -s"
SUBMIT_TIMEOUT_S = 120.0


def _check(pattern: re.Pattern[str] | str, value: str, what: str) -> None:
    if not re.fullmatch(pattern, value):
        raise ValueError(f"invalid {what}: {value!r}")


@dataclass(frozen=True)
class LaunchSpec:
    """One launch on one cluster. ``script`` is relative to ``<recipes_dir>/nemo`` (NeMo)
    or ``<recipes_dir>/nemo_rl`` (NeMo-RL ``job_script``); None for interactive jobs."""

    profile: ClusterProfile
    launch_id: str
    framework: FrameworkName
    nodes: int
    script: str | None = None
    partition: str | None = None
    time_limit: str | None = None
    name: str | None = None
    image: str | None = None
    args: tuple[str, ...] = ()
    overrides: tuple[tuple[str, str], ...] = ()
    interactive: bool = False
    exclude: str | None = None  # Slurm node list to keep away from (a failed node)
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, SecretStr] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        _check(LAUNCH_ID_RE, self.launch_id, "launch id")
        if not 1 <= self.nodes <= 4096:
            raise ValueError(f"invalid node count: {self.nodes}")
        if self.name is not None:
            _check(NAME_RE, self.name, "name (letters, digits, _ and -)")
        if self.partition is not None:
            _check(SLURM_NAME_PATTERN, self.partition, "partition")
        if self.time_limit is not None:
            slurm_time_seconds(self.time_limit)
        if self.script is not None and (
            not SCRIPT_RE.fullmatch(self.script) or ".." in self.script.split("/")
        ):
            raise ValueError(f"invalid script path: {self.script!r}")
        if self.script is None and not (self.framework == "nemo-rl" and self.interactive):
            raise ValueError("a script is needed (only NeMo-RL interactive jobs go without)")
        if self.interactive and self.framework != "nemo-rl":
            raise ValueError("interactive jobs are NeMo-RL jobs")
        if self.exclude is not None:
            _check(NODELIST_RE, self.exclude, "node list")
        for arg in self.args:
            _check(ARG_RE, arg, "recipe argument")
        for key, value in self.overrides:
            _check(OVERRIDE_KEY_PATTERN, key, "override key")
            _check(OVERRIDE_VALUE_PATTERN, value, f"value for {key}")
        check_remote_path(self.image_path)

    @classmethod
    def from_recipe(
        cls,
        profile: ClusterProfile,
        recipe: RecipeEntry,
        *,
        launch_id: str,
        nodes: int,
        partition: str | None = None,
        time_limit: str | None = None,
        name: str | None = None,
        image: str | None = None,
        overrides: tuple[tuple[str, str], ...] = (),
        env: Mapping[str, str] | None = None,
        secrets: Mapping[str, SecretStr] | None = None,
    ) -> LaunchSpec:
        """A spec for a catalog recipe: its framework, script or job script, and fixed args."""
        return cls(
            profile=profile,
            launch_id=launch_id,
            framework=recipe.framework,
            nodes=nodes,
            script=recipe.script if recipe.framework == "nemo" else recipe.job_script,
            partition=partition,
            time_limit=time_limit,
            name=name,
            image=image,
            args=recipe.args,
            overrides=overrides,
            env=dict(env or {}),
            secrets=dict(secrets or {}),
        )

    @property
    def cluster(self) -> str:
        return self.profile.name

    @property
    def slurm_partition(self) -> str:
        return self.partition or self.profile.partition

    @property
    def slurm_time(self) -> str | None:
        return self.time_limit or self.profile.time_limit

    @property
    def image_path(self) -> str:
        image = self.image or self.framework
        return self.profile.images.get(image, image)

    @property
    def work_dir(self) -> str:
        """Where the command runs: ``<recipes_dir>/nemo`` or ``<recipes_dir>/nemo_rl``."""
        if self.framework == "nemo":
            return join_remote(self.profile.recipes_dir, "nemo")
        return self.profile.nemo_rl_dir

    @property
    def job_name(self) -> str:
        """``<name>-<launch id>``: the experiment name (NeMo) or ``-J`` (NeMo-RL)."""
        if self.name:
            base = self.name
        elif self.interactive:
            base = "interactive"
        else:
            base = PurePosixPath(self.script or "job").stem
        return f"{base}-{self.launch_id}"

    def secret_files(self) -> dict[str, str]:
        return {k: v.file for k, v in self.profile.job_secrets.items() if v.file is not None}


@dataclass(frozen=True)
class LaunchPlan:
    spec: LaunchSpec
    argv: tuple[RemoteArg, ...]

    @property
    def command_line(self) -> str:
        """The launcher's command line, exactly as the remote shell runs it."""
        return join_argv(self.argv)

    def script(self, *, redact: bool = True) -> str:
        """The script sent on stdin to ``bash -l -s``; secrets shown only if ``redact`` is false."""
        spec = self.spec
        exports = export_lines(spec.env, spec.secrets, spec.secret_files(), redact=redact)
        nemorun_home = spec.profile.nemorun_home if spec.framework == "nemo" else None
        return render_script(spec.work_dir, exports, self.argv, nemorun_home=nemorun_home)


def render_script(
    work_dir: str,
    exports: list[str],
    argv: tuple[RemoteArg, ...] | list[RemoteArg],
    *,
    nemorun_home: str | None = None,
) -> str:
    """``set -euo pipefail``, the exports, ``cd`` to the work dir, ``exec`` the launcher."""
    lines = ["set -euo pipefail", *exports]
    if nemorun_home is not None:
        lines.append(f"export NEMORUN_HOME={quote_path(nemorun_home)}")
    lines.append(f"cd {quote_path(work_dir)}")
    lines.append(f"exec {join_argv(argv)} </dev/null")
    return "\n".join(lines) + "\n"


def plan_launch(spec: LaunchSpec) -> LaunchPlan:
    profile = spec.profile
    if spec.framework == "nemo":
        argv = nemo.nemo_run_argv(
            cluster_type=profile.type,
            partition=spec.slurm_partition,
            work_dir=spec.work_dir,
            image=spec.image_path,
            script=spec.script or "",
            nodes=spec.nodes,
            experiment_name=spec.job_name,
            log_dir=profile.log_dir,
            cache_dir=profile.cache_dir,
            data_dir=profile.data_dir,
            time_limit=spec.slurm_time,
            account=profile.account,
            exclude=spec.exclude,
            overrides=spec.overrides,
        )
    else:
        argv = nemo_rl.sbatch_argv(
            nodes=spec.nodes,
            partition=spec.slurm_partition,
            job_name=spec.job_name,
            cluster_type=profile.type,
            job_script=spec.script,
            interactive=spec.interactive,
            time_limit=spec.slurm_time,
            account=profile.account,
            exclude=spec.exclude,
            args=spec.args,
            overrides=spec.overrides,
        )
    return LaunchPlan(spec=spec, argv=tuple(argv))


@dataclass(frozen=True)
class Submission:
    """A submitted launch: enough to track it (:meth:`tracked`) and find it again."""

    launch_id: str
    cluster: str
    framework: FrameworkName
    job_id: str
    job_name: str
    local_dir: str = ""
    job_dir: str = ""
    checkpoint_dir: str = ""
    interactive: bool = False
    output: str = ""

    def tracked(self) -> TrackedJob:
        return TrackedJob(
            job_id=self.job_id,
            framework=self.framework,
            local_dir=self.local_dir,
            job_dir=self.job_dir,
            checkpoint_dir=self.checkpoint_dir,
            interactive=self.interactive,
        )


async def submit(
    pool: SSHPool, plan: LaunchPlan, *, timeout_s: float = SUBMIT_TIMEOUT_S
) -> Submission:
    """Run the plan on the login node (one round trip). Raises SlurmCommandFailed on refusal.

    Not idempotent: look for an earlier submission with ``find_jobs_for_launch`` first.
    """
    spec = plan.spec
    result = await pool.run(
        spec.profile.login,
        REMOTE_SHELL,
        input=plan.script(redact=False),
        timeout_s=timeout_s,
        cluster=spec.cluster,
    )
    if spec.framework == "nemo":
        status = nemo.parse_status_block(result.stdout)
        job_id, local_dir = status.job_id, status.local_dir
        ckpt = join_remote(spec.profile.log_dir, spec.job_name, "checkpoints")
        job_dir = ""
    else:
        job_id, local_dir = parse_sbatch_parsable(result.stdout).job_id, ""
        job_dir = nemo_rl.job_dir(spec.profile.nemo_rl_dir, job_id)
        ckpt = join_remote(job_dir, "checkpoints")
    log.info(
        "job=%s cluster=%s submitted launch %s as %s",
        job_id,
        spec.cluster,
        spec.launch_id,
        spec.job_name,
    )
    return Submission(
        launch_id=spec.launch_id,
        cluster=spec.cluster,
        framework=spec.framework,
        job_id=job_id,
        job_name=spec.job_name,
        local_dir=local_dir,
        job_dir=job_dir,
        checkpoint_dir=ckpt,
        interactive=spec.interactive,
        output=result.stdout[-4000:],
    )
