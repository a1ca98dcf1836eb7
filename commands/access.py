"""Who may see and act on a launch, and which images may run: the pure decisions over
the rule models of :mod:`commands.rules` (no I/O).

- ``approvers``: named users and user groups (never ``*``) who may approve
  launches that wait for a second person, each up to a size (``max_nodes``).
- ``log_viewers``: who besides the owner and the admins may read a launch's
  logs and loss curve, per cluster (a team's user group on its cluster, say).
- ``accounts``: which Slurm account (``--account``) a person's jobs are charged to,
  per cluster, so fair-share and ``sacct`` reports show teams, not the bot's login.
- ``start_from``: who besides a launch's owner may start from its checkpoints (``from=``).
- ``custom_images``: who may run an ``image=`` path that is not one of the
  cluster's own images, from which directories, and whether such a launch
  gets the job secrets (by default it does not).

The decisions take a :class:`~commands.policy.Policy` and return a
:class:`~commands.policy.Decision` whose ``reason`` is ready to show.
"""

from __future__ import annotations

from collections.abc import Collection

from commands.policy import Decision, Policy
from commands.rules import ANY


def slurm_account(
    policy: Policy, *, user_id: str, group_ids: Collection[str], cluster: str
) -> str | None:
    """The account of the first ``policy.accounts`` rule that covers the person (None:
    the cluster's own)."""
    for rule in policy.accounts:
        if rule.covers(user_id, group_ids, cluster):
            return rule.account
    return None


def is_custom_image(image: str | None, known: Collection[str]) -> bool:
    """Whether ``image=`` names something other than the cluster's own images
    (``known`` holds their names and paths)."""
    return image is not None and image not in known


def may_approve(
    policy: Policy,
    *,
    user_id: str,
    group_ids: Collection[str],
    owner_id: str,
    cluster: str,
    nodes: int,
) -> Decision:
    """Whether ``user_id`` may approve ``owner_id``'s launch of ``nodes`` on ``cluster``:
    someone else who is an admin, or an approver for that cluster and size."""
    if user_id == owner_id:
        return Decision(
            allowed=False, reason="You cannot approve your own launch: a second person has to."
        )
    if policy.is_admin(user_id, group_ids):
        return Decision(allowed=True, reason="Approved: you are a trainbot admin.")
    rules = [r for r in policy.approvers if r.covers(user_id, group_ids, cluster)]
    if any(r.max_nodes is None or nodes <= r.max_nodes for r in rules):
        return Decision(allowed=True, reason=f"Approved: you are an approver for {cluster}.")
    if rules:
        most = max(r.max_nodes or 0 for r in rules)
        return Decision(
            allowed=False,
            reason=f"You may approve launches of up to {most} nodes on {cluster}; this one "
            f"asks for {nodes}. A trainbot admin or an approver for larger launches can "
            "approve it.",
        )
    return Decision(
        allowed=False,
        reason=f"Only a trainbot admin or an approver for {cluster} (policy.approvers) "
        "can approve it.",
    )


def may_reject(
    policy: Policy, *, user_id: str, group_ids: Collection[str], owner_id: str, cluster: str
) -> Decision:
    """Whether ``user_id`` may reject (or, as its owner, withdraw) a waiting launch."""
    if user_id == owner_id:
        return Decision(allowed=True, reason="Withdrawn: it is your launch.")
    if policy.is_admin(user_id, group_ids):
        return Decision(allowed=True, reason="Rejected: you are a trainbot admin.")
    if any(r.covers(user_id, group_ids, cluster) for r in policy.approvers):
        return Decision(allowed=True, reason=f"Rejected: you are an approver for {cluster}.")
    return Decision(
        allowed=False,
        reason=f"Only its owner, a trainbot admin or an approver for {cluster} "
        "(policy.approvers) can reject it.",
    )


def may_view_logs(
    policy: Policy, *, user_id: str, group_ids: Collection[str], owner_id: str, cluster: str
) -> Decision:
    """Whether ``user_id`` may read the logs (and loss curve) of ``owner_id``'s launch."""
    if user_id == owner_id:
        return Decision(allowed=True, reason="Allowed: it is your launch.")
    if policy.is_admin(user_id, group_ids):
        return Decision(allowed=True, reason="Allowed: you are a trainbot admin.")
    if any(r.covers(user_id, group_ids, cluster) for r in policy.log_viewers):
        return Decision(allowed=True, reason=f"Allowed: you may read logs on {cluster}.")
    return Decision(
        allowed=False,
        reason="That launch belongs to someone else: its logs are for its owner, trainbot "
        f"admins and the people policy.log_viewers names for {cluster}. /jobs lists yours.",
    )


def may_start_from(
    policy: Policy,
    *,
    user_id: str,
    group_ids: Collection[str],
    owner_id: str,
    owner_name: str = "",
    launch_id: str,
    cluster: str,
) -> Decision:
    """Whether ``user_id`` may start a launch (``from=``) from the checkpoints of
    ``owner_id``'s launch ``launch_id`` on ``cluster``: its owner, or the people a
    ``policy.start_from`` rule names there (admins too only when named)."""
    if user_id == owner_id:
        return Decision(allowed=True, reason="Allowed: it is your launch.")
    if any(r.covers(user_id, group_ids, cluster) for r in policy.start_from):
        return Decision(allowed=True, reason=f"Allowed: policy.start_from names you on {cluster}.")
    who = owner_name or owner_id
    return Decision(
        allowed=False,
        reason=f"{launch_id} is {who}'s: only its owner may start from its checkpoints, or "
        f"the people policy.start_from names for {cluster}. Start from one of your own "
        "launches (/jobs lists them), or ask its owner to.",
    )


def may_act_as_oncall(
    policy: Policy,
    *,
    group_ids: Collection[str],
    oncall_group: str | None,
    paged: bool,
) -> bool:
    """Whether an on-call member may retry or cancel a launch that paged them."""
    return bool(policy.oncall_may_act and paged and oncall_group and oncall_group in group_ids)


def may_use_image(
    policy: Policy,
    *,
    user_id: str,
    group_ids: Collection[str],
    cluster: str,
    image: str,
    cluster_images: Collection[str],
) -> tuple[Decision, bool]:
    """Whether ``user_id`` may run the custom ``image`` on ``cluster``, and whether that
    launch gets the job secrets. ``cluster_images`` names the cluster's own images."""
    admin = policy.is_admin(user_id, group_ids)
    mine = [
        r
        for r in policy.custom_images
        if (ANY in r.clusters or cluster in r.clusters)
        and (admin or r.covers(user_id, group_ids, cluster))
    ]
    for rule in mine:
        if rule.holds(image):
            note = "" if rule.job_secrets else " It gets no job secrets (HF_TOKEN, ...)."
            return Decision(allowed=True, reason=f"Custom image allowed.{note}"), rule.job_secrets
    own = ", ".join(sorted(cluster_images)) or "none"
    if mine:
        dirs = ", ".join(sorted({d for r in mine for d in r.dirs}))
        reason = (
            f"image={image} is not in a directory you may run images from on {cluster} "
            f"({dirs}). Put it there, or use one of {cluster}'s images: {own}."
        )
    else:
        reason = (
            f"Custom images are not allowed for you on {cluster} (policy.custom_images). "
            f"Use one of its images: {own}, e.g. image={sorted(cluster_images)[0]}."
            if cluster_images
            else f"Custom images are not allowed for you on {cluster} (policy.custom_images)."
        )
    return Decision(allowed=False, reason=reason), False
