"""The failure catalog on texts recorded from the dev cluster (and a few hand-written
ones, see data/failures/README.md), and the retry decisions that follow."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cluster.frameworks.nemo import NEMO
from cluster.frameworks.nemo_rl import NEMO_RL
from cluster.launching.recipes import DEFAULT_CATALOG
from cluster.launching.spec import LaunchSpec
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import STATES
from cluster.slurm.sacct import AcctRecord, merge_acct, parse_sacct
from cluster.ssh.pool import SSHPool
from cluster.watching.diagnosis import (
    BY_KEY,
    CATALOG,
    MAX_EVIDENCE,
    MAX_LINE_CHARS,
    Diagnosis,
    RetryDecision,
    diagnose,
    retry_decision,
)
from cluster.watching.evidence import (
    MAX_BYTES_PER_FILE,
    Evidence,
    EvidenceFile,
    evidence_payload,
    gather,
)
from cluster.watching.failures import FailureRule, Reaction, build_catalog
from cluster.watching.tracking import Tracking

DATA = Path(__file__).parent / "data" / "failures"
# The dev cluster's login node is this machine: a job's files laid out here are read there.
JOBS = Path("/tmp/trainbot-evidence")
FAKE_JOB_ID = "91000001"  # far above any id the dev cluster hands out: sacct knows nothing of it


def record_of(case: str) -> AcctRecord | None:
    path = DATA / f"{case}.sacct"
    if not case or not path.exists():
        return None
    (acct,) = merge_acct(parse_sacct(path.read_text())).values()
    return acct


def with_state(
    record: AcctRecord | None, raw: str | None, node_list: str = ""
) -> AcctRecord | None:
    """``record`` (or a new one) whose newest incarnation ended ``raw``."""
    if raw is None:
        return record
    (row,) = parse_sacct(f"{FAKE_JOB_ID}|x|{raw}|0:9||None|00:00:01|{node_list}|1|\n")
    return AcctRecord(latest=row, earlier=record.earlier if record else ())


def lay_out(
    root: Path, case: str = "", *, log: str | None = None, out: str = "", err: str = ""
) -> Tracking:
    """Write ``case``'s files (or ``log``) where its framework's job leaves them; the record
    the framework object makes for such a job."""
    root.mkdir(parents=True)
    root.chmod(0o755)
    texts = {ext: (DATA / f"{case}{ext}").read_text() for ext in (".log", ".out", ".stderr")
             if case and (DATA / f"{case}{ext}").exists()}  # fmt: skip
    if log is not None:
        texts[".log"] = log
    if out:
        texts[".out"] = out
    if err:
        texts[".stderr"] = err
    job = FAKE_JOB_ID
    profile = ClusterProfile(
        name="dev", type="hcc-a4", login={"host": "127.0.0.1", "port": 2222, "user": "trainer"},
        partition="a4", max_nodes=4, recipes_dir=str(root),
    )  # fmt: skip
    if case.startswith("rl_"):
        recipe = DEFAULT_CATALOG.find("dpo", "llama3p1_8b", "nemo-rl")
        assert recipe is not None
        spec = LaunchSpec.from_recipe(profile, recipe, launch_id="L-1", nodes=1)
        files = {".log": f"nemo_rl/{job}/nemo_rl_output.log", ".out": f"nemo_rl/slurm-{job}.out",
                 ".stderr": f"nemo_rl/{job}/driver.err"}  # fmt: skip
        tracking = NEMO_RL.found(spec, job)
    else:
        recipe = DEFAULT_CATALOG.find("sft", "llama3p1_8b", "nemo")
        assert recipe is not None
        spec = LaunchSpec.from_recipe(profile, recipe, launch_id="L-1", nodes=1)
        task = f"nemo/experiments/x/x_1/{spec.job_name}"
        files = {".log": f"{task}/log-trainer-trainer.x_{job}_0.out",
                 ".out": f"{task}/sbatch_trainer-trainer.x_{job}.out",
                 ".stderr": f"{task}/rank1.err"}  # fmt: skip
        status = f"Task 0: x\n- Job id: {job}\n- Local Directory: {root / task}\n"
        tracking = NEMO.tracking(spec, status)
    for ext, text in texts.items():
        path = root / files[ext]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return tracking


@pytest.fixture
def jobs() -> Iterator[Path]:
    root = JOBS / uuid.uuid4().hex
    yield root
    shutil.rmtree(root, ignore_errors=True)


Read = Callable[..., Awaitable[Diagnosis | None]]


@pytest.fixture
def read(pool: SSHPool, dev_profile: ClusterProfile, jobs: Path) -> Read:
    """Lay a job out, gather its evidence on the login node as the poller does, diagnose it."""

    async def run(
        case: str = "",
        *,
        state: str | None = None,
        node_list: str = "",
        log: str | None = None,
        out: str = "",
        err: str = "",
    ) -> Diagnosis | None:
        tracking = lay_out(jobs / uuid.uuid4().hex, case, log=log, out=out, err=err)
        record = with_state(record_of(case), state, node_list)
        evidence = await gather(pool, dev_profile.login, tracking, record=record, cluster="dev")
        assert evidence.record is record  # sacct knows nothing of the fake job id
        return diagnose(evidence)

    return run


def text(case: str) -> str:
    """A case's own texts, for building variations of it."""
    parts = [DATA / f"{case}{ext}" for ext in (".log", ".out", ".stderr")]
    return "\n".join(p.read_text() for p in parts if p.exists())


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
async def test_recorded_failures(
    read: Read, case: str, key: str, evidence: str, rank: int | None
) -> None:
    found = await read(case)
    assert found is not None and found.key == key
    assert any(evidence in line for line in found.evidence), found.evidence
    assert 1 <= len(found.evidence) <= MAX_EVIDENCE
    assert all(len(line) <= MAX_LINE_CHARS for line in found.evidence)
    assert not any(line.startswith("srun: error:") for line in found.evidence)
    assert found.rank == rank
    assert found.failed_node is None and not found.requeued_by_slurm


