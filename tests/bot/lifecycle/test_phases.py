"""The table of a launch's moves (bot/lifecycle/phases/): every allowed move, tested
from each phase it starts from; a move the table does not allow is refused; the
module does no I/O; and the diagram in docs/architecture.md draws the table."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest

from bot.lifecycle import phases
from bot.lifecycle.launch import ACTIVE_PHASES, Attempt, Launch, Phase
from bot.wording import thread
from cluster.watching.tracking import Tracking
from commands.requests import TrainRequest

ROOT = Path(__file__).resolve().parents[3]
NOW = 1_700_000_000.0


def launch(phase: Phase, *, job: str = "", started: bool = False, held: bool = False) -> Launch:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    launch = Launch(request=request, user_id="U1", channel="C1", phase=phase)
    if job:
        launch.attempts.append(
            Attempt(number=1, job_id=job, submitted_at=NOW - 60, started_at=NOW if started else 0)
        )
    if held:
        launch.attempts.append(Attempt(number=2, held=True, held_at=NOW - 1))
    return launch


@dataclass
class Case:
    """A launch in the move's source phase, the facts, and what the events must say."""

    make: Callable[[], Launch]
    facts: phases.Facts = field(default_factory=phases.Facts)
    kinds: list[str] = field(default_factory=list)  # the events' kinds, in order
    says: str = ""  # in the thread line, as bot.wording words it
    check: Callable[[Launch], bool] = lambda _: True
    carries: dict[str, object] = field(default_factory=dict)  # the facts of its thread line


def tracking(job: str) -> Tracking:
    return Tracking(framework="nemo", job_id=job, log_dir="/logs/L")


