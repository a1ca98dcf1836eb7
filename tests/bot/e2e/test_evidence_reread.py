"""The poller's diagnosis of a failed job: everything the job left, read on the login
node, and read once more after a short delay before an unknown cause stands."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.engine.babysit import on_failure
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.wording import thread
from cluster.watching.collector import JobSnapshot, LogChunk
from cluster.watching.tracking import Tracking
from commands.requests import TrainRequest
from tests.bot.e2e.test_babysit_e2e import console_bot
from tests.cluster.test_diagnosis import FAKE_JOB_ID, JOBS, lay_out, text, with_state

pytestmark = [pytest.mark.devcluster]


# The jobs are laid out under JOBS, the cluster's log directory here: the poller reads a
# job's files only inside the cluster's directories.


@pytest.fixture
def job_root(unique: str) -> Iterator[Path]:
    root = JOBS / unique
    yield root
    shutil.rmtree(root, ignore_errors=True)


def failed(tracking: Tracking) -> JobSnapshot:
    """What a poll sees of a job that ended FAILED (sacct's row, no new log bytes)."""
    return JobSnapshot(
        job_id=tracking.job_id,
        state="FAILED",
        queue=None,
        acct=with_state(None, "FAILED", "dev0"),
        restart=0,
        log=LogChunk("", "", 0, -1),
    )


async def test_a_cause_that_shows_up_late_is_found_on_the_second_read(job_root: Path) -> None:
    tracking = lay_out(job_root, "nemo_x", log="GPU available: True\n")
    async with console_bot(evidence_reread_s=2.0) as (bot, _):
        profile = bot.clusters.profile("a4").model_copy(update={"log_dir": str(JOBS)})
        assert await bot.poller.diagnoser.diagnose(profile, tracking, failed(tracking)) is None
        # The shared file system catches up: the sbatch log now holds the cause.
        late = Path(tracking.log_dir) / f"sbatch_trainer-trainer.x_{FAKE_JOB_ID}.out"
        late.write_text(text("nemo_tokenizer_race"))
        late.chmod(0o644)
        assert (
            await bot.poller.diagnoser.diagnose(profile, tracking, failed(tracking)) is None
        )  # too soon
        await asyncio.sleep(2.0)
        found = await bot.poller.diagnoser.diagnose(profile, tracking, failed(tracking))
    assert found is not None and found.key == "tokenizer_race"


async def test_an_unknown_cause_stands_after_the_delay_and_says_what_was_read(
    job_root: Path,
) -> None:
    tracking = lay_out(job_root, "nemo_x", log="GPU available: True\nValueError: odd\n")
    async with console_bot(evidence_reread_s=1.0) as (bot, _):
        profile = bot.clusters.profile("a4").model_copy(update={"log_dir": str(JOBS)})
        snap = failed(tracking)
        assert await bot.poller.diagnoser.diagnose(profile, tracking, snap) is None
        assert await bot.poller.diagnoser.diagnose(profile, tracking, snap) is None  # too soon
        await asyncio.sleep(1.0)
        found = await bot.poller.diagnoser.diagnose(profile, tracking, snap)
    assert found is not None and found.key == "unknown"
    assert found.evidence[0] == "ValueError: odd"
    assert f"log-trainer-trainer.x_{FAKE_JOB_ID}_0.out in {tracking.log_dir}" in found.read
    # The thread says it, through the same function the poller posts with.
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    launch = Launch(request=request, user_id="alice", channel="console", phase=Phase.RUNNING)
    launch.attempts = [Attempt(number=1, job_id=FAKE_JOB_ID, tracking=tracking)]
    events, retried = on_failure(
        launch, bot.clusters.config.watch, state="FAILED", diagnosis=found, now=time.time()
    )
    said = thread.line(events[0])
    assert not retried and "Not retrying: the cause is unknown." in said
    assert f"Read: log-trainer-trainer.x_{FAKE_JOB_ID}_0.out in " in said, said
    assert "srun force-terminated" not in said  # nothing was cut here