async def test_srun_exit_lines_are_symptoms_not_causes(read: Read) -> None:
    found = await read("nemo_oom_2node")
    assert found is not None and found.first_exit_node == "dev0"
    assert found.cause == "the GPU ran out of memory (rank 0)"
    symptom_only = "\n".join(ln for ln in text("nemo_oom_2node").splitlines() if "srun" in ln)
    unknown = await read(log=symptom_only, state="FAILED")
    assert unknown is not None and unknown.key == "unknown"
    assert unknown.reaction is Reaction.TELL_USER
    assert not any("Exited with exit code" in line for line in unknown.evidence)


async def test_completed_job_is_fine(read: Read) -> None:
    assert await read("nemo_completed") is None
    assert await read("rl_oom", state="COMPLETED") is None


async def test_one_rank_oom_beats_the_other_ranks_nccl_errors(read: Read) -> None:
    both = text("nemo_nccl") + "\n" + text("nemo_oom_2node")
    found = await read(log=both, state="FAILED")
    assert found is not None and found.key == "gpu_oom"


async def test_node_failure_requeued_by_slurm(read: Read) -> None:
    """Recorded: the second node was killed; Slurm recorded NODE_FAIL and requeued."""
    found = await read("node_failure")
    assert found is not None and found.key == "node_failure"
    assert found.requeued_by_slurm and found.slurm_state == "PENDING"
    assert found.failed_node == "dev1"  # from "srun: error: Node failure on dev1"
    assert "srun: error: Node failure on dev1" in found.evidence
    decision = retry_decision(
        found, attempt=1, max_attempts=3, previous_keys=(), newer_checkpoint=True
    )
    assert not decision.retry and decision.page


async def test_node_failure_without_requeue_retries_without_the_node(read: Read) -> None:
    found = await read("node_failure", state="NODE_FAIL", node_list="dev[0-1]")
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
async def test_hand_written_signatures(
    read: Read, case: str, state: str | None, key: str, failed_node: str | None, rank: int | None
) -> None:
    found = await read(case, state=state, node_list="a4-[0-3]" if state else "")
    assert found is not None and (found.key, found.failed_node, found.rank) == (
        key,
        failed_node,
        rank,
    )
    assert found.evidence


async def test_invalid_partition_recorded_by_the_launch_tests(read: Read) -> None:
    stderr = (DATA.parent / "sbatch_invalid_partition.stderr").read_text()
    found = await read(err=stderr)
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
        ("DEADLINE", "a4-0", "deadline", None),
        ("FAILED", "a4-0", "unknown", None),
    ],
)
async def test_bare_slurm_states(
    read: Read, state: str, node_list: str, key: str, failed_node: str | None
) -> None:
    found = await read(state=state, node_list=node_list)
    assert found is not None and (found.key, found.failed_node) == (key, failed_node)
    assert found.evidence == (f"Slurm state {state}, exit code 0:9, nodes {node_list}",)


