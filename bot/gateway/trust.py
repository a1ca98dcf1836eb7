"""What a worker re-derives before it acts, rather than believing Redis: pure checks.

A launch record and an ask both come from Redis, which more than the workers can write.
So whom a launch runs as is checked against the config here (:func:`user_problem`), the
log a ``tail`` reads must be the one the record names and look like the launch's own
(:func:`log_path_problem`, then the login node resolves it inside the cluster's
directories), a ``cancel`` takes the record's own jobs (:func:`recorded_jobs`), and a
start estimate is asked as the person's configured user and for a shape the policy
allows them (:func:`estimate_user`, :func:`shape_problem`).
"""

from __future__ import annotations

import re
from collections.abc import Collection

from bot.lifecycle.launch import Launch
from cluster.site.profiles import ClusterProfile
from cluster.slurm.sbatch import JobShape
from commands.access import slurm_account
from commands.policy import Policy

LOG_SUFFIXES = (".log", ".out")


def user_problem(profile: ClusterProfile, user_id: str, cluster_user: str) -> str:
    """Why ``cluster_user`` ("": the shared account) is not whom ``user_id``'s launches
    may run as on ``profile``'s cluster, by the config alone ("" when it may be)."""
    identity = profile.identity
    if identity is None:
        if cluster_user and cluster_user != profile.login.user:
            return f"{profile.name} has no identity section: everyone runs as {profile.login.user}"
        return ""
    return identity.check_user(user_id, cluster_user, profile.login.user)


def estimate_user(profile: ClusterProfile, user_id: str) -> str:
    """Whom a start estimate for ``user_id`` is asked as: the Unix user ``identity.users``
    names for them, else the shared account (""): an estimate reads no one's files."""
    identity = profile.identity
    return "" if identity is None else identity.users.get(user_id, "")


def log_roots(profile: ClusterProfile) -> tuple[str, ...]:
    """The directories a launch's logs lie in: the recipes checkout, NeMo-Run's home and
    the log directory of the cluster's profile."""
    found = (profile.recipes_dir, profile.nemorun_home, profile.log_dir)
    return tuple(dict.fromkeys(root.rstrip("/") for root in found if root.strip("/")))


def recorded_log(launch: Launch) -> str:
    """The log the launch's current attempt recorded ("" when none yet)."""
    attempt = launch.attempt
    return attempt.tracking.log_path if attempt and attempt.tracking else ""


def log_path_problem(launch: Launch, path: str) -> str:
    """Why ``path`` is not a log of ``launch`` that trainbot may read ("" when it may be):
    the one its record names, a ``.log`` or ``.out`` file, naming its Slurm job."""
    if not path or path != recorded_log(launch):
        return "it is not the log the launch's record names"
    if any(c in path for c in "\0\n\r") or ".." in path.split("/"):
        return "the path holds '..' or a control character"
    if not path.startswith(("/", "~/")):
        return "the path is not absolute"
    if not path.rsplit("/", 1)[-1].endswith(LOG_SUFFIXES):
        return "it is not a log file (.log or .out)"
    job_id = launch.job_id
    if not job_id or not re.search(rf"(?<![0-9]){re.escape(job_id)}(?![0-9])", path):
        return f"the path does not name the launch's Slurm job ({job_id or 'none yet'})"
    return ""


def recorded_jobs(launch: Launch) -> list[str]:
    """The Slurm jobs a cancel of the launch ends, from its record: its newest attempt's
    job, and the one before while a Retry holds the newest back until that one is gone
    (what /cancel picks), each only on the launch's own cluster."""
    here = ("", launch.cluster)
    attempts = (
        launch.attempts[-2:]
        if launch.attempts and launch.attempts[-1].held
        else launch.attempts[-1:]
    )
    found = [a.job_id for a in reversed(attempts) if a.job_id and a.cluster in here]
    return list(dict.fromkeys(found))


def shape_problem(
    policy: Policy,
    profile: ClusterProfile,
    shape: JobShape,
    *,
    user_id: str,
    groups: Collection[str],
) -> str:
    """Why the policy does not let ``user_id`` ask about ``shape`` on the cluster ("": it
    does): a rule must cover them there, within their nodes and the cluster's, charged to
    their own Slurm account or the cluster's."""
    name = profile.name
    admin = policy.is_admin(user_id, groups)
    if not admin and policy.rule_for(user_id, groups, name) is None:
        return f"no policy rule lets {user_id} launch on {name}"
    limit = policy.max_nodes_for(user_id, groups, name)
    most = min(profile.max_nodes, limit) if limit is not None else profile.max_nodes
    if shape.nodes > most:
        return f"{shape.nodes} nodes is more than {user_id} may use on {name} (max {most})"
    if shape.account not in (None, profile.account):
        mine = slurm_account(policy, user_id=user_id, group_ids=groups, cluster=name)
        if shape.account != mine:
            return f"the Slurm account {shape.account} is not {user_id}'s on {name}"
    return ""
