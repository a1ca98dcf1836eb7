"""squeue's pending reasons read into plain words (Slurm's job reason codes): a table."""

from __future__ import annotations

import pytest

from cluster.slurm.reasons import explain_pending


@pytest.mark.parametrize(
    ("reason", "words", "stuck", "held", "page"),
    [
        ("Priority", "higher priority", False, False, False),
        ("(Resources)", "nodes to become free", False, False, False),
        ("Dependency", "the job it depends on", False, False, False),
        ("Reservation", "its reservation", False, False, False),
        ("ReqNodeNotAvail, Reserved for maintenance", "its reservation", False, False, False),
        ("QOSMaxJobsPerUserLimit", "limit to free up", False, False, False),
        ("launch failed requeued held", "prolog", True, True, True),
        ("JobHeldAdmin", "held by an administrator", True, True, True),
        ("JobHeldUser", "held", True, True, False),
        ("job requeued in held state", "held", True, True, False),
        ("PartitionTimeLimit", "time limit", True, False, False),
        ("QOSMaxWallDurationPerJobLimit", "per-job limit of its QOS", True, False, False),
        ("QOSMaxGRESPerJob", "per-job limit of its QOS", True, False, False),
        ("DependencyNeverSatisfied", "can never be met", True, False, False),
        ("BadConstraints", "features no node has", True, False, False),
        ("SomethingNew", "waiting (SomethingNew)", False, False, False),
    ],
)
def test_each_reason_in_words(reason: str, words: str, stuck: bool, held: bool, page: bool) -> None:
    why = explain_pending(reason)
    assert why is not None
    assert words in why.words
    assert (why.stuck, why.held, why.page) == (stuck, held, page)
    assert why.fix or not why.stuck  # what never clears by itself always says the fix


@pytest.mark.parametrize("reason", ["None", "", "(None)", "  "])
def test_no_reason_says_nothing(reason: str) -> None:
    assert explain_pending(reason) is None
