"""Why a pending job waits, in plain words: squeue's reason (``%r``, ``-O reason``) read.

Slurm's "job reason codes" (SchedMD/slurm, doc/html/job_reason_codes.shtml; the strings
from ``job_state_reason_string`` in src/common/slurm_protocol_defs.c). squeue prints the
job's ``state_desc`` instead of the code when the controller set one: a batch job whose
launch failed (a node's prolog or the container set-up failed) is requeued and held with
the description ``launch failed requeued held`` (src/slurmctld/job_mgr.c), and one that a
person requeued held reads ``job requeued in held state``.

Each reason says what the job waits for and what would help; some never clear by
themselves (a limit the request is over, a dependency that can no longer be met, a
hold): those are said at once, with the fix. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PendingWhy:
    """One pending reason, read."""

    code: str  # squeue's word, as printed
    words: str  # what the job waits for, in a person's words
    fix: str = ""  # what would help ("" when waiting is all there is to do)
    stuck: bool = False  # it never clears by itself: said at once, with the fix
    held: bool = False  # a hold: only a release (or a cancel) moves it
    page: bool = False  # on-call must look (a node's prolog failed, an admin's hold)


_LIMIT_FIX = (
    "Cancel it and ask for less (fewer nodes, a shorter time=), or ask an admin to raise the limit."
)
# (pattern on the reason, words, fix, stuck, held, page), first match wins.
_REASONS: tuple[tuple[str, str, str, bool, bool, bool], ...] = (
    (r"launch failed requeued held", "held: its launch failed on a node (the node's prolog "
     "or container set-up failed) and Slurm requeued it held",
     "On-call is told; once the node is fixed or drained, release it (scontrol release) "
     "or cancel and launch again.", True, True, True),
    (r"JobHeldAdmin", "held by an administrator",
     "Ask on-call or the cluster admin to release it (scontrol release), or cancel it.",
     True, True, True),
    (r"JobHeldUser|job requeued in held state", "held (a user hold, or requeued held)",
     "Release it with scontrol release <job>, or cancel it.", True, True, False),
    (r"JobHoldMaxRequeue", "held: it was requeued too many times",
     "Cancel it and launch again; ask on-call to check the nodes it ran on.", True, True, True),
    (r"DependencyNeverSatisfied", "waiting for a dependency that can never be met "
     "(the job it depends on failed or was cancelled)", "Cancel it and launch again without "
     "the dependency.", True, False, False),
    (r"PartitionTimeLimit", "over the partition's time limit",
     "Cancel it and launch again with a shorter time= (sinfo shows the partition's limit).",
     True, False, False),
    (r"PartitionNodeLimit", "asking for more nodes than the partition allows",
     "Cancel it and launch again with fewer nodes.", True, False, False),
    (r"QOSMax\w*PerJob\w*", "over a per-job limit of its QOS", _LIMIT_FIX, True, False, False),
    (r"AssocMax\w*PerJob\w*", "over a per-job limit of its account", _LIMIT_FIX, True, False,
     False),
    (r"BadConstraints", "asking for node features no node has",
     "Cancel it and launch again with constraints the nodes have.", True, False, False),
    (r"InvalidAccount|InvalidQOS", "under an account or QOS it may not use",
     "Cancel it and check the account and QOS with the cluster admin.", True, False, False),
    (r"Priority", "waiting behind jobs with a higher priority", "", False, False, False),
    (r"Resources", "waiting for nodes to become free", "", False, False, False),
    (r"Dependency", "waiting for the job it depends on", "", False, False, False),
    (r"Reservation|ReqNodeNotAvail.*Reserved", "waiting for its reservation", "", False,
     False, False),
    (r"ReqNodeNotAvail|NodeDown", "waiting for nodes that are down or drained",
     "A smaller launch, or another cluster, may start sooner.", False, False, False),
    (r"PartitionDown|PartitionInactive", "waiting: its partition is down",
     "Ask on-call when the partition comes back, or use another partition.", False, False,
     False),
    (r"(?:QOS|Assoc)\w*(?:Grp|Max)\w*", "waiting for its group's or account's limit to free up",
     "It starts when other jobs of the group end.", False, False, False),
    (r"BeginTime", "waiting for its start time", "", False, False, False),
)  # fmt: skip
_COMPILED = tuple(
    (re.compile(rf"^(?:{pattern})", re.IGNORECASE), PendingWhy("", words, fix, stuck, held, page))
    for pattern, words, fix, stuck, held, page in _REASONS
)


def explain_pending(reason: str) -> PendingWhy | None:
    """``reason`` as squeue printed it, read; None when it says nothing ("None", empty)."""
    code = reason.strip().strip("()")
    if not code or code.lower() == "none":
        return None
    for pattern, why in _COMPILED:
        if pattern.match(code):
            return replace(why, code=code)
    return PendingWhy(code, f"waiting ({code})")
