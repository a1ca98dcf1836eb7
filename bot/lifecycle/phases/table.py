"""The table of a launch's moves and what every move shares: the facts it is given,
the check that it starts where the table says, and :func:`step`, a move as a store change."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bot.lifecycle.events import Event
from bot.lifecycle.launch import ACTIVE_PHASES, Attempt, Launch, Phase, Terms

if TYPE_CHECKING:
    from cluster.launching.run_record import RunRecord
    from cluster.watching.tracking import Tracking

P = Phase


@dataclass(frozen=True)
class Edge:
    """One allowed move: ``name`` takes a launch from ``source`` to ``target``. A ``new``
    edge starts a launch that is not stored yet (its phase is the default, QUEUED)."""

    name: str
    source: Phase
    target: Phase
    new: bool = False


def _edges(name: str, sources: Iterable[Phase], target: Phase) -> tuple[Edge, ...]:
    return tuple(Edge(name, source, target) for source in sorted(sources))


WAITING = (P.QUEUED, P.PREFLIGHT, P.SUBMITTING, P.RETRYING)  # no job of its own to follow
FOLLOWED = (P.SUBMITTED, P.RUNNING)  # Slurm has its job

TABLE: tuple[Edge, ...] = (
    # /train
    Edge("queue", P.QUEUED, P.QUEUED, new=True),
    Edge("ask_approval", P.QUEUED, P.AWAITING_APPROVAL, new=True),
    Edge("approve", P.AWAITING_APPROVAL, P.QUEUED),
    Edge("reject", P.AWAITING_APPROVAL, P.REJECTED),
    # a worker: pre-flight and submit
    *_edges("preflight", WAITING, P.PREFLIGHT),
    Edge("dry_run", P.PREFLIGHT, P.DRY_RUN),
    Edge("submitting", P.PREFLIGHT, P.SUBMITTING),
    Edge("submitted", P.SUBMITTING, P.SUBMITTED),
    Edge("submitted", P.DONE, P.DONE),  # the job appeared after a cancel: recorded, cancelled
    *_edges("not_submitted", WAITING, P.REJECTED),
    Edge("not_started", P.QUEUED, P.DONE),  # due, but its parent failed, no budget, no checkpoint
    *_edges("given_up", ACTIVE_PHASES, P.DONE),  # failed inside trainbot, for good
    # the poller: Slurm's word on the job
    Edge("running", P.SUBMITTED, P.RUNNING),
    Edge("requeued", P.RUNNING, P.SUBMITTED),
    *_edges("ended", FOLLOWED, P.DONE),
    *_edges("retry_failure", FOLLOWED, P.RETRYING),  # the failure catalog retries it
    # it stopped early on purpose (its time budget): resumed from its checkpoint, or ended
    *_edges("resume", FOLLOWED, P.RETRYING),
    *_edges("stopped_early", FOLLOWED, P.DONE),
    # retries: held until the old job is gone
    *_edges("retry", FOLLOWED, P.RETRYING),  # the Retry button
    Edge("reroute", P.SUBMITTED, P.RETRYING),  # still pending where another would start it
    Edge("move_refused", P.SUBMITTED, P.SUBMITTED),  # the person may not go where it would
    Edge("old_job_gone", P.RETRYING, P.RETRYING),
    Edge("moved", P.RETRYING, P.RETRYING),
    Edge("old_job_stays", P.RETRYING, P.RUNNING),
    Edge("old_job_stays", P.RETRYING, P.SUBMITTED),
    Edge("retry_failed", P.RETRYING, P.DONE),  # the retry could not be prepared
    # Cancel: final. A launch with a job ends when the job does (ended, CANCELLED).
    *_edges("cancel", ACTIVE_PHASES, P.DONE),
    *(Edge("cancel", phase, phase) for phase in FOLLOWED),
)

MOVES: frozenset[str] = frozenset(edge.name for edge in TABLE)
_SOURCES: dict[str, frozenset[Phase]] = {
    name: frozenset(e.source for e in TABLE if e.name == name) for name in MOVES
}
_EDGES = frozenset((e.name, e.source, e.target) for e in TABLE)


class NotAllowed(ValueError):
    """A move the table does not allow from the launch's phase."""


@dataclass(frozen=True)
class Facts:
    """What happened, as the caller saw it. Each move reads the facts it needs."""

    now: float = 0.0  # when (the caller's clock)
    by: str = ""  # who: a Slack user id
    by_name: str = ""
    job_id: str = ""  # which Slurm job
    outcome: str = ""  # the launch's final word (PREFLIGHT, SUBMIT_FAILED, COMPLETED, ...)
    how: str = ""  # submitted: how the job came (submitted, found_after_restart, ...)
    detail: str = ""  # a plain sentence of how it ended, where the move's own facts don't say
    reason: str = ""  # why (a policy's reason, an error)
    data: Mapping[str, object] = field(default_factory=dict)  # the thread line's (buttons)
    attempt: Attempt | None = None  # the new attempt of a retry the failure catalog decided
    tracking: Tracking | None = None  # the job's files, as the framework records them
    record: RunRecord | None = None  # what a submit ran (cluster.launching.run_record)
    partition: str = ""
    nodes: str = ""  # where the job runs
    cluster: str = ""  # where a reroute moves it
    due: float = 0.0  # not before this time
    terms: Terms | None = None  # a reroute: who the launch runs as on its new cluster


Move = Callable[[Launch, Facts], tuple[Launch, list[Event]]]
Change = Callable[[Launch], list[Event]]


def allowed(launch: Launch, move: str) -> bool:
    """Whether ``move`` starts from the launch's phase."""
    return launch.phase in _SOURCES.get(move, frozenset())


def check(launch: Launch, move: str) -> None:
    if move not in MOVES:
        raise NotAllowed(f"{move!r} is not a move of a launch")
    if not allowed(launch, move):
        sources = ", ".join(sorted(p.value for p in _SOURCES[move]))
        raise NotAllowed(
            f"launch {launch.id}: {move} is not allowed from {launch.phase.value} "
            f"(only from {sources})"
        )


def go(launch: Launch, move: str, target: Phase) -> None:
    if (move, launch.phase, target) not in _EDGES:
        raise NotAllowed(
            f"launch {launch.id}: {move} does not go from {launch.phase.value} to {target.value}"
        )
    launch.phase = target


def step(move: Move, facts: Facts) -> Change:
    """``move`` as a change for ``store.launches.mutate``: applied when it starts from the
    stored launch's phase, else nothing (the launch moved on meanwhile: a cancel wins)."""

    def change(stored: Launch) -> list[Event]:
        if not allowed(stored, move.__name__):
            return []
        return move(stored, facts)[1]

    return change


def thread_line(launch: Launch, move: str, **facts: object) -> Event:
    """A thread line of a move: the move and its facts (who, which job, where...), no
    words; ``bot.wording.thread`` says it. Facts that are empty are left out."""
    data: dict[str, object] = {"move": move}
    data.update((key, value) for key, value in facts.items() if value)
    return Event("thread", launch.id, data=data)


# What a line shows below its first (a script, a log's lines, the buttons): not the end's.
BELOW_THE_LINE = frozenset({"script", "checks", "output", "tail", "evidence", "buttons"})


def ending_of(line: Event) -> dict[str, object]:
    """A launch's end as the facts of its closing line, less what shows below its first."""
    return {key: value for key, value in line.data.items() if key not in BELOW_THE_LINE}


def update_parent(launch: Launch) -> Event:
    return Event("update", launch.id)


def enqueue(launch: Launch, due: float = 0.0) -> Event:
    return Event("enqueue", launch.id, data={"due": due} if due else {})
