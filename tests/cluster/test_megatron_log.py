"""Megatron's training loop read from its log (the fixtures in data/megatron/, built from
the upstream format strings: see their README), and its checkpoint tree read by the
collector's remote half."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cluster.watching import collect_remote
from cluster.watching.megatron_log import megatron_facts, parse_megatron
from cluster.watching.progress import parse_nemo_rl

DATA = Path(__file__).parent / "data" / "megatron"
SAVE = "/home/trainer/vertex-oss-training/megatron_bridge/experiments/llama3p1_8b-L-7f3a9c"
SAVE += "/checkpoints"


def fixture(name: str) -> str:
    return (DATA / name).read_text()


def test_a_normal_run_gives_steps_loss_time_validation_and_its_end() -> None:
    text = fixture("normal.log")
    progress = parse_megatron(text)
    assert [p.step for p in progress.points] == [5, 10, 15, 20, 25, 30]
    assert {p.total for p in progress.points} == {30}
    first, last = progress.points[0], progress.points[-1]
    assert first.loss == pytest.approx(7.384191) and last.loss == pytest.approx(2.535492)
    assert last.step_time_s == pytest.approx(0.010)
    assert [step for step, _ in progress.validation] == [10, 20, 30]
    assert progress.validation[0][1] == pytest.approx(5.404835)
    assert progress.finished
    facts = megatron_facts(text)
    assert facts.log_interval == 5  # from two progress lines in a row
    assert facts.saved == ((10, SAVE), (20, SAVE), (30, SAVE))
    assert facts.stop_early is None and facts.nan is None and facts.rerun_exit == ""
    assert facts.tflops_per_gpu is None  # logger.log_throughput is off in the recipes


def test_megatron_lm_dialect_reads_the_same_and_names_its_log_interval() -> None:
    text = fixture("megatron-lm.log")
    assert "max attention logit" not in text and "] iteration" in text
    progress = parse_megatron(text)
    assert [p.step for p in progress.points] == [5, 10, 15, 20]
    assert progress.finished
    facts = megatron_facts(text)
    assert facts.log_interval == 5  # from its printed arguments
    assert facts.tflops_per_gpu == pytest.approx(414.7)  # made with --log-throughput


def test_a_chunk_that_starts_mid_run_carries_the_total() -> None:
    lines = fixture("normal.log").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "iteration       20/" in line)
    before = parse_megatron("".join(lines[:cut]))
    after = parse_megatron("".join(lines[cut:]), before.last)
    assert [p.step for p in after.points] == [20, 25, 30]
    assert not before.finished and after.finished


def test_an_early_exit_is_a_stop_with_its_step_and_reason_not_an_end() -> None:
    text = fixture("early-exit.log")
    progress = parse_megatron(text)
    assert progress.last is not None and progress.last.step == 15
    assert not progress.finished  # 15 of 30: only the step against the total tells
    stop = megatron_facts(text).stop_early
    assert stop is not None and (stop.reason, stop.step) == ("exit interval", 15)
    assert stop.line.startswith("[exiting program at iteration 15]")
    # The progress itself carries the stop, so the thread says a stopped-early ending.
    assert progress.stopped_early == "its exit interval"
    assert parse_megatron(fixture("normal.log")).stopped_early == ""


def test_the_printed_log_interval_reaches_the_hang_rule() -> None:
    assert parse_megatron(fixture("megatron-lm.log")).interval == 5


def test_sigterm_with_the_signal_handler_is_a_stop_early_after_a_save() -> None:
    facts = megatron_facts(fixture("sigterm.log"))
    assert facts.stop_early is not None and facts.stop_early.reason == "SIGTERM"
    assert facts.saved and facts.saved[-1][0] >= (facts.stop_early.step or 0)


def test_a_resume_starts_from_the_loaded_iteration() -> None:
    text = fixture("resume.log")
    assert "successfully loaded checkpoint from" in text and "at iteration 15" in text
    progress = parse_megatron(text)
    assert [p.step for p in progress.points] == [20, 25, 30]
    assert progress.finished


@pytest.mark.parametrize(
    ("name", "value"),
    [("nan-raise.log", "nan"), ("nan-validate-results.log", "nan")],
)
def test_the_nan_check_names_its_step_in_both_modes(name: str, value: str) -> None:
    text = fixture(name)
    progress = parse_megatron(text)
    last = progress.last
    assert last is not None and last.step == 12 and last.loss is not None and math.isnan(last.loss)
    nan = megatron_facts(text).nan
    assert nan is not None and (nan.step, nan.value) == (12, value)
    assert nan.message == "found NaN in local forward loss calculation"


def test_re_runs_on_say_why_the_job_exits_16() -> None:
    text = fixture("nan-validate-results.log")  # Megatron-LM: its WARNINGs are printed
    facts = megatron_facts(text)
    assert facts.rerun_exit.startswith("Saving a checkpoint and exiting now")
    assert facts.saved[-1][0] == 11  # the last complete one: resuming re-runs step 12
    assert megatron_facts(fixture("nan-raise.log")).rerun_exit == ""
    # Megatron-Bridge drops WARNING records (logger.filter_warnings): the first re-run's
    # verdict, an error, is the last word then.
    filtered = "".join(line for line in text.splitlines(True) if "exiting now" not in line)
    assert megatron_facts(filtered).rerun_exit == (
        "First rerun: unexpected result is reproducible within the tolerance (nan = nan). "
        "Need to rerun on a different GPU to verify correctness."
    )
    transient = (
        "Rank 0, node dev1, device 0, iteration #12: First rerun: unexpected result is not "
        "reproducible within the tolerance (2.5 != nan)!\n"
    )
    assert megatron_facts(transient).rerun_exit.endswith("(2.5 != nan)")


def test_a_nan_average_left_off_the_line_is_a_nan_loss() -> None:
    line = (
        " [2026-03-02 10:15:02] iteration       20/     100 | consumed samples:         1280 |"
        " elapsed time per iteration (ms): 812.4 | learning rate: 3.000000E-04 |"
        " global batch size:    64 | loss scale: 1.0 | number of skipped iterations:   0 |"
        " number of nan iterations:   3 |"
    )
    [point] = parse_megatron(line).points
    assert point.step == 20 and point.loss is not None and math.isnan(point.loss)


def test_nemo_rl_on_the_megatron_backend_reads_only_its_own_steps() -> None:
    megatron = fixture("normal.log").splitlines()
    rl = [
        "========================= Step 1/2 =========================",
        *megatron[:12],
        "📊 Training Results:",
        "  • Loss: 0.6931",
        "⏱️  Timing:",
        "  • Total step time: 1.23s",
        *megatron[12:],
        "========================= Step 2/2 =========================",
        "📊 Training Results:",
        "  • Loss: 0.6012",
    ]
    progress = parse_nemo_rl("\n".join(rl))
    assert [(p.step, p.total, p.loss) for p in progress.points] == [
        (1, 2, 0.6931),
        (2, 2, 0.6012),
    ]
    assert progress.validation == ()  # Megatron's validation block is not NeMo-RL's


def _tree(root: Path, listing: str) -> None:
    for entry in listing.split():
        path = root / entry
        if "." in path.name and path.name != ".":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
        else:
            path.mkdir(parents=True, exist_ok=True)


def test_the_tracker_file_says_which_checkpoints_are_complete(tmp_path: Path) -> None:
    _tree(tmp_path, fixture("checkpoint-tree.txt"))
    tracker = "latest_checkpointed_iteration.txt"
    pattern = r"^iter_([0-9]{7,})$"
    (tmp_path / tracker).write_text("30")
    done = collect_remote.completed_checkpoints(str(tmp_path), pattern, "", tracker)
    assert done == [(10, "iter_0000010"), (20, "iter_0000020"), (30, "iter_0000030")]
    (tmp_path / tracker).write_text("20")  # iter_0000030 is still being written
    done = collect_remote.completed_checkpoints(str(tmp_path), pattern, "", tracker)
    assert [step for step, _ in done] == [10, 20]
    for bad in ("", "release", "20; rm -rf /", "9" * 40):
        (tmp_path / tracker).write_text(bad)  # the job writes it: anything else is no step
        assert collect_remote.completed_checkpoints(str(tmp_path), pattern, "", tracker) == []
    (tmp_path / tracker).unlink()
    assert collect_remote.completed_checkpoints(str(tmp_path), pattern, "", tracker) == []
