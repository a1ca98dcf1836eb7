"""The failure catalog on texts recorded from the dev cluster (and a few hand-written
ones, see data/failures/README.md), and the retry decisions that follow."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.diagnosis import (
    BY_KEY,
    CATALOG,
    MAX_EVIDENCE,
    MAX_LINE_CHARS,
    Diagnosis,
    Reaction,
    diagnose,
    retry_decision,
)
from cluster.slurm import STATES, merge_acct, parse_sacct

DATA = Path(__file__).parent / "data" / "failures"


def text(case: str) -> str:
    """A case's log followed by Slurm's output, as a watcher reading both would see them."""
    parts = [DATA / f"{case}{ext}" for ext in (".log", ".out", ".stderr")]
    return "\n".join(p.read_text() for p in parts if p.exists())


def recorded(case: str) -> Diagnosis | None:
    record = merge_acct(parse_sacct((DATA / f"{case}.sacct").read_text()))
    (acct,) = record.values()
    return diagnose(
        text(case),
        slurm_state=acct.latest.raw_state,
        exit_code=acct.latest.exit_code,
        node_list=acct.earlier[-1].nodelist if acct.earlier else acct.latest.nodelist,
        earlier_states=[row.raw_state for row in acct.earlier],
    )


@pytest.mark.parametrize(
    ("case", "key", "evidence", "rank"),
    [
        ("rl_oom", "gpu_oom", "torch.OutOfMemoryError: CUDA out of memory.", 0),
        ("rl_nccl", "nccl_timeout", "Watchdog caught collective operation timeout", 0),
        ("rl_gated", "gated_repo", "huggingface_hub.errors.GatedRepoError: 401", None),
        ("rl_wandb", "wandb_key", "api_key not configured (no-tty)", None),
        ("rl_time_limit", "time_limit", "CANCELLED AT", None),
        ("nemo_tokenizer_race", "tokenizer_race", "OSError: [Errno 18] Invalid cross-device", None),
        ("nemo_oom_2node", "gpu_oom", "CUDA out of memory", 0),
        ("nemo_nccl", "nccl_timeout", "ProcessGroupNCCL.cpp:616", 0),
    ],
)
def test_recorded_failures(case: str, key: str, evidence: str, rank: int | None) -> None:
    found = recorded(case)
    assert found is not None and found.key == key
    assert any(evidence in line for line in found.evidence), found.evidence
    assert 1 <= len(found.evidence) <= MAX_EVIDENCE
    assert all(len(line) <= MAX_LINE_CHARS for line in found.evidence)
    assert not any(line.startswith("srun: error:") for line in found.evidence)
    assert found.rank == rank
    assert found.failed_node is None and not found.requeued_by_slurm


def test_srun_exit_lines_are_symptoms_not_causes() -> None:
    found = recorded("nemo_oom_2node")
    assert found is not None and found.first_exit_node == "dev0"
    assert found.cause == "the GPU ran out of memory (rank 0)"
    symptom_only = "\n".join(ln for ln in text("nemo_oom_2node").splitlines() if "srun" in ln)
    unknown = diagnose(symptom_only, slurm_state="FAILED", exit_code="15:0")
    assert unknown is not None and unknown.key == "unknown"
    assert unknown.reaction is Reaction.TELL_USER
    assert not any("Exited with exit code" in line for line in unknown.evidence)


def test_completed_job_is_fine() -> None:
    assert recorded("nemo_completed") is None
    assert diagnose(text("rl_oom"), slurm_state="COMPLETED") is None


def test_one_rank_oom_beats_the_other_ranks_nccl_errors() -> None:
    both = text("nemo_nccl") + "\n" + text("nemo_oom_2node")
    found = diagnose(both, slurm_state="FAILED")
    assert found is not None and found.key == "gpu_oom"


def test_node_failure_requeued_by_slurm() -> None:
    """Recorded: the second node was killed; Slurm recorded NODE_FAIL and requeued."""
    found = recorded("node_failure")
    assert found is not None and found.key == "node_failure"
    assert found.requeued_by_slurm and found.slurm_state == "PENDING"
    assert found.failed_node == "dev1"  # from "srun: error: Node failure on dev1"
    assert "srun: error: Node failure on dev1" in found.evidence
    decision = retry_decision(
        found, attempt=1, max_attempts=3, previous_keys=(), newer_checkpoint=True
    )
    assert not decision.retry and decision.page


def test_node_failure_without_requeue_retries_without_the_node() -> None:
    found = diagnose(text("node_failure"), slurm_state="NODE_FAIL", node_list="dev[0-1]")
    assert found is not None and found.failed_node == "dev1" and not found.requeued_by_slurm
    decision = retry_decision(
        found, attempt=1, max_attempts=3, previous_keys=(), newer_checkpoint=True
    )
    assert decision.retry and decision.resume and decision.page
    assert decision.exclude_node == "dev1"
    assert decision.reason.startswith("Retrying from the newest checkpoint without dev1")


@pytest.mark.parametrize(
    ("case", "state", "key", "failed_node", "rank"),
    [
        ("hand_ecc_rank", "FAILED", "node_failure", "a4-1", 13),
        ("hand_ecc_host", "FAILED", "node_failure", "a4-3", None),
        ("hand_pyxis", "FAILED", "container_storage", None, None),
        ("hand_disk_quota", "FAILED", "container_storage", None, 0),
        ("hand_bad_request", None, "bad_request", None, None),
        ("hand_invalid_account", None, "bad_request", None, None),
        ("hand_qos", None, "bad_request", None, None),
        ("hand_preempted", "PREEMPTED", "preempted", None, None),
        ("hand_preempted", "CANCELLED by 0", "preempted", None, None),
        ("hand_host_oom", "OUT_OF_MEMORY", "host_oom", None, None),
        ("hand_host_oom", "FAILED", "host_oom", None, None),
    ],
)
def test_hand_written_signatures(
    case: str, state: str | None, key: str, failed_node: str | None, rank: int | None
) -> None:
    found = diagnose(text(case), slurm_state=state)
    assert found is not None and (found.key, found.failed_node, found.rank) == (
        key,
        failed_node,
        rank,
    )
    assert found.evidence


def test_invalid_partition_recorded_by_the_launch_tests() -> None:
    stderr = (DATA.parent / "sbatch_invalid_partition.stderr").read_text()
    found = diagnose(stderr, slurm_state=None)
    assert found is not None and found.key == "invalid_partition"
    assert found.evidence == (
        "sbatch: error: invalid partition specified: general",
        "sbatch: error: Batch job submission failed: Invalid partition name specified",
    )


@pytest.mark.parametrize(
    ("state", "node_list", "key", "failed_node"),
    [
        ("NODE_FAIL", "a4-2", "node_failure", "a4-2"),
        ("NODE_FAIL", "a4-[1-2]", "node_failure", None),  # sacct does not say which one
        ("BOOT_FAIL", "a4-0", "node_failure", "a4-0"),
        ("TIMEOUT", "a4-0", "time_limit", None),
        ("PREEMPTED", "a4-0", "preempted", None),
        ("OUT_OF_MEMORY", "a4-0", "host_oom", None),
        ("CANCELLED by 1000", "a4-0", "cancelled", None),
        ("FAILED", "a4-0", "unknown", None),
    ],
)
def test_bare_slurm_states(state: str, node_list: str, key: str, failed_node: str | None) -> None:
    found = diagnose("", slurm_state=state, exit_code="0:9", node_list=node_list)
    assert found is not None and (found.key, found.failed_node) == (key, failed_node)
    assert found.evidence == (f"Slurm state {state}, exit code 0:9, nodes {node_list}",)


def test_a_log_line_beats_a_bare_state() -> None:
    found = diagnose(text("rl_oom"), slurm_state="FAILED")
    assert found is not None and found.key == "gpu_oom"


@pytest.mark.parametrize("state", [None, "RUNNING", "PENDING"])
def test_nothing_wrong_yet(state: str | None) -> None:
    assert diagnose(text("nemo_completed"), slurm_state=state) is None


def test_unknown_failure_shows_the_last_error_lines() -> None:
    log = "step 1\nstep 2\nValueError: bad thing\n+ exit 1\n"
    log += "srun: error: dev0: task 0: Exited with exit code 1\n"
    found = diagnose(log, slurm_state="FAILED", exit_code="1:0")
    assert found is not None and found.key == "unknown"
    assert found.evidence == ("ValueError: bad thing",)
    assert found.first_exit_node == "dev0"


def test_evidence_is_cut_and_bounded() -> None:
    log = "\n".join(
        f"[rank{i}]: torch.OutOfMemoryError: CUDA out of memory. {'x' * 900}" for i in range(9)
    )
    found = diagnose(log, slurm_state="FAILED")
    assert found is not None and len(found.evidence) == MAX_EVIDENCE
    assert all(len(line) == MAX_LINE_CHARS and line.endswith("…") for line in found.evidence)


def test_catalog_is_data() -> None:
    keys = [kind.key for kind in CATALOG]
    assert len(keys) == len(set(keys))
    assert BY_KEY["tokenizer_race"].reaction is Reaction.RETRY_WITH_FIX
    assert BY_KEY["nccl_timeout"].page_oncall_on_repeat
    assert BY_KEY["node_failure"].page_oncall
    assert BY_KEY["gpu_oom"].hint == "Try a smaller micro-batch or more nodes."
    for kind in CATALOG:
        assert kind.cause and not kind.cause.endswith("."), kind.key
        assert all(s in STATES for s in kind.states), kind.key


@settings(max_examples=300, deadline=None)
@given(
    log=st.text(),
    state=st.none() | st.sampled_from(STATES) | st.text(max_size=20),
    earlier=st.lists(st.sampled_from(STATES) | st.text(max_size=10), max_size=3),
    node_list=st.text(max_size=30),
)
def test_diagnose_never_raises(
    log: str, state: str | None, earlier: list[str], node_list: str
) -> None:
    found = diagnose(log, slurm_state=state, node_list=node_list, earlier_states=earlier)
    if found is not None:
        assert len(found.evidence) <= MAX_EVIDENCE
        decision = retry_decision(
            found, attempt=1, max_attempts=3, previous_keys=(), newer_checkpoint=False
        )
        assert decision.reason


# --- retry decisions -----------------------------------------------------------------------


def made(key: str, failed_node: str | None = None) -> Diagnosis:
    return Diagnosis(BY_KEY[key], ("x",), failed_node=failed_node)


@pytest.mark.parametrize(
    ("key", "attempt", "previous", "newer", "expect", "reason"),
    [
        ("tokenizer_race", 1, (), False, "retry",
         "This is transient. Retrying with the same cache dir (attempt 2 of 3)..."),
        ("tokenizer_race", 2, ("tokenizer_race",), False, "retry seed",
         "It happened again. Seeding the tokenizer cache, then retrying (attempt 3 of 3)..."),
        ("tokenizer_race", 3, ("tokenizer_race",) * 2, False, "page",
         "Not retrying: it failed again after the cache was seeded. On-call has been paged."),
        ("tokenizer_race", 2, ("gpu_oom",), False, "retry", "This is transient."),
        ("nccl_timeout", 1, (), False, "retry resume",
         "Retrying from the newest checkpoint (attempt 2 of 3)..."),
        ("nccl_timeout", 2, ("nccl_timeout",), True, "page",
         "Not retrying: it happened again. On-call has been paged."),
        ("node_failure", 1, (), False, "retry resume page",
         "Retrying from the newest checkpoint (attempt 2 of 3)... On-call has been paged."),
        ("node_failure", 2, ("node_failure",), False, "retry resume page", "Retrying"),
        ("node_failure", 3, ("node_failure",) * 2, False, "page", "Not retrying: that was"),
        ("preempted", 1, (), False, "retry resume", "Retrying from the newest checkpoint"),
        ("preempted", 2, ("preempted",), False, "retry resume", "(attempt 3 of 3)"),
        ("time_limit", 1, (), True, "retry resume", "Retrying from the newest checkpoint"),
        ("time_limit", 1, (), False, "",
         "Not retrying: no checkpoint was saved since this attempt started"),
        ("gpu_oom", 1, (), True, "", "Not retrying: the same settings will fail again. "
         "Try a smaller micro-batch or more nodes."),
        ("gated_repo", 1, (), False, "", "Set HF_TOKEN for this cluster (job_secrets)"),
        ("wandb_key", 1, (), False, "", "relaunch with logger.wandb_enabled=False."),
        ("host_oom", 1, (), False, "", "Not retrying"),
        ("bad_request", 1, (), False, "", "Not retrying: Slurm would refuse it again."),
        ("container_storage", 1, (), True, "page",
         "Not retrying: it needs a person to fix the node or the storage. On-call has been paged."),
        ("silent_hang", 1, (), True, "page", "On-call has been paged."),
        ("slurm_transient", 1, (), False, "retry", "This is transient. Retrying as is"),
        ("unknown", 1, (), True, "", "Not retrying: the cause is unknown."),
    ],
)  # fmt: skip
def test_retry_decisions(
    key: str, attempt: int, previous: tuple[str, ...], newer: bool, expect: str, reason: str
) -> None:
    decision = retry_decision(
        made(key), attempt=attempt, max_attempts=3, previous_keys=previous, newer_checkpoint=newer
    )
    flags = {
        "retry": decision.retry,
        "seed": decision.seed_tokenizer,
        "resume": decision.resume,
        "page": decision.page,
    }
    assert {name for name, on in flags.items() if on} == set(expect.split()), decision
    assert reason in decision.reason
    assert decision.exclude_node is None


def test_excluded_node_only_when_known_faulty() -> None:
    decision = retry_decision(
        made("node_failure", failed_node="a4-1"),
        attempt=1, max_attempts=3, previous_keys=(), newer_checkpoint=False,
    )  # fmt: skip
    assert decision.exclude_node == "a4-1" and "without a4-1" in decision.reason
    preempted = retry_decision(
        made("preempted", failed_node="a4-1"),
        attempt=1, max_attempts=3, previous_keys=(), newer_checkpoint=False,
    )  # fmt: skip
    assert preempted.exclude_node is None


@pytest.mark.parametrize(
    ("key", "page"), [("tokenizer_race", True), ("preempted", False), ("node_failure", True)]
)
def test_retries_are_bounded(key: str, page: bool) -> None:
    decision = retry_decision(
        made(key), attempt=2, max_attempts=2, previous_keys=(key,), newer_checkpoint=True
    )
    assert not decision.retry and decision.page is page
    assert decision.reason.startswith("Not retrying: that was attempt 2 of 2.")
