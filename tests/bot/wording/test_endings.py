"""The words of how a launch ends: each saying of bot.wording.endings from its facts, and the
record's one sentence (``launch.ending``) the parent, the API and a child's line repeat."""

from __future__ import annotations

from typing import Any

import pytest

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase
from bot.wording import endings, render, thread
from commands.requests import TrainRequest

CLOSING = {
    "move": "closing",
    "state": "COMPLETED",
    "outcome": "COMPLETED",
    "elapsed_s": 2460,
    "attempts": 1,
    "gpu_hours": 5.47,
    "checkpoint": "step 1,000",
}

# (facts, what the thread line says, the record's sentence)
SAID: list[tuple[dict[str, Any], str, str]] = [
    (
        CLOSING,
        "✅ COMPLETED in 41 min · 1 attempt · 5.5 GPU-hours · last checkpoint step 1,000",
        "✅ COMPLETED in 41 min · 1 attempt · 5.5 GPU-hours · last checkpoint step 1,000",
    ),
    (
        {**CLOSING, "state": "FAILED", "outcome": "FAILED", "attempts": 2, "exit_code": "1:0"},
        "❌ FAILED in 41 min · 2 attempts · 5.5 GPU-hours · last checkpoint step 1,000 · "
        "exit code 1:0",
        "❌ FAILED in 41 min · 2 attempts",
    ),
    (
        {**CLOSING, "nan_step": 1200},
        "⚠️ ✅ COMPLETED in 41 min · 1 attempt · 5.5 GPU-hours · last checkpoint step 1,000 — but "
        "its loss went NaN/inf at step 1,200: the model it saved after that is likely unusable.",
        "⚠️ ✅ COMPLETED in 41 min",
    ),
    (
        {**CLOSING, "state": "FAILED", "outcome": "FAILED", "tail": ["Traceback <x>", "boom"]},
        "❌ FAILED in 41 min · 1 attempt · 5.5 GPU-hours · last checkpoint step 1,000\n"
        "Last lines of the log:\n```\nTraceback &lt;x&gt;\nboom\n```",
        "❌ FAILED in 41 min · 1 attempt · 5.5 GPU-hours · last checkpoint step 1,000",
    ),
    (
        {
            "move": "job_failed",
            "job": "42",
            "state": "FAILED",
            "ran_s": 190,
            "cause": "CUDA out of memory <gpu 0>",
            "evidence": ["torch.OutOfMemoryError: CUDA out of memory"],
            "read": "the batch is too large",
            "reason": "Not retried: the same error would come again.",
        },
        "⚠️ Job 42 failed (FAILED) after 3 min: CUDA out of memory &lt;gpu 0&gt;.\n"
        "```\ntorch.OutOfMemoryError: CUDA out of memory\n```\n"
        "Read: the batch is too large.\nNot retried: the same error would come again.",
        "CUDA out of memory &lt;gpu 0&gt;. Not retried: the same error would come again.",
    ),
    (
        {"move": "cancel_ended", "job": "42", "state": "CANCELLED", "by": "U0BOB"},
        "🚫 Job 42 ended (CANCELLED) after <@U0BOB> cancelled it; not retried.",
        "Cancelled by <@U0BOB>.",
    ),
    (
        {"move": "cancel_ended", "job": "", "state": "CANCELLED", "by": "trainbot"},
        "🚫 The job ended (CANCELLED) after trainbot (its loss went NaN) cancelled it; not "
        "retried.",
        "Cancelled by trainbot (its loss went NaN).",
    ),
    (
        {"move": "not_submitted", "why": "refused", "output": "sbatch: error: <bad>"},
        "Slurm refused the job:\n```\nsbatch: error: &lt;bad&gt;\n```",
        "Slurm refused the job:",
    ),
    (
        {"move": "not_submitted", "why": "unreachable", "error": "a4: timed out", "tries": 5},
        "Not submitted: a4: timed out. Tried 5 times.",
        "Not submitted: a4: timed out. Tried 5 times.",
    ),
    (
        {"move": "not_submitted", "why": "preflight", "error": "no partition x", "partition": "a4"},
        "Not submitted: no partition x Re-run with partition=a4?",
        "Not submitted: no partition x Re-run with partition=a4?",
    ),
    (
        {"move": "not_submitted", "why": "no_thread", "channel": "C1", "refused": "not_in_channel"},
        "Not submitted: trainbot could not post this launch's thread in <#C1> (not_in_channel), "
        "and a launch never runs without one. Invite the bot there, or use a channel it is in, "
        "and `/train` again.",
        "Not submitted: trainbot could not post this launch's thread in <#C1>",
    ),
    (
        {
            "move": "dry_run",
            "shell": "bash -s",
            "script": "srun <x>",
            "checks": [[True, "image found"], [False, "no <dir>"]],
            "user": "bob",
        },
        "Dry run: nothing was submitted. On the login node, as bob, trainbot would run "
        "`bash -s` with this script on stdin (secrets redacted):\n```\nsrun &lt;x&gt;\n```\n"
        "Pre-flight:\n✓ image found\n✗ no &lt;dir&gt;",
        "Dry run: nothing was submitted. On the login node, as bob, trainbot would run "
        "`bash -s` with this script on stdin (secrets redacted):",
    ),
    (
        {"move": "given_up", "error": "KeyError", "tries": 10, "rounds": 2, "hours": 24.5},
        "❌ This launch failed inside trainbot (KeyError), 10 times in each of 2 tries over "
        "24.5 h; it was given up (dead letters). Nothing more will happen to it; `/train` again "
        "to retry.",
        "❌ This launch failed inside trainbot (KeyError)",
    ),
    (
        {"move": "retry_failed", "error": "disk <full>"},
        "Could not seed the tokenizer cache: disk &lt;full&gt;. Not retrying.",
        "Could not seed the tokenizer cache: disk &lt;full&gt;. Not retrying.",
    ),
]


