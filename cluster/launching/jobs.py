"""Job operations by id: find a launch again, cancel, tail a log.

A launch id is carried in the Slurm job name (``...<name>-<launch id>``), so after
a crash the caller can ask Slurm whether it already submitted it. Seen on Slurm
22.05: for a few seconds after a job starts, slurmdbd records its JobName as
"allocation", and a finished job leaves plain ``squeue`` at once; so the lookup
uses ``squeue -t all`` (finished jobs stay there for MinJobAge) and ``sacct``.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from cluster.errors import ClusterError
from cluster.launching.spec import LAUNCH_ID_RE
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import build_scancel, build_squeue, is_terminal, parse_squeue
from cluster.slurm.sacct import Usage, build_sacct, merge_acct, parse_sacct, usage_of
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import quote_path

log = logging.getLogger(__name__)

FIND_TIMEOUT_S = 30.0
SEPARATOR = "=====trainbot-sacct====="
MAX_TAIL_LINES = 2000


@dataclass(frozen=True)
class FoundJob:
    job_id: str
    name: str
    state: str
    active: bool  # still in the queue (pending, running, requeued ...)


def launch_name_matches(job_name: str, launch_id: str) -> bool:
    """Whether a Slurm job name carries ``launch_id`` as its suffix."""
    return re.search(r"(^|[.-])" + re.escape(launch_id) + r"$", job_name) is not None


def parse_found(stdout: str, launch_id: str) -> list[FoundJob]:
    """Parse the squeue + sacct output of :func:`find_jobs_for_launch` (pure)."""
    queue_text, _, acct_text = stdout.partition(SEPARATOR)
    found: dict[str, FoundJob] = {}
    for row in parse_squeue(queue_text):
        if launch_name_matches(row.name, launch_id):
            found[row.job_id] = FoundJob(
                row.job_id, row.name, row.state, not is_terminal(row.state)
            )
    for job_id, rec in merge_acct(parse_sacct(acct_text)).items():
        if job_id not in found and launch_name_matches(rec.latest.name, launch_id):
            state = rec.latest.state
            found[job_id] = FoundJob(job_id, rec.latest.name, state, not is_terminal(state))
    return sorted(found.values(), key=lambda j: int(j.job_id.split("_")[0]))


async def find_jobs_for_launch(
    pool: SSHPool, profile: ClusterProfile, launch_id: str, *, since: str = "now-14days"
) -> list[FoundJob]:
    """Every Slurm job of this user whose name ends in ``launch_id`` (one round trip)."""
    if not LAUNCH_ID_RE.fullmatch(launch_id):
        raise ValueError(f"invalid launch id: {launch_id!r}")
    grep = f"grep -F -e {shlex.quote(launch_id)} || true"
    user = profile.login.user
    squeue = build_squeue(user=user, all_states=True)
    sacct = f"{build_sacct(since=since)} -u {shlex.quote(user)}"
    command = f"{{ {squeue} | {grep}; }}; echo {SEPARATOR}; {{ {sacct} | {grep}; }}"
    result = await pool.run(profile.login, command, timeout_s=FIND_TIMEOUT_S, cluster=profile.name)
    return parse_found(result.stdout, launch_id)


def build_usage(launch_id: str, job_ids: Sequence[str], user: str, since: str) -> str:
    """``sacct -D`` for the launch's recorded jobs, then (after ``SEPARATOR``) for every
    job of ``user`` since ``since`` whose name carries the launch id: one the launch never
    recorded (a submit whose answer was lost) is a job of the launch too."""
    if not LAUNCH_ID_RE.fullmatch(launch_id):
        raise ValueError(f"invalid launch id: {launch_id!r}")
    grep = f"grep -F -e {shlex.quote(launch_id)} || true"
    asked = build_sacct(job_ids) if job_ids else "true"
    named = f"{build_sacct(since=since)} -u {shlex.quote(user)}"
    return f"{asked}; echo {SEPARATOR}; {{ {named} | {grep}; }}"


def parse_usage(stdout: str, launch_id: str, job_ids: Sequence[str]) -> Usage:
    """What :func:`build_usage`'s output says the launch's jobs used (pure). Each job is
    counted once, whichever half (or both) listed it; a named job must carry the launch
    id as its name's suffix."""
    asked_text, _, named_text = stdout.partition(SEPARATOR)
    wanted = set(job_ids)
    records = {j: r for j, r in merge_acct(parse_sacct(asked_text)).items() if j in wanted}
    for job_id, record in merge_acct(parse_sacct(named_text)).items():
        if job_id not in records and launch_name_matches(record.latest.name, launch_id):
            records[job_id] = record
    return usage_of(records, job_ids)


