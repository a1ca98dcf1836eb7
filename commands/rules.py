"""The rule models of who may approve, read logs, be charged to which account and run
which images (plain data, validated; no I/O). :mod:`commands.policy` holds them in the
:class:`~commands.policy.Policy`; :mod:`commands.access` decides over them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from cluster.site.image_refs import is_registry_ref, pyxis_image
from cluster.site.profile_fields import SLURM_NAME_PATTERN, check_remote_path

ANY = "*"
NamedId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
PrincipalId = Annotated[str, Field(pattern=r"^(\*|[A-Za-z0-9][A-Za-z0-9._-]{0,63})$")]
ClusterPattern = Annotated[str, Field(pattern=r"^(\*|[a-z0-9][a-z0-9_-]{0,31})$")]
ImageDir = Annotated[str, AfterValidator(check_remote_path)]
#: The start of a registry reference: a host and a path prefix (``nvcr.io/nvidia/``).
RegistryPrefix = Annotated[
    str, Field(pattern=r"^(docker://)?[a-z0-9.-]+(:[0-9]{1,5})?[#/]([a-z0-9._/-]{0,200})$")
]
TeamId = Annotated[str, Field(pattern=r"^[TE][A-Z0-9]{2,}$")]


class _People(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    users: tuple[PrincipalId, ...] = ()
    """Slack user ids (`U...`) it covers, or `"*"` for everyone."""
    groups: tuple[PrincipalId, ...] = ()
    """Slack user group ids (`S...`) whose members it covers."""
    clusters: tuple[ClusterPattern, ...] = (ANY,)
    """Cluster names it covers, or `"*"`."""

    def covers(self, user_id: str, group_ids: Collection[str], cluster: str) -> bool:
        in_cluster = ANY in self.clusters or cluster in self.clusters
        person = (
            ANY in self.users
            or user_id in self.users
            or ANY in self.groups
            or any(group in self.groups for group in group_ids)
        )
        return in_cluster and person


class ApproverRule(_People):
    """Named users or user groups who may approve launches on ``clusters`` of up to
    ``max_nodes`` nodes (any size when unset). ``*`` is refused: approving is a
    second pair of eyes, not something everyone has."""

    max_nodes: int | None = Field(default=None, ge=1)
    """The largest launch (in nodes) they may approve; null: any size."""

    @field_validator("users", "groups")
    @classmethod
    def _named(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if ANY in value:
            raise ValueError(
                'approvers must be named users or user groups, not "*" '
                "(everyone approving is no second person)"
            )
        return value


class ViewerRule(_People):
    """Who may read the logs of other people's launches on ``clusters``."""


class StartFromRule(_People):
    """Who may start (``from=``) from the checkpoints of other people's launches on
    ``clusters``: their job then reads those files as its own Unix user."""


class AccountRule(_People):
    """People whose launches on ``clusters`` run under the Slurm ``account``."""

    account: str = Field(pattern=SLURM_NAME_PATTERN)
    """The Slurm account (`--account`) their launches there are charged to."""


class ImageRule(_People):
    """Who may run custom images on ``clusters``: ``image=<path>`` from which directories
    on the login node, ``image=<registry reference>`` from which registry prefixes
    (``nvcr.io/nvidia/``: after the host, a ``#`` and ``/`` are the same), and whether
    those launches get the job secrets."""

    dirs: tuple[ImageDir, ...] = ()
    """Absolute directories on the login node (only admins can write them) a custom image file
    must be inside."""
    registries: tuple[RegistryPrefix, ...] = ()
    """Registry prefixes (host, then path: `nvcr.io/nvidia/`) a custom registry image must start
    with; a rule names `dirs`, `registries` or both."""
    job_secrets: bool = False
    """Whether a launch with such an image gets the cluster's job secrets (an image you did not
    build should not see `HF_TOKEN`)."""

    @model_validator(mode="after")
    def _some_place(self) -> ImageRule:
        if not self.dirs and not self.registries:
            raise ValueError("name the dirs or the registries (or both) its images come from")
        return self

    def holds(self, image: str) -> bool:
        if is_registry_ref(image):
            ref = pyxis_image(image).replace("#", "/", 1)
            return any(ref.startswith(pyxis_image(p).replace("#", "/", 1)) for p in self.registries)
        return any(image.startswith(d.rstrip("/") + "/") for d in self.dirs)
