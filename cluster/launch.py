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
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from pydantic import SecretStr

from cluster.errors import SlurmCommandFailed
from cluster.frameworks import Framework, FrameworkName, Tracking, framework
from cluster.launcher_options import LauncherOptions
from cluster.profiles import (
    SLURM_NAME_PATTERN,
    ClusterProfile,
    check_remote_path,
    slurm_time_seconds,
)
from cluster.recipes import OVERRIDE_KEY_PATTERN, OVERRIDE_VALUE_PATTERN, RecipeEntry
from cluster.remote import RemoteArg, export_lines, join_argv, quote_path
from cluster.ssh import SSHPool

log = logging.getLogger(__name__)

LAUNCH_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,39}")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
ARG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:+,@=-]{0,299}")
NODELIST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,\[\]-]{0,199}")
COMMENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 :._@-]{0,127}")
# A checkpoint as a job reads it: ~/..., /... or relative to the work dir; NeMo's names hold "=".
START_PATH_RE = re.compile(r"(~/|/)?[A-Za-z0-9._+@=-][A-Za-z0-9._+@=/-]{0,499}")
SCRIPT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*")
REMOTE_SHELL = "bash -l -s"
SUBMIT_TIMEOUT_S = 120.0
SUBMIT_TOO_LATE = "the submit arrived after its deadline; nothing was submitted"
SUBMIT_TOO_LATE_EXIT = 75  # EX_TEMPFAIL


def _check(pattern: re.Pattern[str] | str, value: str, what: str) -> None:
    if not re.fullmatch(pattern, value):
        raise ValueError(f"invalid {what}: {value!r}")


@dataclass(frozen=True)
class LaunchSpec:
    """One launch on one cluster. ``script`` is relative to the framework's directory
    (:attr:`work_dir`); None for interactive jobs."""

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
    comment: str | None = None  # Slurm's --comment, where the launcher takes one
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, SecretStr] = field(default_factory=dict, repr=False)
    # What the site's launcher accepts (its --help), when known: argv leaves out what it lacks.
    launcher: LauncherOptions | None = None
    submit_by: int = 0  # epoch seconds: the launcher neither starts nor runs past it (0: no bound)
    # from=: (recipe key, another launch's checkpoint as the job reads it), after the overrides
    start_from: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        framework(self.framework)  # ValueError naming the known frameworks
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
        if self.interactive and not self.fw.interactive:
            raise ValueError(f"{self.framework} has no interactive jobs")
        if self.script is None and not self.interactive:
            raise ValueError("a script is needed (only interactive jobs go without)")
        if self.exclude is not None:
            _check(NODELIST_RE, self.exclude, "node list")
        if self.comment is not None:
            _check(COMMENT_RE, self.comment, "comment")
        for arg in self.args:
            _check(ARG_RE, arg, "recipe argument")
        for key, value in self.overrides:
            _check(OVERRIDE_KEY_PATTERN, key, "override key")
            _check(OVERRIDE_VALUE_PATTERN, value, f"value for {key}")
        check_remote_path(self.image_path)
        _check_start(self.start_from)

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
        comment: str | None = None,
    ) -> LaunchSpec:
        """A spec for a catalog recipe: its framework, script or job script, and fixed args."""
        return cls(
            profile=profile,
            launch_id=launch_id,
            framework=recipe.framework,
            nodes=nodes,
            script=recipe.script_file,
            partition=partition,
            time_limit=time_limit,
            name=name,
            image=image,
            args=recipe.args,
            overrides=overrides,
            env=dict(env or {}),
            secrets=dict(secrets or {}),
            comment=comment,
        )

    @property
    def fw(self) -> Framework:
        return framework(self.framework)

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
        return self.profile.resolve_image(self.image, self.framework)

    @property
    def work_dir(self) -> str:
        """Where the launcher runs: the framework's directory in the recipes checkout."""
        return self.fw.work_dir(self.profile)

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


def _check_start(start_from: tuple[str, str] | None) -> None:
    if start_from is None:
        return
    key, path = start_from
    _check(OVERRIDE_KEY_PATTERN, key, "start key")
    _check(START_PATH_RE, path, "checkpoint path")
    if ".." in path.split("/"):
        raise ValueError(f"invalid checkpoint path: {path!r}")


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
        return render_script(
            spec.work_dir,
            exports,
            self.argv,
            env=spec.fw.script_env(spec),
            submit_by=spec.submit_by,
        )


