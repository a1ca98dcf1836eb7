"""The words of how a launch ends: the closing line of its thread, a failed attempt, a run
that stopped early, the ways it ends before Slurm runs it, and the record's one sentence
(``launch.ending``: the facts of its end) the parent message, the API and a child's
``after=`` line repeat.

Pure: facts in, Slack mrkdwn out. Every fact a cluster printed, a person typed or a config
named is escaped here; the engine that wrote the facts words nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bot.lifecycle.health import TRAINBOT
from bot.lifecycle.measures import duration
from bot.text.mrkdwn import code_block, escape
from bot.wording.facts import Facts, count, fact, mention, number

SENTENCE_MAX = 300  # characters of the record's sentence

OUTCOME_ICONS = {
    "COMPLETED": "✅",
    "FAILED": "❌",
    "CANCELLED": "🚫",
    "TIMEOUT": "⌛",
    "NODE_FAIL": "💥",
    "OUT_OF_MEMORY": "❌",
    "PREEMPTED": "⏸️",
    "BOOT_FAIL": "💥",
    "DEADLINE": "⌛",
    "STOPPED_EARLY": "⏸️",
}
OUTCOME_WORDS = {"STOPPED_EARLY": "STOPPED EARLY"}  # trainbot's own outcomes, in words


def who_cancelled(by: str) -> str:
    """Who cancelled a launch, as the thread says it: a person, or trainbot itself."""
    return "trainbot (its loss went NaN)" if by == TRAINBOT else mention(by)


def _job(facts: Facts) -> str:
    job = fact(facts, "job")
    return f"Job {escape(job)}" if job else "The job"


# -- an attempt that ended badly ---------------------------------------------------------


def job_failed(facts: Facts) -> str:
    """``⚠️ Job 42 failed (FAILED) after 3 min: <cause>.``, the evidence, what to read, and
    what is done about it (the failure catalog's decision)."""
    ran = duration(number(facts, "ran_s"))
    text = f"⚠️ {_job(facts)} failed ({escape(fact(facts, 'state'))}) after {ran}: "
    text += f"{escape(fact(facts, 'cause'))}."
    evidence = facts.get("evidence") or []
    if isinstance(evidence, Sequence) and not isinstance(evidence, str) and evidence:
        text += "\n" + code_block("\n".join(str(line) for line in evidence))
    if read := fact(facts, "read"):
        text += f"\nRead: {escape(read)}."
    if facts.get("output_cut"):
        text += (
            "\nsrun force-terminated the job's tasks after the first one failed, and output "
            "still on its way to the log is lost then: the cause may be missing from the logs."
        )
    return text + "\n" + escape(fact(facts, "reason"))


def cancel_ended(facts: Facts) -> str:
    """The job of a cancelled launch ended: never retried, whatever its log shows."""
    who = who_cancelled(fact(facts, "by"))
    state = escape(fact(facts, "state"))
    return f"🚫 {_job(facts)} ended ({state}) after {who} cancelled it; not retried."


# -- a run that COMPLETED short of its total, and is not resumed ---------------------------

BLOCKERS: dict[str, str] = {
    "cancelled": "it was cancelled",
    "policy_never": "the policy resumes no run (watch.resume_stopped_early)",
    "policy_time_budget": (
        "the policy resumes only a run that stopped on its time budget (watch.resume_stopped_early)"
    ),
    "no_checkpoint": "it saved no checkpoint in this attempt",
    "no_progress": "it made no progress in this attempt",
}


def blocker(facts: Facts) -> str:
    """Why a run that stopped early was not resumed (``blocker``: a code), in plain words."""
    code = fact(facts, "blocker")
    if code == "max_resumes":
        return f"it was resumed {count(facts, 'resumes')} times already (watch.max_resumes)"
    return BLOCKERS.get(code, code)


def _where(facts: Facts) -> str:
    return f"step {count(facts, 'step'):,} / {count(facts, 'total'):,}"


def stopped_early(facts: Facts) -> str:
    """``⏸️ STOPPED EARLY at step 40 / 100 (its time budget; Slurm: COMPLETED) ...``: not a
    success; why it was not resumed, and the command that goes on from its checkpoint."""
    ckpt = fact(facts, "checkpoint")
    text = f"⏸️ STOPPED EARLY at {_where(facts)} ({escape(fact(facts, 'why'))}; Slurm: COMPLETED)"
    if ckpt:
        text += f" · checkpoint {escape(ckpt)}"
    text += f". Not resumed: {escape(blocker(facts))}."
    if again := fact(facts, "again"):
        text += f" To go on from its checkpoint: `{escape(again)}`"
    return text


# -- the closing line --------------------------------------------------------------------


def _summary(facts: Facts) -> str:
    outcome = fact(facts, "outcome") or "DONE"
    attempts = count(facts, "attempts")
    parts = [
        f"in {duration(number(facts, 'elapsed_s'))}",
        f"{attempts} attempt{'s' if attempts != 1 else ''}",
        f"{number(facts, 'gpu_hours'):.2g} GPU-hours",
    ]
    if ckpt := fact(facts, "checkpoint"):
        parts.append(f"last checkpoint {escape(ckpt)}")
    exit_code = fact(facts, "exit_code")
    if outcome != "COMPLETED" and exit_code and exit_code != "0:0":
        parts.append(f"exit code {escape(exit_code)}")
    icon, word = OUTCOME_ICONS.get(outcome, "❔"), OUTCOME_WORDS.get(outcome, outcome)
    return f"{icon} {escape(word)} " + " · ".join(parts)


def closing(facts: Facts) -> str:
    """The last line of a launch's thread: ``✅ COMPLETED in 41 min · 1 attempt · 5.5
    GPU-hours · last checkpoint step 1,000``; after the line of a run that stopped early;
    a run whose Slurm state was COMPLETED although its loss went NaN is no plain success;
    an unexplained failure shows the last lines of its log."""
    text = _summary(facts)
    stopped = facts.get("stopped")
    if isinstance(stopped, Mapping) and stopped:
        text = f"{stopped_early(stopped)}\n{text}"
    nan_step = facts.get("nan_step")
    if fact(facts, "state") == "COMPLETED" and isinstance(nan_step, int):
        first, _, rest = text.partition("\n")
        text = (
            f"⚠️ {first} — but its loss went NaN/inf at step {nan_step:,}: "
            "the model it saved after that is likely unusable."
        ) + ("\n" + rest if rest else "")
    tail = facts.get("tail") or []
    if isinstance(tail, Sequence) and not isinstance(tail, str) and tail:
        text += "\nLast lines of the log:\n" + code_block("\n".join(str(line) for line in tail))
    return text


# -- the ways a launch ends before Slurm runs it ------------------------------------------


def not_submitted(facts: Facts) -> str:
    """Refused before Slurm ran anything (``why``): pre-flight, sbatch, no thread, the
    cluster out of reach, an error of the cluster's."""
    why, error = fact(facts, "why"), escape(fact(facts, "error"))
    if why == "refused":
        return "Slurm refused the job:\n" + code_block(fact(facts, "output"))
    if why == "unreachable":
        return f"Not submitted: {error}. Tried {count(facts, 'tries')} times."
    if why == "no_thread":
        return (
            f"Not submitted: trainbot could not post this launch's thread in "
            f"<#{escape(fact(facts, 'channel'))}> ({escape(fact(facts, 'refused'))}), and a "
            "launch never runs without one. Invite the bot there, or use a channel it is in, "
            "and `/train` again."
        )
    text = f"Not submitted: {error}"
    if why == "preflight" and (partition := fact(facts, "partition")):
        text += f" Re-run with partition={escape(partition)}?"
    return text


def dry_run(facts: Facts) -> str:
    """What a dry run would have run: the remote command, the script, each pre-flight check."""
    checks = facts.get("checks") or []
    said = "\n".join(
        ("✓ " if ok else "✗ ") + escape(str(message))
        for ok, message in (checks if isinstance(checks, Sequence) else [])
    )
    user = fact(facts, "user")
    as_user = f", as {escape(user)}," if user else ""
    return (
        f"Dry run: nothing was submitted. On the login node{as_user} trainbot would run "
        f"`{escape(fact(facts, 'shell'))}` with this script on stdin (secrets redacted):\n"
        f"{code_block(fact(facts, 'script'))}\nPre-flight:\n{said}"
    )


def given_up(facts: Facts) -> str:
    """It failed inside trainbot on every try (the dead letters): nothing more happens."""
    return (
        f"❌ This launch failed inside trainbot ({escape(fact(facts, 'error'))}), "
        f"{count(facts, 'tries')} times in each of {count(facts, 'rounds')} tries over "
        f"{number(facts, 'hours'):.1f} h; it was given up "
        "(dead letters). Nothing more will happen to it; `/train` again to retry."
    )


def retry_failed(facts: Facts) -> str:
    return f"Could not seed the tokenizer cache: {escape(fact(facts, 'error'))}. Not retrying."


SAYINGS: dict[str, Callable[[Facts], str]] = {
    "job_failed": job_failed,
    "cancel_ended": cancel_ended,
    "closing": closing,
    "not_submitted": not_submitted,
    "dry_run": dry_run,
    "given_up": given_up,
    "retry_failed": retry_failed,
}


# -- the record's sentence ---------------------------------------------------------------


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0]


