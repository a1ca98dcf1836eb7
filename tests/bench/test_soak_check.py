"""The soak's checker, fed crafted threads, Slurm rows and checkpoint directories: a clean
launch shows no divergence, and each way a thread can disagree with Slurm or the disk
is reported under its own kind."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.soak_check import Divergence, check_charges, check_launch
from bench.soak_slurm import JobRow
from bench.soak_thread import Plan, View, unmentioned

LAUNCH = "L-0a1b2c"
QUEUED = "Queued by <@U0SOAK>: dpo llama3p1_8b, 1 node × 8 GPU on a4 (hcc-a4)"
PREFLIGHT = "Pre-flight ok: partition a4 up (4 nodes idle), image found, job script found."
SUBMITTED = "Submitted: Slurm job 501 on a4, partition a4, 1 node. Logs: `~/x/nemo_rl/501`"
RUNNING = "Running on dev0."
CHECKPOINT = "💾 Checkpoint step 10 saved."
DONE = "✅ COMPLETED in 1 min · 1 attempt · 0.13 GPU-hours · last checkpoint step 10"
PARENTS = [
    f"⏳ *QUEUED*  dpo llama3p1_8b · 1 node × 8 GPU · a4 (hcc-a4) · `soak-0` · {LAUNCH}",
    "🟢 *RUNNING*  dpo llama3p1_8b · 1 node × 8 GPU · a4 (hcc-a4) · job 501",
    "✅ *COMPLETED*  dpo llama3p1_8b · 1 node × 8 GPU · a4 (hcc-a4) · job 501",
]
JOB = JobRow("501", f"soak-0-{LAUNCH}", "COMPLETED", 1001.0, 1005.0, 1065.0, "dev0")
PAGE = f"<!subteam^S0ONCALL> job 501 ({LAUNCH}) on a4: node failure on dev0 (NODE_FAIL)"


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    """The login node's directories as the checker reads them, job 501's step 10 saved."""
    (tmp_path / "nemo_rl" / "501" / "checkpoints" / "step_10").mkdir(parents=True)
    (tmp_path / "nemo_logs").mkdir()
    return {"nemo_rl": tmp_path / "nemo_rl", "nemo_logs": tmp_path / "nemo_logs"}


def clean() -> View:
    """A NeMo-RL launch that ran once, saved step 10 and completed, told as the bot tells it."""
    plan = Plan(0, "soak-0", "nemo-rl", "dpo", "llama3p1_8b", "a4", 1, "none", launch_id=LAUNCH)
    thread = [QUEUED, PREFLIGHT, SUBMITTED, RUNNING, CHECKPOINT, DONE]
    return View(plan, list(PARENTS), thread, pages=[], jobs=[JOB], incarnations=[JOB])


def kinds(view: View, dirs: dict[str, Path]) -> list[str]:
    found: list[Divergence] = check_launch(view, dirs, page_user_faults=False)
    assert all(d.launch == LAUNCH for d in found), found
    return sorted(d.kind for d in found)


def test_a_clean_launch_shows_no_divergence(dirs: dict[str, Path]) -> None:
    assert kinds(clean(), dirs) == []


def test_the_owners_mention_on_the_final_line_is_read_past(dirs: dict[str, Path]) -> None:
    view = clean()
    view.thread[-1] = unmentioned(f"<@U0SOAK> {DONE}")  # as bench/soak.py reads the thread
    assert view.thread[-1] == DONE and kinds(view, dirs) == []
    assert unmentioned(RUNNING) == RUNNING  # other lines are left alone


def test_a_message_posted_twice(dirs: dict[str, Path]) -> None:
    view = clean()
    view.thread.insert(4, RUNNING)
    assert kinds(view, dirs) == ["duplicate_message"]


def test_a_job_that_started_after_the_cancel(dirs: dict[str, Path]) -> None:
    """Cancel pressed while the job was being submitted; the job still ran to its end."""
    view = clean()
    view.plan.cancel_presses.append(990.0)
    view.thread[2:] = [
        "🚫 Slurm job 501 appeared after the launch was cancelled: cancelling it.",
        "🚫 CANCELLED in 0 s · 1 attempt · 0 GPU-hours",
    ]
    view.parent_texts[-1] = view.parent_texts[-1].replace("✅ *COMPLETED*", "🚫 *CANCELLED*")
    view.jobs = view.incarnations = [replace(JOB, state="COMPLETED", start=1000.0)]
    assert kinds(view, dirs) == ["final_state", "ran_after_cancel"]


def test_a_job_that_failed_as_it_was_cancelled_ends_cancelled(dirs: dict[str, Path]) -> None:
    """Cancel pressed while the job ran; Slurm recorded it FAILED (it failed as the scancel
    went in): the launch ends CANCELLED, and that is no divergence."""
    view = clean()
    view.plan.cancel_presses.append(1050.0)
    view.thread[-1] = "🚫 CANCELLED in 1 min · 1 attempt · 0.13 GPU-hours"
    view.parent_texts[-1] = view.parent_texts[-1].replace("✅ *COMPLETED*", "🚫 *CANCELLED*")
    view.jobs = view.incarnations = [replace(JOB, state="FAILED")]
    assert kinds(view, dirs) == []


def test_a_final_state_that_differs_from_sacct(dirs: dict[str, Path]) -> None:
    view = clean()
    view.jobs = view.incarnations = [replace(JOB, state="FAILED")]
    assert kinds(view, dirs) == ["final_state"]


def test_a_missing_page(dirs: dict[str, Path]) -> None:
    """Slurm recorded a node failure under the job (then requeued it): on-call was due one
    page, and got none. With the page, nothing is amiss; with it twice, that is reported."""
    view = clean()
    view.incarnations = [replace(JOB, state="NODE_FAIL", end=1030.0), JOB]
    view.thread.insert(4, "⚠️ Slurm requeued job 501 (restart 1), usually after a node failure")
    assert kinds(view, dirs) == ["page_count"]
    view.pages = [PAGE]
    assert kinds(view, dirs) == []
    view.pages = [PAGE, PAGE]
    assert kinds(view, dirs) == ["duplicate_page", "page_count"]


def test_a_checkpoint_announced_twice(dirs: dict[str, Path]) -> None:
    view = clean()
    view.thread.insert(5, CHECKPOINT)
    assert kinds(view, dirs) == ["checkpoint_twice", "duplicate_message"]


def test_a_checkpoint_announced_but_not_on_disk(dirs: dict[str, Path]) -> None:
    (dirs["nemo_rl"] / "501" / "checkpoints" / "step_10").rename(
        dirs["nemo_rl"] / "501" / "checkpoints" / "tmp_step_10"
    )
    assert kinds(clean(), dirs) == ["checkpoint_missing"]


# Two jobs of a retried launch: 1 h then 10 h on 8 GPUs (sacct's ElapsedRaw, AllocTRES).
FIRST = replace(JOB, state="CANCELLED by 1001", elapsed_s=3600, gpus=8)
SECOND = replace(JOB, job_id="502", elapsed_s=36000, gpus=8)
OTHER = "L-9f8e7d"


def charged_view(launch: str = LAUNCH, jobs: tuple[JobRow, ...] = (FIRST, SECOND)) -> View:
    view = clean()
    view.plan = replace(view.plan, launch_id=launch)
    view.jobs = view.incarnations = list(jobs)
    return view


def charge_kinds(charged: dict[str, float | None], total: float, rows: list[JobRow]) -> list[str]:
    views = [charged_view(), charged_view(OTHER, (replace(JOB, job_id="600", elapsed_s=0),))]
    return sorted(d.kind for d in check_charges(views, charged, total, rows))


ROWS = [FIRST, SECOND, replace(JOB, job_id="600", elapsed_s=0)]


def test_charges_equal_to_sacct_show_no_divergence() -> None:
    """88 GPU-hours for the retried launch; the one cancelled while pending used none and
    is charged 0 (never charged at all: its ending was never processed)."""
    assert charge_kinds({LAUNCH: 88.0, OTHER: 0.0}, 88.0, ROWS) == []
    assert charge_kinds({LAUNCH: 88.0, OTHER: None}, 88.0, ROWS) == ["uncharged"]


@pytest.mark.parametrize(
    ("charged", "total", "rows", "found"),
    [
        # the old attempt billed until the launch ended: 11 h + 10 h on 8 GPUs
        ({LAUNCH: 168.0, OTHER: 0.0}, 168.0, ROWS, ["charge_mismatch", "charged_total"]),
        # the ending (a cancel, a give-up, a dead letter) charged nothing
        ({LAUNCH: 0.0, OTHER: 0.0}, 0.0, ROWS, ["charge_mismatch", "charged_total"]),
        ({LAUNCH: None, OTHER: None}, 0.0, ROWS, ["charged_total", "uncharged", "uncharged"]),
        # charged twice into the budget (the launch's own figure right)
        ({LAUNCH: 88.0, OTHER: 0.0}, 176.0, ROWS, ["charged_total"]),
        # only the last job counted
        ({LAUNCH: 80.0, OTHER: 0.0}, 80.0, ROWS, ["charge_mismatch", "charged_total"]),
        # a job Slurm ran that no launch was charged for
        ({LAUNCH: 88.0, OTHER: 0.0}, 88.0, [*ROWS, replace(JOB, job_id="700", elapsed_s=60,
                                                            gpus=8)], ["charged_total"]),
    ],
)  # fmt: skip
def test_charges_that_differ_from_sacct_are_divergences(
    charged: dict[str, float | None], total: float, rows: list[JobRow], found: list[str]
) -> None:
    assert charge_kinds(charged, total, rows) == found


def test_a_requeued_job_is_charged_every_incarnation() -> None:
    node_fail = replace(JOB, state="NODE_FAIL", elapsed_s=20, gpus=16)
    again = replace(JOB, elapsed_s=3600, gpus=16)
    view = charged_view(jobs=(again,))
    view.incarnations = [node_fail, again]
    rows = [node_fail, again]
    assert check_charges([view], {LAUNCH: 16 + 20 * 16 / 3600}, 16 + 20 * 16 / 3600, rows) == []
    (wrong,) = check_charges([view], {LAUNCH: 16.0}, 16 + 20 * 16 / 3600, rows)
    assert wrong.kind == "charge_mismatch" and "jobs 501" in wrong.detail


def test_a_nemo_checkpoint_is_looked_for_under_the_loggers_default_directory(
    dirs: dict[str, Path],
) -> None:
    view = clean()
    view.plan = replace(view.plan, framework="nemo")
    run = dirs["nemo_logs"] / f"soak-0-{LAUNCH}"
    (run / "checkpoints" / "model-step=10-last").mkdir(parents=True)  # not where NeMo saves
    assert kinds(view, dirs) == ["checkpoint_missing"]
    (run / "default" / "checkpoints" / "model-step=10-last" / "weights").mkdir(parents=True)
    assert kinds(view, dirs) == []
    (run / "default" / "checkpoints" / "model-step=10-last-unfinished").touch()
    assert kinds(view, dirs) == ["checkpoint_missing"]
