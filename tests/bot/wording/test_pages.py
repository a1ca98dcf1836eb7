"""The words of a page for on-call (bot/wording/pages.py), one test per cause: what a
cluster printed escaped for Slack, left as it is for PagerDuty."""

from __future__ import annotations

from bot.wording import pages


def test_job_held() -> None:
    facts = {"job": "41", "words": "held by <an admin>", "code": "JobHeldAdmin"}
    assert pages.cause("job_held", facts) == (
        "job 41 is held by &lt;an admin&gt; (Slurm: JobHeldAdmin)"
    )
    assert pages.cause("job_held", facts, plain=True) == (
        "job 41 is held by <an admin> (Slurm: JobHeldAdmin)"
    )
    assert pages.action("job_held", facts) == "Release it (scontrol release) or cancel it."
    # as the engine writes it now: the code alone, worded here
    assert pages.cause("job_held", {"job": "41", "code": "JobHeldAdmin"}) == (
        "job 41 is held by an administrator (Slurm: JobHeldAdmin)"
    )


def test_silent_hang() -> None:
    assert pages.cause("silent_hang", {"quiet_s": 1800}) == (
        "no progress for 30 min while RUNNING (silent hang?)"
    )
    assert pages.action("silent_hang", {}) == "Cancel or Retry from the thread."


def test_node_failure() -> None:
    facts = {"nodes": "dev[0-1]", "job": "7"}
    assert pages.cause("node_failure", facts) == (
        "node failure on dev[0-1] (NODE_FAIL); Slurm requeued job 7"
    )
    assert pages.cause("node_failure", {"job": "7"}) == (
        "node failure (NODE_FAIL); Slurm requeued job 7"
    )
    assert pages.action("node_failure", facts) == "Slurm runs it again."


def test_tokenizer_seed() -> None:
    facts = {"cause": "'mkdir' exited 1: <denied>"}
    assert pages.cause("tokenizer_seed", facts) == "'mkdir' exited 1: &lt;denied&gt;"
    assert pages.action("tokenizer_seed", facts) == "Not retried."


def test_a_failure_the_catalog_diagnosed() -> None:
    facts = {"cause": "NCCL timed out & the job hung", "retry": True}
    assert pages.cause("nccl_timeout", facts) == "NCCL timed out &amp; the job hung"
    assert pages.action("nccl_timeout", facts) == "Retrying."
    assert pages.action("nccl_timeout", {**facts, "retry": False}) == "Not retried."
