"""Megatron's training loop read from what it really printed: megatron-core 0.19.2's
``megatron.training`` on one H100 (the fixtures in data/megatron/captured/, trimmed,
every kept line as printed; their README says how each run was made)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.watching import collect_remote
from cluster.watching.megatron_log import (
    RERUN_EXIT_CODES,
    megatron_facts,
    parse_megatron,
)

DATA = Path(__file__).parent / "data" / "megatron" / "captured"
TRACKER = "latest_checkpointed_iteration.txt"
PATTERN = r"^iter_([0-9]{7,})$"
MESSAGE = "found NaN in local forward loss calculation"


def fixture(name: str) -> str:
    return (DATA / name).read_text()


def exit_code(run: str) -> int:
    """The run's exit code, as the capture's summary.txt recorded it."""
    summary = fixture("summary.txt")
    match = re.search(rf"^== {re.escape(run)}: .*\n(?:   .*\n)*?   exit=(\d+)", summary, re.M)
    assert match is not None, f"{run} is not in summary.txt"
    return int(match[1])


def test_the_normal_run_steps_loss_time_validation_saves_and_its_end() -> None:
    text = fixture("normal.log")
    progress = parse_megatron(text)
    # The first iteration is printed whatever the interval (5), then its multiples.
    assert [p.step for p in progress.points] == [1, 5, 10, 15, 20, 25, 30]
    assert {p.total for p in progress.points} == {30}
    assert progress.points[0].loss == pytest.approx(8.365215)
    assert progress.points[-1].loss == pytest.approx(7.468959)
    assert progress.points[-1].step_time_s == pytest.approx(0.0227)
    # In the loop at 10, 20, 30; after training "on validation set" again at 30 (the
    # loop's value stays) and "on test set" (not validation).
    assert [step for step, _ in progress.validation] == [10, 20, 30]
    assert [loss for _, loss in progress.validation] == pytest.approx(
        [7.781586, 7.460589, 7.410944]
    )
    assert progress.finished and progress.stopped_early == ""
    assert progress.interval == 5  # from the printed arguments
    facts = megatron_facts(text)
    save = "/tmp/cap/normal/ckpt"
    assert facts.saved == ((10, save), (20, save), (30, save))  # each announced once
    assert text.count("saving checkpoint at iteration      10 ") == 1
    assert facts.log_interval == 5 and facts.tflops_per_gpu == pytest.approx(1.5)
    assert facts.skipped_iterations == 0 and facts.nan is None and facts.rerun_exit == ""
    assert facts.stop_early is None and facts.loaded is None
    assert exit_code("normal") == 0


def test_without_the_arguments_the_interval_is_read_off_the_iterations() -> None:
    text = fixture("normal.log")
    bare = "".join(line for line in text.splitlines(True) if "log_interval ..." not in line)
    assert megatron_facts(bare).log_interval == 5  # not 4: iteration 1 is always printed
    duration = fixture("exit-duration.log").replace("  log_interval ", "  log_interval_x ")
    assert megatron_facts(duration).log_interval == 10


@pytest.mark.parametrize("name", ["normal", "exit-interval", "resume", "nan-validate"])
def test_the_tree_listing_and_its_tracker_name_the_complete_checkpoints(
    name: str, tmp_path: Path
) -> None:
    listing = fixture(f"{name}.tree.txt")
    tracked = re.search(rf"^--- \./{TRACKER}: (\d+)$", listing, re.M)
    assert tracked is not None
    for line in listing.splitlines():
        if line.startswith("./"):
            path = tmp_path / line[2:]
            if path.suffix or path.name.startswith((".", "__")):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("")
            else:
                path.mkdir(parents=True, exist_ok=True)
    (tmp_path / TRACKER).write_text(tracked[1])
    done = collect_remote.completed_checkpoints(str(tmp_path), PATTERN, "", TRACKER)
    saved = [it for it, _ in megatron_facts(fixture(f"{name}.log")).saved]
    # Every announced save has its iter_ directory, the tracker names the newest one.
    assert [step for step, _ in done][-len(saved) :] == saved
    assert done[-1][0] == int(tracked[1]) == saved[-1]
    # torch_dist's layout: no common.pt or train_state.pt in megatron.training's save.
    files = {Path(line).name for line in listing.splitlines() if "/iter_" in line}
    assert {"__0_0.distcp", ".metadata", "metadata.json"} <= files


def test_the_exit_interval_is_a_stop_early_after_a_save() -> None:
    text = fixture("exit-interval.log")
    progress = parse_megatron(text)
    assert [p.step for p in progress.points] == [1, 5, 10, 15]
    assert not progress.finished and progress.stopped_early == "its exit interval"
    facts = megatron_facts(text)
    assert facts.stop_early is not None
    assert (facts.stop_early.reason, facts.stop_early.step) == ("exit interval", 15)
    assert [it for it, _ in facts.saved] == [10, 15]  # the exit saves first
    assert exit_code("exit-interval") == 0


def test_the_resume_loads_its_checkpoint_and_prints_its_first_iteration() -> None:
    text = fixture("resume.log")
    facts = megatron_facts(text)
    assert facts.loaded == (15, "/tmp/cap/ei/ckpt")
    progress = parse_megatron(text)
    assert [p.step for p in progress.points] == [16, 20, 25, 30]
    assert progress.points[0].loss == pytest.approx(7.690373)
    assert progress.finished
    assert facts.log_interval == 5 and [it for it, _ in facts.saved] == [20, 30]
    assert megatron_facts(fixture("normal.log")).loaded is None  # started from random
    assert "will not load any checkpoints" in fixture("normal.log")


def test_the_time_budget_is_a_stop_early_at_the_last_iteration_printed() -> None:
    text = fixture("exit-duration.log")
    progress = parse_megatron(text)
    assert progress.points[-1].step == 50 and progress.points[-1].total == 1000
    assert not progress.finished and progress.stopped_early == "its time budget"
    facts = megatron_facts(text)
    assert facts.stop_early is not None
    assert (facts.stop_early.reason, facts.stop_early.step) == ("time budget", 50)
    assert facts.stop_early.line.startswith("[exiting program after 1.1016291777292888 minutes]")
    assert [it for it, _ in facts.saved] == [50]
    assert exit_code("exit-duration") == 0


def test_sigterm_with_the_signal_handler_saves_and_exits_0() -> None:
    text = fixture("sigterm.log")
    facts = megatron_facts(text)
    assert facts.stop_early is not None
    assert (facts.stop_early.reason, facts.stop_early.step) == ("SIGTERM", 10)
    assert [it for it, _ in facts.saved] == [10]  # save_interval is 50: the signal's save
    assert not parse_megatron(text).finished
    assert exit_code("sigterm") == 0


def test_nan_with_re_runs_off_raises_at_the_step_being_computed() -> None:
    text = fixture("nan-disabled.log")
    progress = parse_megatron(text)
    last = progress.last
    # 12 complete iterations, then the NaN in the 13th: the check names 13.
    assert last is not None and last.step == 13 and last.loss is not None
    assert math.isnan(last.loss)
    facts = megatron_facts(text)
    assert facts.nan is not None and (facts.nan.step, facts.nan.value) == (13, "nan")
    assert facts.nan.message == MESSAGE
    assert facts.nan.line.startswith("[rank0]: RuntimeError: Rank 0, node vm, device 0,")
    assert facts.rerun_exit == "" and [it for it, _ in facts.saved] == [10]
    assert exit_code("nan-disabled") == 1


def test_nan_with_re_runs_on_reproducible_saves_the_iteration_before_and_exits_16() -> None:
    text = fixture("nan-validate.log")
    facts = megatron_facts(text)
    assert facts.nan is not None and (facts.nan.step, facts.nan.value) == (13, "nan")
    assert facts.nan.message == MESSAGE
    assert facts.nan.line.startswith("ERROR:megatron.core.rerun_state_machine:Unexpected")
    assert facts.rerun_exit == (
        "Saving a checkpoint and exiting now. Please resume the job from the checkpoint to "
        "rerun the last iteration and establish a diagnostic"
    )
    assert [it for it, _ in facts.saved] == [10, 11]
    # The order: the check, the re-run, its verdict, the exit's words, then the save.
    order = [
        "Unexpected result nan on rank 0 at iteration #13",
        "Need to rerun step to check reproducibility",
        "First rerun: unexpected result is reproducible within the tolerance (nan = nan)",
        "Saving a checkpoint and exiting now",
        "saving checkpoint at iteration      11 ",
    ]
    assert sorted(order, key=text.index) == order
    assert exit_code("nan-validate") == 16 and "reproducible" in RERUN_EXIT_CODES[16]


def test_the_resume_of_a_reproducible_nan_on_the_same_gpu_exits_16_again() -> None:
    text = fixture("nan-validate-resume.log")
    assert parse_megatron(text).points == ()  # it exits before any iteration line
    facts = megatron_facts(text)
    assert facts.loaded == (11, "/tmp/cap/nv/ckpt")
    assert facts.nan is None
    assert facts.rerun_exit == (
        "Exiting now. Please resume the job from the same checkpoint to rerun the last "
        "iteration and establish a diagnostic"
    )
    assert "Got rescheduled on the same GPU" in text
    assert exit_code("nan-validate-resume") == 16


def test_a_transient_nan_is_not_reproducible_and_exits_17() -> None:
    text = fixture("nan-transient.log")
    facts = megatron_facts(text)
    assert facts.nan is not None and facts.nan.step == 13
    assert facts.rerun_exit == "Exiting now. The job can be resumed from a previous checkpoint"
    assert "unexpected result is not reproducible within the tolerance" in text
    assert [it for it, _ in facts.saved] == [10]  # no save: resume from the last one
    assert exit_code("nan-transient") == 17 and "transient" in RERUN_EXIT_CODES[17]


def test_every_captured_file_is_small_and_names_its_run() -> None:
    summary = fixture("summary.txt")
    assert "megatron-core 0.19.2" in summary and "NVIDIA H100" in summary
    for log in DATA.glob("*.log"):
        assert log.stat().st_size < 50_000, log.name
        assert f"== {log.stem}: " in summary, log.name


RUN_RECIPE = (
    Path(__file__).parents[2] / "devcluster/login/vertex-oss-training/megatron_bridge/run_recipe.py"
)
# The lines the parser and the thread read, and the re-run state machine's words.
READ = re.compile(
    r"\] iteration |validation loss at|saving checkpoint|successfully (?:saved|loaded) checkpoint"
    r"|rerun_state_machine:(?!RerunStateMachine|Result validation|Setting)|RuntimeError|"
    r"\[exiting program"
)


def shape(line: str) -> str:
    """A line without its values: time stamps, numbers, paths and host names blanked."""
    line = re.sub(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\]", "[T]", line)
    line = re.sub(r"(?<=\s)/\S+", "P", line)
    line = re.sub(r"node \S+,", "node H,", line)
    line = re.sub(r"\d+(?:\.\d+)?(?:E[-+]\d+)?", "N", line)
    return re.sub(r" +", " ", line).strip()


def shapes(text: str) -> list[str]:
    seen: list[str] = []
    for line in text.splitlines():
        if READ.search(line) and (not seen or shape(line) != seen[-1]):
            seen.append(shape(line))
    return seen


def stand_in(tmp_path: Path, knobs: dict[str, str], *words: str) -> tuple[int, str]:
    """The dev cluster's run_recipe.py in megatron.training's dialect, as the only rank."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SLURMD_NODENAME": "vm"}
    env.update(DEVCLUSTER_STEP_TIME_S="0", DEVCLUSTER_SAVE_TIME_S="0", DEVCLUSTER_STARTUP_S="0")
    env.update(DEVCLUSTER_TEARDOWN_S="0", DEVCLUSTER_DIALECT="megatron-lm")
    env.update(DEVCLUSTER_LOG_THROUGHPUT="1", DEVCLUSTER_VAL_EVERY="10")
    env.update({f"DEVCLUSTER_{key.upper()}": value for key, value in knobs.items()})
    save = tmp_path / "ckpt"
    argv = [sys.executable, str(RUN_RECIPE), "--recipe=llama31_8b_pretrain_config"]
    argv += [f"checkpoint.save={save}", f"checkpoint.load={save}", "logger.tensorboard_dir="]
    done = subprocess.run(
        [*argv, *words], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("run", "knobs", "words"),
    [
        ("normal", {}, ["train.train_iters=30"]),
        ("exit-interval", {}, ["train.train_iters=30", "train.exit_interval=15"]),
        ("nan-disabled", {"nan_at": "13"}, ["train.train_iters=30"]),
        (
            "nan-validate",
            {"nan_at": "13", "nan_mode": "validate_results"},
            ["train.train_iters=30"],
        ),
        (
            "nan-transient",
            {"nan_at": "13", "nan_mode": "validate_results", "nan_once": "1"},
            ["train.train_iters=30"],
        ),
    ],
)
def test_the_stand_in_prints_the_captured_shapes_in_their_order(
    run: str, knobs: dict[str, str], words: list[str], tmp_path: Path
) -> None:
    code, text = stand_in(tmp_path, knobs, *words)
    assert code == exit_code(run), text
    assert shapes(text) == shapes(fixture(f"{run}.log")), text
