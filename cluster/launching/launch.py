"""Launch plans: what both launchers produce, and how a plan is submitted.

:func:`plan_launch` turns a :class:`~cluster.launching.spec.LaunchSpec` into a
:class:`LaunchPlan`: the script sent on stdin to ``bash -l -s`` (so secrets,
exported there, never appear in a command line), and the exact command it ends in.
:func:`submit` runs it; :func:`dry_run` (in ``cluster.preflight.checks``) shows it and
checks it, submitting nothing.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from cluster.errors import ClusterUnreachable, SlurmCommandFailed
from cluster.launching.run_record import RunRecord, probe_lines, read_record, without_record
from cluster.launching.spec import LaunchSpec
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import RemoteArg, export_lines, join_argv, quote_path
from cluster.watching.tracking import Tracking

log = logging.getLogger(__name__)

REMOTE_SHELL = "bash -l -s"
SUBMIT_TIMEOUT_S = 120.0
SUBMIT_TOO_LATE = "the submit arrived after its deadline; nothing was submitted"
SUBMIT_TOO_LATE_EXIT = 75  # EX_TEMPFAIL


@dataclass(frozen=True)
class LaunchPlan:
    spec: LaunchSpec
    argv: tuple[RemoteArg, ...]

    @property
    def command_line(self) -> str:
        """The launcher's command line, exactly as the remote shell runs it."""
        return join_argv(self.argv)

    @property
    def env_names(self) -> tuple[str, ...]:
        """The names of what the script exports (never the values)."""
        spec = self.spec
        names = {*spec.env, *spec.secrets, *spec.secret_files(), *spec.profile.nccl_env}
        names |= set(spec.fw.script_env(spec))
        return tuple(sorted(names))

    def script(self, *, redact: bool = True, submit_by: int | None = None) -> str:
        """The script sent on stdin to ``bash -l -s``; secrets shown only if ``redact`` is
        false. ``submit_by``: the bound on the login node's own clock (default: the spec's)."""
        spec = self.spec
        exports = export_lines(spec.env, spec.secrets, spec.secret_files(), redact=redact)
        return render_script(
            spec.work_dir,
            exports,
            self.argv,
            env={**spec.profile.nccl_env, **spec.fw.script_env(spec)},
            submit_by=spec.submit_by if submit_by is None else submit_by,
            probe=probe_lines(spec.profile.recipes_dir, spec.image_path),
        )

    def record(self, stderr: str) -> RunRecord:
        """What this plan ran, with what the login node printed of its checkout and image."""
        spec = self.spec
        return read_record(
            stderr,
            command=self.command_line,
            env_names=self.env_names,
            recipes_dir=spec.profile.recipes_dir,
            image=spec.image_path,
        )


def render_script(
    work_dir: str,
    exports: list[str],
    argv: tuple[RemoteArg, ...] | list[RemoteArg],
    *,
    env: dict[str, RemoteArg] | None = None,
    submit_by: int = 0,
    probe: list[str] | None = None,
) -> str:
    """``set -euo pipefail``, the exports, ``cd`` to the work dir, ``exec`` the launcher.

    With ``submit_by`` (epoch seconds) the login node itself holds the submit to that
    bound: a script that arrives later (its sender stalled) submits nothing, and the
    launcher is killed when it runs past it. So once the bound has passed, no submit of
    this attempt can still be in flight, whatever happened to the process that sent it.
    ``probe``: lines that print the run's record to stderr first (cluster.launching.run_record)."""
    lines = ["set -euo pipefail", *(probe or ()), *exports]
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
    record: RunRecord | None = None  # what it ran: command, env names, checkout, image

    @property
    def job_id(self) -> str:
        return self.tracking.job_id


def on_login_clock(submit_by: float, login_now: int, read_by: float) -> int:
    """``submit_by`` (this machine's clock) as a bound on the login node's clock, from its
    clock's reading ``login_now`` (``date +%s``), taken before ``read_by`` (this machine's
    clock, when the reading had come back): the reading plus the time left, a duration on
    this machine's clock. No clock is compared with the other, so a login node whose
    clock is off by minutes bounds the submit the same; the time the reading took
    counts as spent (the bound is never later than this side believes)."""
    return login_now + math.floor(submit_by - read_by)


async def login_bound(pool: SSHPool, spec: LaunchSpec, now: Callable[[], float] = time.time) -> int:
    """The spec's ``submit_by`` on the login node's clock (one round trip, ``date +%s``).
    A clock that cannot be read is ClusterUnreachable: nothing was submitted, and the
    worker looks the launch up before it submits again, as after any lost submit."""
    result = await pool.run(
        spec.profile.login, "date +%s", timeout_s=10, check=False, cluster=spec.cluster
    )
    read_by = now()
    text = result.stdout.strip()
    if result.returncode != 0 or not text.isdigit():
        raise ClusterUnreachable(
            f"the login node's clock could not be read (date +%s gave {text[:40]!r}, exit "
            f"{result.returncode}); nothing was submitted",
            cluster=spec.cluster,
        )
    return on_login_clock(spec.submit_by, int(text), read_by)


async def submit(
    pool: SSHPool,
    plan: LaunchPlan,
    *,
    timeout_s: float = SUBMIT_TIMEOUT_S,
    now: Callable[[], float] = time.time,
) -> Submission:
    """Run the plan on the login node (one round trip, and one to read its clock when the
    spec has a ``submit_by``). Raises SlurmCommandFailed on refusal.

    Not idempotent: look for an earlier submission with ``find_jobs_for_launch`` first.
    """
    spec = plan.spec
    login_by: int | None = None
    if spec.submit_by:  # the login node stops it then; this side waits no longer either
        login_by = await login_bound(pool, spec, now)
        timeout_s = min(timeout_s, max(spec.submit_by - now(), 0.001))
    try:
        result = await pool.run(
            spec.profile.login,
            REMOTE_SHELL,
            input=plan.script(redact=False, submit_by=login_by),
            timeout_s=timeout_s,
            cluster=spec.cluster,
        )
    except SlurmCommandFailed as exc:  # the refusal as the launcher said it, record left out
        raise SlurmCommandFailed(
            command=exc.command,
            returncode=exc.returncode,
            stderr=without_record(exc.stderr),
            cluster=spec.cluster,
        ) from None
    try:
        tracking = spec.fw.tracking(spec, result.stdout)
    except ValueError as exc:
        raise SlurmCommandFailed(
            command=REMOTE_SHELL,
            returncode=result.returncode,
            stderr=f"{without_record(result.stderr)}\n{exc}"[-4000:],
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
        record=plan.record(result.stderr),
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