P = Phase
NOTHING_RAN = (P.QUEUED, P.PREFLIGHT, P.SUBMITTING, P.RETRYING)
CASES: dict[tuple[str, Phase, Phase], Case] = {
    ("queue", P.QUEUED, P.QUEUED): Case(
        lambda: launch(P.QUEUED),
        phases.Facts(by="U1", data={"waits_for": "L-1", "until": "completes"}),
        ["parent", "thread"],
        "Queued by <@U1>: `/train sft llama3p1_8b framework=nemo cluster=a4 nodes=1`\n⏳ It "
        "waits until L-1 completes.",
        carries={
            "by": "U1",
            "command": "/train sft llama3p1_8b framework=nemo cluster=a4 nodes=1",
            "waits_for": "L-1",
        },
    ),
    ("ask_approval", P.QUEUED, P.AWAITING_APPROVAL): Case(
        lambda: launch(P.QUEUED),
        phases.Facts(by="U1", reason="above 4 nodes"),
        ["parent", "thread"],
        "✋ asks for `/train sft llama3p1_8b framework=nemo cluster=a4 nodes=1`. above 4 nodes "
        "A trainbot admin or an approver for a4",
        carries={"by": "U1", "reason": "above 4 nodes", "cluster": "a4"},
    ),
    ("approve", P.AWAITING_APPROVAL, P.QUEUED): Case(
        lambda: launch(P.AWAITING_APPROVAL),
        phases.Facts(by="U2"),
        ["thread", "update", "enqueue"],
        "✅ Approved by <@U2>. Queued.",
        carries={"by": "U2"},
    ),
    ("reject", P.AWAITING_APPROVAL, P.REJECTED): Case(
        lambda: launch(P.AWAITING_APPROVAL),
        phases.Facts(by="U2"),
        ["thread", "update"],
        "⛔ Not approved by <@U2>. Nothing was submitted.",
        lambda launch: (
            launch.outcome == "NOT_APPROVED" and launch.ending == {"move": "reject", "by": "U2"}
        ),
        {"by": "U2"},
    ),
    **{
        ("preflight", source, P.PREFLIGHT): Case(
            partial(launch, source),
            check=lambda launch: launch.submit_started_at == 0.0,
        )
        for source in NOTHING_RAN
    },
    ("dry_run", P.PREFLIGHT, P.DRY_RUN): Case(
        lambda: launch(P.PREFLIGHT),
        phases.Facts(
            outcome="DRY_RUN",
            data={"shell": "bash -s", "script": "srun train", "checks": [[True, "image ok"]]},
        ),
        ["thread", "update"],
        "Dry run: nothing was submitted.",
        # its end: the line's facts less what shows below the first line (the script)
        lambda launch: (
            launch.ending == {"move": "dry_run", "outcome": "DRY_RUN", "shell": "bash -s"}
        ),
        {"shell": "bash -s", "script": "srun train", "checks": [[True, "image ok"]]},
    ),
    ("submitting", P.PREFLIGHT, P.SUBMITTING): Case(
        lambda: launch(P.PREFLIGHT),
        phases.Facts(now=NOW, data={"image": "nemo.sqsh", "notes": ["no pyxis <x>"]}),
        ["thread", "update"],
        "Pre-flight ok: image nemo.sqsh found, directories writable.\nNote: no pyxis &lt;x&gt;.",
        lambda launch: launch.submit_started_at == NOW and launch.preflight_said == 0,
        {"image": "nemo.sqsh", "notes": ["no pyxis <x>"]},
    ),
    ("submitted", P.SUBMITTING, P.SUBMITTED): Case(
        lambda: launch(P.SUBMITTING),
        phases.Facts(now=NOW, job_id="41", partition="a4", tracking=tracking("41")),
        ["thread", "update"],
        "Submitted: Slurm job 41 on a4, partition a4, 1 node. Logs: `/logs/L`",
        lambda launch: launch.job_id == "41" and launch.submit_started_at == 0.0,
        {
            "job": "41",
            "how": "submitted",
            "cluster": "a4",
            "partition": "a4",
            "nodes": 1,
            "log_dir": "/logs/L",
            "attempt": 1,
        },
    ),
    ("submitted", P.DONE, P.DONE): Case(
        lambda: launch(P.DONE),
        phases.Facts(now=NOW, job_id="41", tracking=tracking("41")),
        ["thread"],
        "🚫 Slurm job 41 appeared after the launch was cancelled",
        lambda launch: launch.attempts[-1].slurm_state == "CANCELLED",
        {"job": "41", "after_cancel": True},
    ),
    **{
        ("not_submitted", source, P.REJECTED): Case(
            partial(launch, source),
            phases.Facts(outcome="PREFLIGHT", data={"why": "preflight", "error": "no partition"}),
            ["thread", "update"],
            "Not submitted: no partition",
            lambda launch: (
                launch.outcome == "PREFLIGHT" and launch.ending["error"] == "no partition"
            ),
            {"why": "preflight", "error": "no partition", "outcome": "PREFLIGHT"},
        )
        for source in NOTHING_RAN
    },
    ("not_started", P.QUEUED, P.DONE): Case(
        lambda: launch(P.QUEUED),
        phases.Facts(
            outcome="PARENT_FAILED",
            detail="L-1 ended FAILED",
            data={"why": "parent_ended", "parent": "L-1", "parent_outcome": "FAILED"},
        ),
        ["thread", "update"],
        "⛔ Not started, because L-1, which this launch waited for, ended FAILED. Nothing",
        lambda launch: (
            (launch.outcome, launch.ending)
            == ("PARENT_FAILED", {"move": "said", "text": "L-1 ended FAILED"})
        ),
        {"why": "parent_ended", "parent": "L-1", "outcome": "PARENT_FAILED"},
    ),
    **{
        ("given_up", source, P.DONE): Case(
            partial(launch, source, job="41"),
            phases.Facts(data={"error": "KeyError", "tries": 10, "rounds": 2, "hours": 24.5}),
            ["thread", "update"],
            "❌ This launch failed inside trainbot (KeyError), 10 times in each of 2 tries over "
            "24.5 h",
            lambda launch: (
                launch.outcome == "INTERNAL_ERROR" and launch.ending["error"] == "KeyError"
            ),
            {"error": "KeyError", "tries": 10, "rounds": 2},
        )
        for source in ACTIVE_PHASES
    },
    ("running", P.SUBMITTED, P.RUNNING): Case(
        lambda: launch(P.SUBMITTED, job="41"),
        phases.Facts(now=NOW, nodes="dev[0-1]"),
        ["thread"],
        "Running on dev[0-1].",
        lambda launch: launch.attempts[-1].started_at == NOW,
        {"job": "41", "nodes": "dev[0-1]"},
    ),
    ("requeued", P.RUNNING, P.SUBMITTED): Case(
        lambda: launch(P.RUNNING, job="41", started=True),
        phases.Facts(job_id="41"),
        ["thread"],
        "Job 41 is pending again (requeued).",
        carries={"job": "41"},
    ),
    **{
        ("ended", source, P.DONE): Case(
            partial(launch, source, job="41"),
            phases.Facts(outcome="FAILED"),
            check=lambda launch: launch.outcome == "FAILED",
        )
        for source in (P.SUBMITTED, P.RUNNING)
    },
    **{
        ("retry_failure", source, P.RETRYING): Case(
            partial(launch, source, job="41"),
            phases.Facts(attempt=Attempt(number=2, not_before=NOW + 30)),
            ["enqueue", "update"],
            check=lambda launch: len(launch.attempts) == 2 and not launch.attempts[-1].held,
        )
        for source in (P.SUBMITTED, P.RUNNING)
    },
    **{
        ("resume", source, P.RETRYING): Case(
            partial(launch, source, job="41"),
            phases.Facts(
                now=NOW,
                attempt=Attempt(number=2, resume=True),
                data={"step": 37, "total": 100, "why": "its time budget", "attempt": 2},
            ),
            ["thread", "enqueue", "update"],
            "⏸️ STOPPED EARLY at step 37 / 100 (its time budget; Slurm: COMPLETED) · resuming "
            "from it (attempt 2).",
            lambda launch: launch.resumes == 1 and launch.attempts[-1].resume and launch.active,
            {"job": "41", "step": 37, "total": 100, "attempt": 2},
        )
        for source in (P.SUBMITTED, P.RUNNING)
    },
    **{
        ("stopped_early", source, P.DONE): Case(
            partial(launch, source, job="41"),
            phases.Facts(data={"step": 37, "total": 100, "why": "its time budget"}),
            check=lambda launch: (
                launch.outcome == "STOPPED_EARLY"
                and not launch.active
                and launch.ending
                == {"move": "stopped_early", "step": 37, "total": 100, "why": "its time budget"}
            ),
        )
        for source in (P.SUBMITTED, P.RUNNING)
    },
    **{
        ("retry", source, P.RETRYING): Case(
            partial(launch, source, job="41"),
            phases.Facts(now=NOW, by="U2", job_id="41"),
            ["thread", "update", "enqueue"],
            "🔁 Retry asked for by <@U2>: cancelling job 41",
            lambda launch: launch.attempts[-1].held and launch.attempts[-1].resume,
            {"by": "U2", "job": "41"},
        )
        for source in (P.SUBMITTED, P.RUNNING)
    },
    ("reroute", P.SUBMITTED, P.RETRYING): Case(
        lambda: launch(P.SUBMITTED, job="41"),
        phases.Facts(job_id="41", cluster="a3u", due=NOW + 60),
        ["update", "enqueue"],
        check=lambda launch: launch.rerouted and launch.attempts[-1].cluster == "a3u",
    ),
    ("move_refused", P.SUBMITTED, P.SUBMITTED): Case(
        lambda: launch(P.SUBMITTED, job="41"),
        phases.Facts(cluster="a3u", data={"left": "a4", "refusal": "you may not."}),
        ["thread"],
        "🔀 Still pending on a4; a3u would start it now, but it was not moved there: you may not.",
        lambda launch: launch.rerouted and len(launch.attempts) == 1,
        {"job": "41", "cluster": "a3u", "left": "a4", "refusal": "you may not."},
    ),
    ("old_job_gone", P.RETRYING, P.RETRYING): Case(
        lambda: launch(P.RETRYING, job="41", held=True),
        phases.Facts(now=NOW, job_id="41"),
        ["thread"],
        "Job 41 is gone: submitting a new attempt.",
        lambda launch: not launch.attempts[-1].held and launch.attempts[0].ended_at == NOW,
        {"job": "41"},
    ),
    ("moved", P.RETRYING, P.RETRYING): Case(
        lambda: launch(P.RETRYING, job="41", held=True),
        phases.Facts(now=NOW, job_id="41", data={"left": "a4", "waited_s": 600, "why": "idle"}),
        ["thread", "enqueue", "update"],
        "🔀 Still pending on a4 after 10 min while a4 would start it now (idle): cancelled job 41",
        lambda launch: not launch.attempts[-1].held,
        {"job": "41", "left": "a4", "waited_s": 600, "why": "idle"},
    ),
    ("old_job_stays", P.RETRYING, P.RUNNING): Case(
        lambda: launch(P.RETRYING, job="41", started=True, held=True),
        phases.Facts(job_id="41", reason="scancel timed out"),
        ["thread", "update"],
        "⚠️ Job 41 could not be cancelled (scancel timed out); it keeps running",
        lambda launch: len(launch.attempts) == 1,
        {"job": "41", "error": "scancel timed out"},
    ),
    ("old_job_stays", P.RETRYING, P.SUBMITTED): Case(
        lambda: launch(P.RETRYING, job="41", held=True),
        kinds=["update"],
        check=lambda launch: len(launch.attempts) == 1,
    ),
    ("retry_failed", P.RETRYING, P.DONE): Case(
        lambda: launch(P.RETRYING, job="41", held=True),
        phases.Facts(reason="no space left"),
        ["thread", "update"],
        "Could not seed the tokenizer cache: no space left. Not retrying.",
        lambda launch: launch.outcome == "FAILED" and len(launch.attempts) == 1,
        {"error": "no space left"},
    ),
    **{
        ("cancel", source, P.DONE): Case(
            partial(launch, source),
            phases.Facts(now=NOW, by="U2"),
            ["thread", "update"],
            "🚫 Cancelled by <@U2>.",
            lambda launch: (
                launch.outcome == "CANCELLED"
                and launch.cancelled_by == "U2"
                and launch.ending == {"move": "cancel", "by": "U2"}
            ),
            {"by": "U2"},
        )
        for source in ACTIVE_PHASES
    },
    **{
        ("cancel", source, source): Case(
            partial(launch, source, job="41"),
            phases.Facts(now=NOW, by="U2"),
            ["thread", "update"],
            "🚫 Cancelled by <@U2>.",
            lambda launch: launch.cancelled_at == NOW and not launch.outcome,
            {"by": "U2", "job": "41"},
        )
        for source in (P.SUBMITTED, P.RUNNING)
    },
}