async def test_a_wrapper_names_the_error_printed_above_it(read: Read) -> None:
    """vLLM's EngineDeadError and Ray's ActorDiedError wrap another failure: the cause says
    the last exception above them; a known cause above them wins outright."""
    log = (
        "(EngineCore_DP0 pid=5120) ERROR [core.py:710] EngineCore encountered a fatal error.\n"
        "(EngineCore_DP0 pid=5120) ERROR [core.py:710] KeyError: 'model.layers.31.mlp'\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
        "stack trace (above) for the root cause.\n"
    )
    found = await read(log=log, state="FAILED")
    assert found is not None and found.key == "vllm_engine_dead"
    assert found.cause.endswith("; underneath: KeyError: 'model.layers.31.mlp'"), found.cause
    ray = "ValueError: bad shape (4, 8)\nray.exceptions.ActorDiedError: The actor died\n"
    found = await read(log=ray, state="FAILED")
    assert found is not None and found.key == "ray_actor_died"
    assert found.underlying == "ValueError: bad shape (4, 8)", found
    oom = "torch.OutOfMemoryError: CUDA out of memory.\nEngineDeadError: EngineCore encountered\n"
    found = await read(log=oom, state="FAILED")
    assert found is not None and found.key == "gpu_oom" and not found.underlying


async def test_a_log_line_beats_a_bare_state(read: Read) -> None:
    found = await read("rl_oom", state="FAILED")
    assert found is not None and found.key == "gpu_oom"


@pytest.mark.parametrize("state", [None, "RUNNING", "PENDING"])
async def test_nothing_wrong_yet(read: Read, state: str | None) -> None:
    assert await read(log=text("nemo_completed"), state=state) is None


async def test_unknown_failure_shows_the_last_error_lines_and_what_was_read(read: Read) -> None:
    log = "step 1\nstep 2\nValueError: bad thing\n+ exit 1\n"
    log += "srun: error: dev0: task 0: Exited with exit code 1\n"
    found = await read(log=log, state="FAILED")
    assert found is not None and found.key == "unknown"
    assert found.evidence == ("ValueError: bad thing", "Slurm state FAILED, exit code 0:9")
    assert found.first_exit_node == "dev0"
    assert found.read.startswith(f"log-trainer-trainer.x_{FAKE_JOB_ID}_0.out in /tmp/")
    assert found.read.endswith("; Slurm's record of the job")


@pytest.mark.parametrize(
    ("where", "case", "key"),
    [
        ("sbatch log", "nemo_tokenizer_race", "tokenizer_race"),
        ("stderr file", "nemo_tokenizer_race", "tokenizer_race"),
        ("sbatch log", "rl_gated", "gated_repo"),
        ("stderr file", "rl_oom", "gpu_oom"),
    ],
)
async def test_a_cause_found_in_any_file_the_job_left(
    read: Read, where: str, case: str, key: str
) -> None:
    """The main log lost the text (streams overwrote each other): the other files have it."""
    cause = text(case)
    found = await read(
        "rl_x" if case.startswith("rl_") else "nemo_x",
        state="FAILED",
        log="step 1\nstep 2\n",
        out=cause if where == "sbatch log" else "",
        err=cause if where == "stderr file" else "",
    )
    assert found is not None and found.key == key, found


async def test_a_node_named_outside_the_job_changes_nothing(read: Read) -> None:
    """Text can name any node; only one of the job's own nodes is ever excluded or blamed."""
    log = "srun: error: Node failure on login0\nDUE TO NODE FAILURE\n"
    found = await read(log=log, state="NODE_FAIL", node_list="dev[0-1]")
    assert found is not None and found.key == "node_failure" and found.failed_node is None
    decision = retry_decision(
        found, attempt=1, max_attempts=3, previous_keys=(), newer_checkpoint=True
    )
    assert decision.exclude_node is None
    for named in ("-dev1", "login0", "dev7"):  # not a host name; not the job's nodes
        bad = await read(log=f"srun: error: Node failure on {named}\n", state="FAILED",
                         node_list="dev[0-1]")  # fmt: skip
        assert bad is not None and bad.key == "unknown" and bad.failed_node is None, named
    inside = await read(log="srun: error: Node failure on dev1\n", state="NODE_FAIL",
                        node_list="dev[0-1]")  # fmt: skip
    assert inside is not None and inside.failed_node == "dev1"