async def launch_usage(
    pool: SSHPool,
    profile: ClusterProfile,
    launch_id: str,
    job_ids: Sequence[str],
    *,
    since: str = "now-14days",
) -> Usage:
    """What Slurm's accounting says every job of the launch used (one round trip, as the
    launch's Unix user)."""
    command = build_usage(launch_id, job_ids, profile.login.user, since)
    result = await pool.run(profile.login, command, timeout_s=FIND_TIMEOUT_S, cluster=profile.name)
    return parse_usage(result.stdout, launch_id, job_ids)


async def cancel(
    pool: SSHPool, profile: ClusterProfile, job_ids: Sequence[str], *, pending_only: bool = False
) -> None:
    """``scancel`` the jobs (one round trip); ``pending_only``: only those not started."""
    command = build_scancel(job_ids, pending_only=pending_only)
    await pool.run(profile.login, command, timeout_s=30.0, cluster=profile.name)
    for job_id in job_ids:
        log.info("job=%s cluster=%s cancelled", job_id, profile.name)


OUTSIDE_ROOTS_RC = 3  # what the tail script exits with for a file outside its directories


def build_tail(path: str, count: int, roots: Sequence[str] = ()) -> str:
    """``tail`` of ``path``; with ``roots``, only once the file, all links resolved
    (``realpath -e``), lies inside one of them (else exit :data:`OUTSIDE_ROOTS_RC`)."""
    if not roots:
        return f"tail -n {count} -- {quote_path(path)} 2>/dev/null || true"
    dirs = " ".join(quote_path(root) for root in roots)
    return (
        f"p=$(realpath -e -- {quote_path(path)} 2>/dev/null) || exit 0; "
        f'for r in {dirs}; do r=$(realpath -m -- "$r") || continue; '
        f'case "$p" in "$r"/*) tail -n {count} -- "$p" 2>/dev/null; exit 0;; esac; done; '
        f'echo "$p" >&2; exit {OUTSIDE_ROOTS_RC}'
    )


async def tail_log(
    pool: SSHPool,
    profile: ClusterProfile,
    path: str,
    *,
    lines: int = 50,
    roots: Sequence[str] = (),
) -> str:
    """The last ``lines`` lines of a log file on the login node ("" if it is not there);
    with ``roots``, a file that is not inside one of them once its links are resolved is
    refused (ClusterError) and not read."""
    count = max(1, min(lines, MAX_TAIL_LINES))
    command = build_tail(path, count, roots)
    result = await pool.run(
        profile.login, command, timeout_s=30.0, check=False, cluster=profile.name
    )
    if roots and result.returncode == OUTSIDE_ROOTS_RC:
        resolved = result.stderr.strip()[:300]
        log.warning(
            "cluster=%s refused to read %s (resolves to %s): outside %s",
            profile.name, path, resolved, ", ".join(roots),
        )  # fmt: skip
        raise ClusterError(
            f"{path} resolves to {resolved}, outside the launch's directories "
            f"({', '.join(roots)}); trainbot reads logs only there",
            cluster=profile.name,
        )
    return result.stdout