def move(name: str) -> phases.Move:
    """The function of a move of the table: it bears the move's name."""
    found: phases.Move = getattr(phases, name)
    return found


def edge_id(key: tuple[str, Phase, Phase]) -> str:
    name, source, target = key
    return f"{name}:{source.value}->{target.value}"


@pytest.mark.parametrize("key", list(CASES), ids=edge_id)
def test_each_allowed_move(key: tuple[str, Phase, Phase]) -> None:
    name, source, target = key
    case = CASES[key]
    launch = case.make()
    assert launch.phase == source
    moved, events = move(name)(launch, case.facts)
    assert moved.phase == target
    assert [e.kind for e in events] == case.kinds
    lines = [e for e in events if e.kind == "thread"]
    if case.says:
        assert case.says in thread.line(lines[-1])
    if case.carries:  # a move says what happened as facts, and no words of its own
        assert lines[-1].data.items() >= case.carries.items() and not lines[-1].text
    for line in lines:  # each line carries the move's facts
        assert line.data["move"] == name
        if case.facts.by:
            assert line.data["by"] == case.facts.by
    assert case.check(moved)


def test_the_moves_tested_are_the_table() -> None:
    """A new move (or a new phase it starts from) fails here until it has a case."""
    table = {(e.name, e.source, e.target) for e in phases.TABLE}
    assert set(CASES) == table
    assert all(move(name).__name__ == name for name in phases.MOVES)