async def test_evidence_is_cut_and_bounded(read: Read) -> None:
    log = "\n".join(
        f"[rank{i}]: torch.OutOfMemoryError: CUDA out of memory. {'x' * 900}" for i in range(9)
    )
    found = await read(log=log, state="FAILED")
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


@settings(max_examples=300)  # (no deadline: the suite profile, tests/conftest.py)
@given(
    log=st.text(),
    state=st.none() | st.sampled_from(STATES) | st.text(max_size=20),
    earlier=st.lists(st.sampled_from(STATES) | st.text(max_size=10), max_size=3),
    node_list=st.text(max_size=30),
)
# An unknown failure with five log lines: its tail and its Slurm state line stay in bounds.
@example(log="0\r0\r0\x850\r0", state="DEADLINE", earlier=[], node_list="")
def test_diagnose_never_raises(
    log: str, state: str | None, earlier: list[str], node_list: str
) -> None:
    """Any evidence at all (built directly: a property of diagnose, not of gathering)."""
    rows = [f"1|x|{s}|0:0||None|00:00:01|{node_list}|1|" for s in [*earlier, state or "FAILED"]]
    record = merge_acct(parse_sacct("\n".join(r.replace("\n", " ") for r in rows))).get("1")
    evidence = Evidence(
        job_id="1",
        files=(EvidenceFile("/x/log", log, len(log)),),
        record=record if state is not None else None,
        state=state or "",
    )
    found = diagnose(evidence)
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
         "Not retrying: it failed again after the cache was seeded."),
        ("tokenizer_race", 2, ("gpu_oom",), False, "retry", "This is transient."),
        ("nccl_timeout", 1, (), False, "retry resume",
         "Retrying from the newest checkpoint (attempt 2 of 3)..."),
        ("nccl_timeout", 2, ("nccl_timeout",), True, "page",
         "Not retrying: it happened again."),
        ("node_failure", 1, (), False, "retry resume page",
         "Retrying from the newest checkpoint (attempt 2 of 3)..."),
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
         "Not retrying: it needs a person to fix the node or the storage."),
        ("silent_hang", 1, (), True, "page", "Not retrying: a person should look first."),
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


async def test_unknown_cause_says_when_srun_cut_the_output_short(read: Read) -> None:
    """srun stops reading a step's output once it has killed its tasks: say so."""
    out = (
        "srun: error: dev0: task 0: Exited with exit code 1\n"
        f"srun: Force Terminated StepId={FAKE_JOB_ID}.1\n"
    )
    found = await read("nemo_x", state="FAILED", log="GPU available: True\n", out=out)
    assert found is not None and found.key == "unknown" and found.output_cut
    plain = await read("nemo_x", state="FAILED", log="GPU available: True\n")
    assert plain is not None and plain.key == "unknown" and not plain.output_cut

    def decide(diagnosis: Diagnosis, attempt: int, previous: tuple[str, ...]) -> RetryDecision:
        return retry_decision(
            diagnosis, attempt=attempt, max_attempts=3, previous_keys=previous,
            newer_checkpoint=False,
        )  # fmt: skip

    # Cut: once as is (the first run's race loses its traceback this way), then a person.
    first = decide(found, 1, ())
    assert first.retry and not first.page and not first.seed_tokenizer and not first.resume
    assert "traceback was lost: retrying once as is (attempt 2 of 3)" in first.reason
    again = decide(found, 2, ("unknown",))
    assert not again.retry and again.page and "cut from the logs" in again.reason
    last = decide(found, 3, ("tokenizer_race", "tokenizer_race"))
    assert not last.retry and "attempt 3 of 3" in last.reason
    # Not cut: the logs are whole and name nothing known, so a retry would not help.
    assert not decide(plain, 1, ()).retry


# --- evidence from the whole log -----------------------------------------------------------


def interleaved_flood(ranks: int, lines_per_rank: int) -> str:
    """What the other ranks print after one rank's error: PyTorch's watchdog lines, every
    rank prefixed ("[rankN]:") and interleaved, as NeMo-Run's one output file holds them."""
    flood = []
    for n in range(lines_per_rank):
        for rank in range(ranks):
            flood.append(
                f"[rank{rank}]:[E1203 20:1{n % 10}:00.000000000 ProcessGroupNCCL.cpp:616] "
                f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum="
                f"{n}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
                "600007 milliseconds before timing out."
            )
    return "\n".join(flood) + "\n"


