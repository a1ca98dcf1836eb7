"""The words of an image run's thread (bot/wording/image_run.py): each line from the run's
record and what Slurm said, what the person or the registry wrote escaped, and the owner
mentioned where the run ends."""

from __future__ import annotations

from bot.lifecycle.image_run import ImageRun
from bot.wording import image_run as words
from cluster.images.jobs import ImageJob, Outcome
from commands.requests import ImagesRequest

REQUEST = ImagesRequest(
    action="import", source="nvcr.io#nvidia/nemo:26.02", name="nemo-26.02", cluster="a4"
)
JOB = ImageJob(
    kind="import", cluster="a4", name="nemo-26.02", source="docker://nvcr.io#nvidia/nemo:26.02",
    target="/img/nemo-26.02.sqsh",
)  # fmt: skip


def run(**fields: object) -> ImageRun:
    return ImageRun(id="I-0123456789", user_id="U1", channel="C1", request=REQUEST, **fields)


def test_the_parent_says_the_state_and_what_is_made() -> None:
    assert words.parent_text(run(), JOB) == (
        "⏳ QUEUED  image · import `docker://nvcr.io#nvidia/nemo:26.02` as nemo-26.02 · a4"
    )
    done = run(phase="done", ok=True, job_id="41")
    assert words.parent_text(done, JOB).startswith("✅ READY  image · import ")
    assert words.parent_text(done, JOB).endswith(" · a4 · job 41")


def test_the_lines_from_queued_to_running() -> None:
    assert words.queued_text(run()).startswith("Queued by <@U1>: `/images import ")
    submitted = words.submitted_text(run(job_id="41", cluster_user="alice"), JOB)
    assert submitted.startswith(
        "Submitted: Slurm job 41 on a4, as alice (enroot import), writing "
        "`/img/nemo-26.02.sqsh`. Log: `"
    )
    assert words.running_text(run(job_id="41")) == "Running (Slurm job 41)."


def test_the_ends_mention_the_owner_and_escape_what_they_quote() -> None:
    end = Outcome(ok=False, cause="auth", text="The registry said 401 <unauthorized>.")
    assert words.final_text(run(job_id="41"), end) == (
        "<@U1> ❌ The registry said 401 &lt;unauthorized&gt;."
    )
    assert (
        words.not_submitted_text(run(), "no <space>") == "<@U1> ❌ Not submitted: no &lt;space&gt;"
    )
    assert words.lost_text(run(job_id="41"), 10.0).startswith(
        "<@U1> ❌ Slurm has no word of job 41 10 min after it was submitted"
    )
    assert words.not_followed_text(run(job_id="41"), "ssh down") == (
        "<@U1> ❌ No longer followed (Slurm job 41 may still run): ssh down"
    )