@pytest.mark.parametrize(
    ("name", "phase"),
    [
        ("submitting", Phase.QUEUED),  # pre-flight first
        ("approve", Phase.QUEUED),
        ("running", Phase.DONE),
        ("retry", Phase.RETRYING),
        ("cancel", Phase.DONE),  # a cancel is final: nothing after the end
        ("preflight", Phase.SUBMITTED),
    ],
)
def test_a_move_the_table_does_not_allow_is_refused(name: str, phase: Phase) -> None:
    stored = launch(phase, job="41")
    before = stored.model_dump()
    with pytest.raises(phases.NotAllowed, match=f"{name} is not allowed from {phase.value}"):
        move(name)(stored, phases.Facts(now=NOW, by="U2", job_id="41"))
    assert stored.model_dump() == before  # refused before anything changed


def test_step_leaves_a_launch_that_moved_on_alone() -> None:
    """In a store transaction a move that no longer applies (a cancel came first) is
    no change at all."""
    stored = launch(Phase.DONE)
    change = phases.step(phases.submitting, phases.Facts(now=NOW))
    assert change(stored) == [] and stored.phase == Phase.DONE
    queued = launch(Phase.QUEUED)
    assert phases.step(phases.preflight, phases.Facts())(queued) == []
    assert queued.phase == Phase.PREFLIGHT