@pytest.mark.parametrize(("facts", "says", "sentence"), SAID, ids=lambda v: str(v)[:30])
def test_each_ending_saying_words_its_facts(
    facts: dict[str, Any], says: str, sentence: str
) -> None:
    assert thread.line(Event("thread", "L-1", data=facts)) == says
    assert endings.ending(facts).startswith(sentence)  # the first line, at most 300 characters


STOPPED = {"step": 37, "total": 100, "why": "its time budget", "checkpoint": "step 30"}


@pytest.mark.parametrize(
    ("blocker", "words"),
    [
        ({"blocker": "cancelled"}, "it was cancelled"),
        ({"blocker": "policy_never"}, "the policy resumes no run (watch.resume_stopped_early)"),
        (
            {"blocker": "policy_time_budget"},
            "the policy resumes only a run that stopped on its time budget "
            "(watch.resume_stopped_early)",
        ),
        ({"blocker": "no_checkpoint"}, "it saved no checkpoint in this attempt"),
        ({"blocker": "no_progress"}, "it made no progress in this attempt"),
        (
            {"blocker": "max_resumes", "resumes": 3},
            "it was resumed 3 times already (watch.max_resumes)",
        ),
    ],
)
def test_a_stop_short_of_the_total_says_why_it_was_not_resumed(
    blocker: dict[str, Any], words: str
) -> None:
    stopped = {**STOPPED, **blocker, "again": "/train sft llama3p1_8b from=L-1"}
    facts = {**CLOSING, "outcome": "STOPPED_EARLY", "stopped": stopped}
    first, second = thread.line(Event("thread", "L-1", data=facts)).split("\n")
    assert first == (
        "⏸️ STOPPED EARLY at step 37 / 100 (its time budget; Slurm: COMPLETED) · checkpoint "
        f"step 30. Not resumed: {words}. To go on from its checkpoint: "
        "`/train sft llama3p1_8b from=L-1`"
    )
    assert second.startswith("⏸️ STOPPED EARLY in 41 min · 1 attempt")
    ending = {"move": "stopped_early", **STOPPED, **blocker}
    assert endings.ending(ending).startswith(
        f"Stopped early at step 37 / 100 (its time budget); not resumed: {words}"
    )


def launch(**fields: Any) -> Launch:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    return Launch(request=request, user_id="U1", channel="C1", phase=Phase.DONE, **fields)


def test_the_parent_says_the_end_from_its_facts_and_an_old_record_its_sentence() -> None:
    ended = launch(outcome="CANCELLED", ending={"move": "cancel", "by": "U2"})
    assert "🚫 Cancelled by <@U2>." in render.parent(ended, None)[0]
    old = launch(outcome="FAILED", detail="OOM on dev1. Not retried.")  # written before facts
    assert "OOM on dev1. Not retried." in render.parent(old, None)[0]
    plain = launch(outcome="PARENT_FAILED", ending={"move": "said", "text": "L-1 ended <FAILED>"})
    assert "L-1 ended &lt;FAILED&gt;" in render.parent(plain, None)[0]


def test_an_end_of_a_move_this_version_has_no_words_for_says_nothing() -> None:
    assert endings.ending({"move": "from_a_newer_version"}) == ""
    assert endings.sentence({}, "") == ""
