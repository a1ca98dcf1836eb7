"""An image run: one ``/images import`` or ``/images fetch``, from queued to its end (how
it reads in its thread is ``bot.wording.image_run``'s).

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