async def test_the_first_error_far_above_the_tail_is_found(read: Read) -> None:
    """Rank 13 runs out of GPU memory; then 64 ranks report NCCL timeouts for far more
    than the 32 KiB read from the end. The cause is searched for in the whole file."""
    await check_first_error_far_above_the_tail(read)


async def test_the_first_error_is_found_without_fixed_strings_too(
    pool: SSHPool, dev_profile: ClusterProfile, jobs: Path
) -> None:
    """A site pattern with no fixed string in it (``\\d{3} ``) makes the login node try
    every line in Python instead of grep: slower, same result."""
    site = (FailureRule(key="mine", cause="x", reaction=Reaction.PAGE, patterns=(r"^\d{3} ",)),)
    catalog = build_catalog(site)
    probe = lay_out(jobs / "probe", log="x\n")
    assert evidence_payload(probe, catalog=catalog)["scan_keywords"] is None
    assert evidence_payload(probe)["scan_keywords"]  # the built-in catalog has them

    async def run(**kw: Any) -> Diagnosis | None:
        tracking = lay_out(jobs / uuid.uuid4().hex, log=kw["log"])
        record = with_state(None, kw["state"], kw["node_list"])
        evidence = await gather(
            pool, dev_profile.login, tracking, record=record, cluster="dev", catalog=catalog
        )
        return diagnose(evidence, catalog)

    await check_first_error_far_above_the_tail(run)


async def check_first_error_far_above_the_tail(read: Read) -> None:
    start = "".join(f"[rank{r}]: step 3/100 loss 2.31\n" for r in range(64))
    oom = (
        "[rank13]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 5 has a total capacity of 139.81 GiB of which 1.02 GiB is free.\n"
    )
    log = start + oom + interleaved_flood(64, 20)
    assert len(log) > 8 * MAX_BYTES_PER_FILE
    found = await read(log=log, state="FAILED", node_list="dev[0-7]")
    assert found is not None and found.key == "gpu_oom", found
    assert found.rank == 13
    assert found.evidence[0].startswith("[rank13]: torch.OutOfMemoryError: CUDA out of memory.")


async def test_first_error_lines_are_rank_aware_and_bounded(
    pool: SSHPool, dev_profile: ClusterProfile, jobs: Path
) -> None:
    """Each catalog pattern keeps its first lines from two ranks, other error-looking lines
    ten (two per rank): a flood of one message from 64 ranks adds two lines, not 64."""
    head = "".join(f"[rank{r}]: RuntimeError: something else {r}\n" for r in range(64))
    log = head + interleaved_flood(64, 40)
    tracking = lay_out(jobs / "bounded", log=log)
    evidence = await gather(pool, dev_profile.login, tracking, cluster="dev")
    (main, *_) = evidence.files
    assert main.cut and not main.scan_cut
    watchdog = [ln for ln in main.first if "Watchdog caught" in ln]
    assert [ln.split("]:")[0] for ln in watchdog] == ["[rank0", "[rank1"]
    generic = [ln for ln in main.first if "something else" in ln]
    assert len(generic) == 10  # ten ranks' first error lines, one each (no more per rank)
    assert len(main.first) == len(watchdog) + len(generic)  # nothing else kept


@pytest.mark.parametrize(
    ("state", "key", "retried"),
    [
        # scancel typed on the login node by the job's own user (uid 1000): the other
        # ranks' NCCL errors are the cancel's doing, not a failure to retry
        ("CANCELLED by 1000", "cancelled", False),
        ("CANCELLED by 0", "nccl_timeout", True),  # root / slurmctld: diagnosed as before
        ("FAILED", "nccl_timeout", True),
    ],
)
def test_a_persons_scancel_after_an_nccl_line_is_not_retried(
    state: str, key: str, retried: bool
) -> None:
    log = text("nemo_nccl")
    row = parse_sacct(f"77|root-root.t1|{state}|0:15|0:0|None|00:01:00|dev0|60|gres/gpu=8\n")
    evidence = Evidence(
        "77", files=(EvidenceFile("log-77_0.out", log, len(log)),), record=merge_acct(row)["77"]
    )
    found = diagnose(evidence)
    assert found is not None and found.key == key, found
    decision = retry_decision(
        found, attempt=1, max_attempts=3, previous_keys=(), newer_checkpoint=True
    )
    assert decision.retry is retried, decision
    if not retried:
        assert found.evidence == ("Slurm state CANCELLED by 1000, exit code 0:15, nodes dev0",)
