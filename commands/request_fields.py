"""The field types the request models are built from: cluster names, node counts,
Slurm times, job names, images, recipe overrides, job references and help topics.

Each checks its value with the same patterns the parser uses (``commands.values``), so
a request is as safe read back from storage as parsed (``commands.requests``).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from cluster.launching.parts import OVERRIDE_KEY_PATTERN, OVERRIDE_VALUE_PATTERN
from cluster.site.image_refs import is_registry_ref
from cluster.site.profile_fields import CLUSTER_NAME_PATTERN, IMAGE_NAME_PATTERN
from cluster.slurm.base import slurm_time_seconds
from commands.sweep import SWEEP_ID_PATTERN
from commands.values import (
    IMAGE_PATH_PATTERN,
    LAUNCH_ID_PATTERN,
    NAME_PATTERN,
    PARTITION_PATTERN,
    SLURM_JOB_ID_PATTERN,
)

HelpTopic = Literal[
    "train",
    "interactive",
    "recipes",
    "attach",
    "jobs",
    "cancel",
    "logs",
    "clusters",
    "usage",
    "watch",
    "unwatch",
    "checkpoints",
    "images",
]
HELP_TOPICS: tuple[HelpTopic, ...] = get_args(HelpTopic)
MAX_NODES = 4096


def _check_time(value: str | None) -> str | None:
    if value is not None:
        slurm_time_seconds(value)
    return value


def _check_image(value: str | None) -> str | None:
    if value is None or re.fullmatch(IMAGE_NAME_PATTERN, value):
        return value
    if re.fullmatch(IMAGE_PATH_PATTERN, value) and ".." not in value.split("/"):
        return value
    if is_registry_ref(value):
        return value
    raise ValueError("must be an image name, a .sqsh path or a registry reference")


ClusterName = Annotated[str, Field(pattern=CLUSTER_NAME_PATTERN)]
Nodes = Annotated[int, Field(ge=1, le=MAX_NODES)]
Partition = Annotated[str | None, Field(pattern=PARTITION_PATTERN)]
SlurmTime = Annotated[str | None, AfterValidator(_check_time)]
JobName = Annotated[str | None, Field(pattern=NAME_PATTERN)]
Image = Annotated[str | None, AfterValidator(_check_image)]
Override = tuple[
    Annotated[str, Field(pattern=OVERRIDE_KEY_PATTERN)],
    Annotated[str, Field(pattern=OVERRIDE_VALUE_PATTERN)],
]


class JobRef(BaseModel):
    """A job: the bot's launch id (``L-7f3a9c``) or a Slurm job id, maybe with its cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=f"{LAUNCH_ID_PATTERN}|{SLURM_JOB_ID_PATTERN}|{SWEEP_ID_PATTERN}")
    cluster: ClusterName | None = None

    @property
    def is_launch_id(self) -> bool:
        return self.id.startswith("L-")

    @property
    def is_sweep_id(self) -> bool:
        return self.id.startswith("S-")

    def to_text(self) -> str:
        return self.id if self.cluster is None else f"{self.id} cluster={self.cluster}"

    def __str__(self) -> str:
        return self.id if self.cluster is None else f"{self.id} on {self.cluster}"