def render_script(
    work_dir: str,
    exports: list[str],
    argv: tuple[RemoteArg, ...] | list[RemoteArg],
    *,
    env: dict[str, RemoteArg] | None = None,
    submit_by: int = 0,
) -> str:
    """``set -euo pipefail``, the exports, ``cd`` to the work dir, ``exec`` the launcher.

    With ``submit_by`` (epoch seconds) the login node itself holds the submit to that
    bound: a script that arrives later (its sender stalled) submits nothing, and the
    launcher is killed when it runs past it. So once the bound has passed, no submit of
    this attempt can still be in flight, whatever happened to the process that sent it."""
    lines = ["set -euo pipefail", *exports]
    for name, value in (env or {}).items():
        lines.append(f"export {name}={join_argv([value])}")
    lines.append(f"cd {quote_path(work_dir)}")
    if not submit_by:
        lines.append(f"exec {join_argv(argv)} </dev/null")
        return "\n".join(lines) + "\n"
    lines += [
        f"trainbot_left=$(( {int(submit_by)} - $(date +%s) ))",
        'if [ "$trainbot_left" -le 0 ]; then',
        f"  echo 'trainbot: {SUBMIT_TOO_LATE}' >&2",
        f"  exit {SUBMIT_TOO_LATE_EXIT}",
        "fi",
        f'exec timeout -k 5 "$trainbot_left" {join_argv(argv)} </dev/null',
    ]
    return "\n".join(lines) + "\n"


def plan_launch(spec: LaunchSpec) -> LaunchPlan:
    return LaunchPlan(spec=spec, argv=tuple(spec.fw.argv(spec)))


@dataclass(frozen=True)
class Submission:
    """A submitted launch: its tracking record and what the launcher printed."""

    launch_id: str
    cluster: str
    job_name: str
    tracking: Tracking
    output: str = ""

    @property
    def job_id(self) -> str:
        return self.tracking.job_id


async def submit(
    pool: SSHPool, plan: LaunchPlan, *, timeout_s: float = SUBMIT_TIMEOUT_S
) -> Submission:
    """Run the plan on the login node (one round trip). Raises SlurmCommandFailed on refusal.

    Not idempotent: look for an earlier submission with ``find_jobs_for_launch`` first.
    """
    spec = plan.spec
    if spec.submit_by:  # the login node stops it then; this side waits no longer either
        timeout_s = min(timeout_s, max(spec.submit_by - time.time(), 0.001))
    result = await pool.run(
        spec.profile.login,
        REMOTE_SHELL,
        input=plan.script(redact=False),
        timeout_s=timeout_s,
        cluster=spec.cluster,
    )
    try:
        tracking = spec.fw.tracking(spec, result.stdout)
    except ValueError as exc:
        raise SlurmCommandFailed(
            command=REMOTE_SHELL,
            returncode=result.returncode,
            stderr=f"{result.stderr}\n{exc}"[-4000:],
            cluster=spec.cluster,
        ) from exc
    log.info(
        "job=%s cluster=%s submitted launch %s as %s",
        tracking.job_id,
        spec.cluster,
        spec.launch_id,
        spec.job_name,
    )
    if spec.comment and not spec.fw.passes_comment:
        await _comment(pool, spec, tracking.job_id, spec.comment)
    if updates := spec.fw.slurm_updates(spec):
        await _update(pool, spec, tracking.job_id, updates)
    return Submission(
        launch_id=spec.launch_id,
        cluster=spec.cluster,
        job_name=spec.job_name,
        tracking=tracking,
        output=result.stdout[-4000:],
    )


async def _comment(pool: SSHPool, spec: LaunchSpec, job_id: str, comment: str) -> None:
    """Slurm's comment for a launcher that cannot pass one to its sbatch (NeMo's run.py
    has no such option, and sbatch reads no environment variable for it): set on the
    job right after, as its owner may. A failure only costs the attribution."""
    argv = ["scontrol", "update", f"JobId={job_id}", f"Comment={comment}"]
    result = await pool.run(
        spec.profile.login, join_argv(argv), timeout_s=15, check=False, cluster=spec.cluster
    )
    if result.returncode != 0:
        log.warning(
            "job=%s cluster=%s: could not set its comment: %s",
            job_id,
            spec.cluster,
            result.stderr.strip()[-200:],
        )


async def _update(pool: SSHPool, spec: LaunchSpec, job_id: str, fields: dict[str, str]) -> None:
    """What the site's launcher could not pass to sbatch (its run.py lacks the flag), set on
    the job right after with ``scontrol update``, as its owner may while the job is pending.
    A failure is logged: the thread already said how it is applied."""
    argv = ["scontrol", "update", f"JobId={job_id}", *(f"{k}={v}" for k, v in fields.items())]
    result = await pool.run(
        spec.profile.login, join_argv(argv), timeout_s=15, check=False, cluster=spec.cluster
    )
    if result.returncode != 0:
        log.warning(
            "job=%s cluster=%s: could not set %s: %s",
            job_id,
            spec.cluster,
            ", ".join(fields),
            result.stderr.strip()[-200:],
        )
