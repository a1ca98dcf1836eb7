"""How an image run (``/images import`` or ``fetch``) reads in its thread: the parent
message (the state at a glance) and each line, from the run's record
(:class:`bot.lifecycle.image_run.ImageRun`) and what Slurm said. The image runner
(``bot.engine.image_runner``) posts them; it is handed these words by the runtime
(:class:`bot.engine.image_runner.ImageWords`) and writes none of its own. Pure: a run in,
mrkdwn out."""

from __future__ import annotations

from bot.lifecycle.image_run import ImageRun
from bot.text.mrkdwn import escape
from cluster.images.jobs import ImageJob, Outcome


def what_text(run: ImageRun, job: ImageJob | None = None) -> str:
    """``import docker://nvcr.io#nvidia/nemo:26.02 as nemo-26.02`` (escaped)."""
    request = run.request
    if request.action == "import":
        source = job.source if job else str(request.source)
        return f"import `{escape(source)}` as {escape(str(request.name))}"
    return f"fetch the prebuilt {escape(str(request.framework))} image"


def parent_text(run: ImageRun, job: ImageJob | None = None) -> str:
    """The parent message: the state at a glance."""
    head = {
        "queued": "⏳ QUEUED",
        "submitted": "🕒 PENDING",
        "running": "🟢 RUNNING",
        "done": "✅ READY" if run.ok else "❌ FAILED",
    }[run.phase]
    job_part = f" · job {run.job_id}" if run.job_id else ""
    return f"{head}  image · {what_text(run, job)} · {escape(run.cluster)}{job_part}"


def queued_text(run: ImageRun) -> str:
    return f"Queued by <@{run.user_id}>: `{escape(run.request.to_text())}`"


def submitted_text(run: ImageRun, job: ImageJob) -> str:
    how = "enroot import" if job.kind == "import" else "gcloud storage cp, or a link to /gcs/"
    as_user = f", as {escape(run.cluster_user)}" if run.cluster_user else ""
    return (
        f"Submitted: Slurm job {run.job_id} on {escape(run.cluster)}{as_user} ({how}), "
        f"writing `{escape(job.target)}`. Log: `{escape(job.log_of(run.job_id))}`"
    )


def running_text(run: ImageRun) -> str:
    return f"Running (Slurm job {run.job_id})."


def final_text(run: ImageRun, end: Outcome) -> str:
    """The last line, which mentions the owner: the image is there, or why not and what
    to do. A site's problem (credentials, disk) is said to the person, not paged."""
    mark = "✅" if end.ok else "❌"
    return f"<@{run.user_id}> {mark} {escape(end.text)}"


def not_submitted_text(run: ImageRun, why: str) -> str:
    return f"<@{run.user_id}> ❌ Not submitted: {escape(why)}"


def lost_text(run: ImageRun, after_min: float) -> str:
    return (
        f"<@{run.user_id}> ❌ Slurm has no word of job {run.job_id} {after_min:.0f} min after "
        "it was submitted (not in its accounting): it is no longer followed. See /images "
        "for whether the image is there, or run the same command again."
    )


def not_followed_text(run: ImageRun, why: str) -> str:
    return (
        f"<@{run.user_id}> ❌ No longer followed (Slurm job {run.job_id} may still run): "
        f"{escape(why)}"
    )
