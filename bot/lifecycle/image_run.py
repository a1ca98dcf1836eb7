"""An image run: one ``/images import`` or ``/images fetch``, from queued to its end, and
how it reads in its thread.

The record is what Redis keeps (JSON). It holds the person's request (checked again by
its model when read back), who they are and where to post; never a path to write or a
command to run: the worker derives those from the request and the config
(:func:`cluster.images.jobs.plan_import`, :func:`~cluster.images.jobs.plan_fetch`).
"""

from __future__ import annotations

import secrets
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.text.mrkdwn import escape
from cluster.images.jobs import ImageJob, Outcome
from commands.requests import ImagesRequest

RUN_ID_PATTERN = r"^I-[0-9a-f]{10}$"
ImagePhase = Literal["queued", "submitted", "running", "done"]


def new_run_id() -> str:
    return "I-" + secrets.token_hex(5)


class ImageRun(BaseModel):
    """One image job's record."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(pattern=RUN_ID_PATTERN)
    user_id: str = Field(pattern=r"^[A-Za-z0-9._@-]{1,80}$")
    channel: str = Field(pattern=r"^[A-Za-z0-9._:/-]{1,80}$")
    request: ImagesRequest
    cluster_user: str = ""  # "": the shared account; checked against the config before use
    groups: list[str] = Field(default_factory=list)  # the owner's policy groups when asked
    phase: ImagePhase = "queued"
    parent_ts: str = ""  # the parent message, once posted
    posted: list[str] = Field(default_factory=list)  # the thread lines already posted, by key
    job_id: str = Field(default="", pattern=r"^([0-9]{1,12})?$")
    slurm_state: str = ""
    ok: bool = False
    cause: str = ""  # how it ended: ok, auth, disk_full, node, cancelled, failed,
    # not_submitted, not_followed, lost
    created_at: float = Field(default_factory=time.time)
    submitted_at: float = 0.0
    ended_at: float = 0.0

    @property
    def cluster(self) -> str:
        return str(self.request.cluster)

    @property
    def active(self) -> bool:
        return self.phase != "done"


# --- how it reads (the only place its sentences are written) -------------------------------


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