def test_a_retry_holds_and_queues_and_a_cancel_wins() -> None:
    """Retry holds the launch and queues it; nothing goes on until the old job is gone
    (old_job_gone), and a launch cancelled meanwhile is not retried."""
    stored = launch(Phase.RUNNING, job="41", started=True)
    stored.cancelled_by = "U3"
    _, events = phases.retry(stored, phases.Facts(now=NOW, by="U2", job_id="41"))
    assert events == [] and stored.phase == Phase.RUNNING
    fresh = launch(Phase.RUNNING, job="41", started=True)
    _, events = phases.retry(fresh, phases.Facts(now=NOW, by="U2", job_id="40"))  # old job
    assert events == [] and fresh.phase == Phase.RUNNING


def test_the_module_is_pure() -> None:
    """bot/lifecycle/phases/ imports the standard library, the launch and its events:
    nothing that does I/O, and no Slack words (bot.wording says them)."""
    allowed = {"__future__", "collections.abc", "dataclasses", "typing"}
    allowed |= {"bot.lifecycle.events", "bot.lifecycle.launch"}
    allowed |= {f"bot.lifecycle.phases.{part}" for part in ("following", "starting", "table")}
    allowed |= {
        "cluster.watching.tracking",
        "cluster.launching.run_record",
    }  # TYPE_CHECKING only: types
    imported = set()
    modules = sorted((ROOT / "bot/lifecycle/phases").glob("*.py"))
    assert len(modules) == 4, modules
    for node in (n for m in modules for n in ast.walk(ast.parse(m.read_text()))):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
        elif isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
    assert imported <= allowed, imported - allowed


def test_the_architecture_diagram_draws_the_table() -> None:
    """docs/architecture.md's state diagram has an arrow for each pair of phases the
    table links (moves that keep the phase are not drawn), named by its moves."""
    text = (ROOT / "docs/architecture.md").read_text()
    block = text.split("## A launch's phases", 1)[1].split("```mermaid", 1)[1].split("```")[0]
    drawn: dict[tuple[str, str], set[str]] = {}
    for source, target, label in re.findall(r"^\s*(\S+) --> (\S+?)(?:: (.*))?$", block, re.M):
        if target != "[*]":
            drawn[(source, target)] = {m.strip() for m in label.split(",")}
    table: dict[tuple[str, str], set[str]] = {}
    for edge in phases.TABLE:
        if edge.source == edge.target and not edge.new:
            continue
        source = "[*]" if edge.new else edge.source.name
        table.setdefault((source, edge.target.name), set()).add(edge.name)
    assert drawn == table