ENDINGS: dict[str, Callable[[Facts], str]] = {
    "reject": lambda f: f"Not approved by {mention(fact(f, 'by'))}.",
    "cancel": lambda f: f"🚫 Cancelled by {mention(fact(f, 'by'))}.",
    "cancel_ended": lambda f: f"Cancelled by {who_cancelled(fact(f, 'by'))}.",
    "job_failed": lambda f: f"{escape(fact(f, 'cause'))}. {escape(fact(f, 'reason'))}",
    "stopped_early": lambda f: (
        f"Stopped early at {_where(f)} ({escape(fact(f, 'why'))}); not resumed: "
        f"{escape(blocker(f))}."
    ),
    "said": lambda f: escape(fact(f, "text")),  # a plain sentence its move was given
    "closing": lambda f: _first_line(closing({**f, "stopped": {}, "tail": []})),
}


def ending(facts: Mapping[str, Any]) -> str:
    """The record's one sentence of how it ended (``launch.ending``), "" for none: the
    move's own sentence, else the first line of its closing thread line."""
    move = str(facts.get("move", ""))
    say = ENDINGS.get(move) or SAYINGS.get(move)
    if say is None:
        return ""
    return _first_line(say(facts))[:SENTENCE_MAX]


def sentence(ended: Mapping[str, Any], detail: str) -> str:
    """What the record says of its end: its facts worded; a record written before ends
    carried facts holds its sentence (``detail``, mrkdwn already) and that is shown."""
    return ending(ended) if ended else detail
