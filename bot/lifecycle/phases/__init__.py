"""A launch's life: its phases, the moves allowed between them (:data:`TABLE`), and one
named function per move.

Pure: no I/O, no clock. A move takes the launch (the record inside a store transaction,
edited in place) and the :class:`Facts` of the move (who, which job, why, when), and
returns the launch and the events to write with it. Core, the workers and the poller
decide *that* something happened (a person pressed Cancel, Slurm has the job, the old
job is gone); the move decides what that does to the launch. A move from a phase the
table does not list for it raises :class:`NotAllowed`; :func:`step` makes a move the
change :meth:`bot.store.launches.Launches.mutate` applies, which does nothing when the launch
is no longer where the move starts (a cancel came first).

Retry's one rule: a retry holds the launch (a new attempt, ``held``) and queues it
(:func:`retry`, :func:`reroute`); only once the old job is known to be gone does the
held attempt go on (:func:`old_job_gone`, :func:`moved`), and when it cannot be cancelled
the launch goes back to following it (:func:`old_job_stays`).
"""

from bot.lifecycle.phases.following import (
    cancel,
    ended,
    move_refused,
    moved,
    old_job_gone,
    old_job_stays,
    requeued,
    reroute,
    resume,
    retry,
    retry_failed,
    retry_failure,
    running,
    settle_move,
    stopped_early,
)
from bot.lifecycle.phases.starting import (
    approve,
    ask_approval,
    dry_run,
    given_up,
    not_started,
    not_submitted,
    preflight,
    queue,
    reject,
    submitted,
    submitting,
)
from bot.lifecycle.phases.table import (
    MOVES,
    TABLE,
    Change,
    Edge,
    Facts,
    Move,
    NotAllowed,
    allowed,
    step,
)

__all__ = [
    "Change",
    "Edge",
    "Facts",
    "MOVES",
    "Move",
    "NotAllowed",
    "TABLE",
    "allowed",
    "approve",
    "ask_approval",
    "cancel",
    "dry_run",
    "ended",
    "given_up",
    "moved",
    "not_started",
    "not_submitted",
    "old_job_gone",
    "old_job_stays",
    "preflight",
    "queue",
    "reject",
    "requeued",
    "move_refused",
    "reroute",
    "resume",
    "retry",
    "retry_failed",
    "retry_failure",
    "running",
    "settle_move",
    "stopped_early",
    "step",
    "submitted",
    "submitting",
]
