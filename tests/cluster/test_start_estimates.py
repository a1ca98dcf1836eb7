"""Parsers and builders for start estimates (``sbatch --test-only``) and used GPU-hours
(``sacct`` ElapsedRaw and AllocTRES). Pure: no cluster."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime

import pytest

from cluster.slurm import sacct, sbatch

# As the dev cluster's Slurm 22.05 printed them (times in UTC: TZ=UTC0).
STARTS_NOW = (
    "sbatch: Job 2 to start at 2026-12-03T10:27:27 using 2 processors on nodes dev[0-1] "
    "in partition a4\n"
)
TOO_BIG = "allocation failure: Requested node configuration is not available\n"
BAD_PARTITION = (
    "sbatch: error: invalid partition specified: nope\n"
    "allocation failure: Invalid partition name specified\n"
)


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_test_only_start_nodes_and_partition() -> None:
    estimate = sbatch.parse_test_only(STARTS_NOW)
    assert estimate.start == epoch("2026-12-03T10:27:27")
    assert (estimate.nodes, estimate.partition, estimate.error) == ("dev[0-1]", "a4", "")
    assert estimate.wait_s is None  # the login node's clock was not read


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        (TOO_BIG, "Requested node configuration is not available"),
        (BAD_PARTITION, "Invalid partition name specified"),
        ("", "no answer from sbatch"),
        ("sbatch: error: Batch job submission failed: Invalid account\n", "Batch job "
         "submission failed: Invalid account"),
    ],
)  # fmt: skip
def test_test_only_refusals_keep_slurms_reason(output: str, reason: str) -> None:
    estimate = sbatch.parse_test_only(output)
    assert estimate.start is None and estimate.error == reason and estimate.wait_s is None


def test_wait_is_measured_on_the_login_nodes_clock() -> None:
    from dataclasses import replace

    later = replace(sbatch.parse_test_only(STARTS_NOW), asked_at=epoch("2026-12-03T10:20:27"))
    assert later.wait_s == 420
    past = replace(later, asked_at=epoch("2026-12-03T10:30:00"))
    assert past.wait_s == 0  # Slurm says "now" with the second it answered


def test_test_only_command_has_the_launch_shape_and_quotes_every_value() -> None:
    shape = sbatch.JobShape(nodes=2, partition="a4", time_limit="01:00:00", account="vision")
    command = sbatch.build_test_only(shape, gpus_per_node=8)
    assert command.startswith("TZ=UTC0 sbatch --test-only ") and command.endswith(" 2>&1")
    words = shlex.split(command.removeprefix("TZ=UTC0 ").removesuffix(" 2>&1"))
    assert words[words.index("-N") + 1] == "2" and words[words.index("-p") + 1] == "a4"
    assert "--gres=gpu:8" in words and words[words.index("-t") + 1] == "01:00:00"
    assert words[words.index("--account") + 1] == "vision" and words[-1] == "--wrap=true"
    bare = shlex.split(sbatch.build_test_only(sbatch.JobShape(1, "a3m"), gpus_per_node=4))
    assert "-t" not in bare and "--account" not in bare and "--gres=gpu:4" in bare


def test_wait_survey_output_by_partition_and_size() -> None:
    asked = epoch("2026-12-03T10:00:00")
    output = (
        f"{sbatch.WAIT_MARK} a4 1\n"
        "sbatch: Job 7 to start at 2026-12-03T10:00:00 using 1 processors on nodes dev0 "
        "in partition a4\n"
        f"{sbatch.WAIT_MARK} a4 4\n"
        "sbatch: Job 8 to start at 2026-12-03T10:25:00 using 4 processors on nodes dev[0-3] "
        "in partition a4\n"
        f"{sbatch.WAIT_MARK} a4 8\n{TOO_BIG}"
    )
    waits = sbatch.parse_wait_survey(output, asked)
    assert sorted(waits) == [("a4", 1), ("a4", 4), ("a4", 8)]
    assert waits[("a4", 1)].wait_s == 0 and waits[("a4", 4)].wait_s == 1500
    assert waits[("a4", 8)].start is None and "not available" in waits[("a4", 8)].error
    survey = sbatch.build_wait_survey((1, 2, 4), gpus_per_node=8, time_limit=None, account=None)
    assert "for n in 1 2 4;" in survey and '-N "$n" -p "$p"' in survey


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [
        ("billing=2,cpu=2,gres/gpu=16,node=2", 16),  # the dev cluster's
        ("billing=16,cpu=16,gres/gpu:h100=8,gres/gpu=8,mem=64G,node=1", 8),
        ("cpu=4,gres/gpu:a100=4,gres/gpu:h100=2,node=2", 6),  # typed only: their sum
        ("cpu=2,mem=4G,node=1", 0),
        ("", 0),
        ("gres/gpu=x", 0),
    ],
)
def test_alloc_tres_gpus(tres: str, gpus: int) -> None:
    assert sacct.tres_gpus(tres) == gpus


def test_sacct_gpu_hours_over_every_incarnation() -> None:
    text = (
        "133|run-L-abc123|NODE_FAIL|0:0|0:0|None|00:30:00|dev[0-1]|1800|"
        "billing=2,cpu=2,gres/gpu=16,node=2\n"
        "133|run-L-abc123|COMPLETED|0:0|0:0|None|01:00:00|dev[2-3]|3600|"
        "billing=2,cpu=2,gres/gpu=16,node=2\n"
        "134|pending-one|PENDING|0:0|0:0|None|00:00:00|None assigned|0|\n"
    )
    records = sacct.merge_acct(sacct.parse_sacct(text))
    assert records["133"].latest.elapsed_s == 3600
    assert records["133"].gpu_hours == pytest.approx(0.5 * 16 + 1.0 * 16)
    assert records["134"].gpu_hours == 0
