"""Megatron's re-run verdicts, as a GPU printed them, against the failure catalog: a NaN
that a re-run does not reproduce (exit 17) and one it does on the same GPU (exit 16, a
checkpoint saved, "re-run on a different GPU") are retried once without that node; a
NaN with re-runs off stays the run's own (told, not retried). The logs are the captured
ones (tests/cluster/data/megatron/captured, megatron-core 0.19.2 on an H100), whose node
was called ``vm``."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.slurm.sacct import merge_acct, parse_sacct
from cluster.watching.diagnosis import diagnose
from cluster.watching.evidence import Evidence, EvidenceFile
from tests.cluster.test_failures import decide_on

CAPTURED = Path(__file__).parent / "data" / "megatron" / "captured"


def evidence_of(run: str, exit_code: int, node_list: str = "vm") -> Evidence:
    text = (CAPTURED / f"{run}.log").read_text()
    sacct = f"4242|pretrain|FAILED|{exit_code}:0||None|00:01:00|{node_list}|1|\n"
    (record,) = merge_acct(parse_sacct(sacct)).values()
    log = EvidenceFile(path=f"/jobs/{run}.log", text=text, size=len(text))
    return Evidence(job_id="4242", files=(log,), record=record, state="FAILED")


@pytest.mark.parametrize(
    ("run", "exit_code", "key"),
    [
        ("nan-transient", 17, "megatron_result_transient"),
        ("nan-validate", 16, "megatron_result_on_other_gpu"),
    ],
)
def test_a_re_run_verdict_is_retried_once_without_its_node(
    run: str, exit_code: int, key: str
) -> None:
    found = diagnose(evidence_of(run, exit_code))
    assert found is not None and found.kind.key == key
    assert found.failed_node == "vm"  # "Rank 0, node vm, device 0, iteration #13: ..."
    decision = decide_on(found)
    assert decision.retry and decision.exclude_node == "vm"
    assert not decide_on(found, previous=(key,)).retry  # once: a second time is the run's


def test_a_node_the_job_did_not_run_on_is_never_excluded() -> None:
    found = diagnose(evidence_of("nan-transient", 17, node_list="a4-[1-2]"))
    assert found is not None and found.kind.key == "megatron_result_transient"
    assert found.failed_node is None


def test_a_nan_with_re_runs_off_is_the_runs_own() -> None:
    found = diagnose(evidence_of("nan-disabled", 1))
    assert found is not None and found.kind.key == "nan_loss"
    assert not decide_on(found).retry
