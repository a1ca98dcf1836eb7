"""Cluster profiles: where a cluster's login node is and how jobs run there.

A profile is one entry under ``clusters:`` in the config file. A cluster
*type* names the machine and its GPUs per node (:data:`TYPE_DEFAULTS`; a
profile may override ``gpus_per_node``). The NCCL set-up and the container
flags are the launchers' business: trainbot passes the type to them
(``run.py --slurm-type``, ``launch.sh --cluster_type``), as a person would.

The values its fields hold are checked by :mod:`cluster.profile_fields` (paths on
the login node are strings, absolute or starting with ``~/``, made of characters
that need no shell quoting); the login node and whose user a launch runs as are
:mod:`cluster.login`'s. Paths on the bot's machine (the SSH key and known_hosts)
are :class:`pathlib.Path`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import quote

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from cluster.framework_registry import frameworks
from cluster.images import ImageRef
from cluster.login import RESERVED_USERS, Identity, LoginNode
from cluster.profile_fields import (
    CLUSTER_NAME_PATTERN,
    ENV_NAME_PATTERN,
    IMAGE_NAME_PATTERN,
    SLURM_NAME_PATTERN,
    RemotePath,
    SecretRef,
    TokenizerSeed,
    check_attach_template,
    check_remote_path,
    check_tensorboard_template,
    check_time_limit,
)
from cluster.remote import join_remote
from cluster.sbatch import JobShape

ClusterType = Literal["hcc-a3m", "hcc-a3u", "hcc-a4", "hcc-a3h"]
_NULLABLE = (
    "account", "time_limit", "attach_url_template", "tensorboard_url_template", "region",
)  # fmt: skip


class TypeDefaults(BaseModel):
    """What a cluster type implies; see FIELD_GUIDE section 2."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    machine: str
    gpus_per_node: int = 8


TYPE_DEFAULTS: dict[ClusterType, TypeDefaults] = {
    "hcc-a3m": TypeDefaults(machine="A3 Mega (H100, TCPXO)"),
    "hcc-a3u": TypeDefaults(machine="A3 Ultra (H200, RDMA)"),
    "hcc-a4": TypeDefaults(machine="A4 (B200, RDMA)"),
    "hcc-a3h": TypeDefaults(machine="A3 High (H100)"),
}


class ClusterProfile(BaseModel):
    """One cluster: the login node, Slurm defaults, images and directories.

    Fields left out take their defaults from the cluster ``type`` and from
    ``recipes_dir`` (see :meth:`_fill_defaults`), so every field of a built
    profile holds a concrete value. ``images`` holds each framework's default
    image under the framework's name unless the config names another.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, use_attribute_docstrings=True
    )

    name: str = Field(pattern=CLUSTER_NAME_PATTERN)
    """The cluster's name: its key under `clusters` (not written in the file)."""
    type: ClusterType
    """The cluster type, passed to the launchers (`run.py --slurm-type`, `launch.sh
    --cluster_type`), which set up NCCL and the container for it; it also gives `gpus_per_node`
    unless that is set."""
    description: str = Field(default="", max_length=200)
    """Shown in `/clusters`."""
    login: LoginNode
    """How the bot reaches the login node over SSH."""
    partition: str = Field(pattern=SLURM_NAME_PATTERN)
    """The default Slurm partition (`partition=` in `/train` picks another); it must exist
    (`sinfo`)."""
    max_nodes: int = Field(ge=1, le=4096)
    """The most nodes one launch may use on this cluster (policy may allow fewer)."""
    account: str | None = Field(default=None, pattern=SLURM_NAME_PATTERN)
    """The Slurm account (`sbatch --account`) of launches no `policy.accounts` rule covers; null:
    none."""
    recipes_dir: RemotePath = "~/vertex-oss-training"
    """On the login node: the recipes checkout (`vertex-oss-training`) with `nemo/` and `nemo_rl/`
    beneath."""
    nemorun_home: RemotePath = ""
    """On the login node: `NEMORUN_HOME` for `run.py`. Default: `<recipes_dir>/nemo`."""
    images: dict[Annotated[str, Field(pattern=IMAGE_NAME_PATTERN)], ImageRef] = Field(
        default_factory=dict
    )
    """Container images by name: a `.sqsh` file on the login node or a registry reference
    (`nvcr.io/nvidia/nemo:26.02`, `nvcr.io#nvidia/nemo-rl:v0.5.0`, `docker://...`), which pyxis
    imports when the job starts; `image=<name>` picks one, and `nemo`, `nemo-rl` and
    `megatron-bridge` are each framework's default."""
    allow_custom_images: bool = True
    """Whether `image=` may also be a path to a `.sqsh` file or a registry reference (only for
    the people, directories and registries `policy.custom_images` allows), or only a name in
    `images`."""
    region: Literal["us", "europe", "asia"] | None = None
    """The Google Cloud region whose prebuilt images the guide names for this cluster
    (`gs://vmds-containers-<region>/...`, mounted at `/gcs/vmds-containers-<region>/...`), for
    `/images`; null: none listed."""
    cache_dir: RemotePath = "~/.cache"
    """On the login node: `run.py --cache-dir`, mounted into the job; it must exist."""
    data_dir: RemotePath = "~/data"
    """On the login node: `run.py --data-dir`, mounted into the job; it must exist."""
    log_dir: RemotePath = ""
    """On the login node: `run.py --log-dir`, mounted into the job; it must exist. Default:
    `<nemorun_home>/logs`."""
    poll_interval_s: float = Field(default=5.0, gt=0, le=3600)
    """Seconds between status polls of this cluster (one `squeue` per poll)."""
    time_limit: Annotated[str | None, AfterValidator(check_time_limit)] = None
    """The default Slurm time limit (`MM`, `HH:MM:SS`, `D-HH:MM:SS`); null: the partition's own."""
    job_secrets: dict[Annotated[str, Field(pattern=ENV_NAME_PATTERN)], SecretRef] = Field(
        default_factory=dict
    )
    """Environment variables the job gets, never on a command line: `{env: NAME}` from the bot's
    environment, `{file: PATH}` read on the login node when the job starts (with identity, each
    person's own file)."""
    attach_url_template: Annotated[str | None, AfterValidator(check_attach_template)] = None
    """A web link `/attach` offers; placeholders `{host}` `{port}` `{user}` `{job_id}` `{cluster}`;
    null: none."""
    tensorboard_url_template: Annotated[str | None, AfterValidator(check_tensorboard_template)] = (
        None
    )
    """An https link to a run's TensorBoard, for runs that log to it; placeholders `{log_dir}`
    `{job_id}` `{launch_id}`, each URL-quoted; null: the thread names the directory instead."""
    gpus_per_node: int = Field(default=0, ge=1, le=64)
    """GPUs per node; 0: the cluster type's."""
    tokenizer_seed: TokenizerSeed | None = None
    """Where to get the GPT-2 tokenizer files when NeMo's tokenizer download races between ranks
    ([Errno 18] Invalid cross-device link); left out: no seeding."""
    identity: Identity | None = None
    """Run each person's launches as their own Unix user on this cluster, logged in with a
    certificate from `login.user_ca_key_file` (docs/identity.md); left out: every launch runs as
    `login.user`."""

    @model_validator(mode="after")
    def _identity_users(self) -> ClusterProfile:
        if self.identity is not None:
            wrong = sorted(
                f"{who}: {name}"
                for who, name in self.identity.users.items()
                if name in RESERVED_USERS or name == self.login.user
            )
            if wrong:
                raise ValueError(
                    f"identity.users: {', '.join(wrong)} is root or the shared account "
                    f"{self.login.user}, never a person's user; leave them out (unmapped: "
                    "shared runs those whom nothing names as the shared account)"
                )
            env = {k for k, ref in self.job_secrets.items() if ref.env is not None}
            unknown = [n for n in self.identity.org_secrets if n not in env]
            if unknown:
                raise ValueError(
                    f"identity.org_secrets: {', '.join(unknown)} is not a job_secrets entry "
                    f"given as {{env: NAME}} (those are: {', '.join(sorted(env)) or 'none'})"
                )
        return self

    def people_secrets(self) -> dict[str, SecretRef]:
        """The job secrets a person's own job gets here: ``{file: ...}`` ones (their own
        files) and the ``{env: ...}`` ones ``identity.org_secrets`` names."""
        allowed = self.identity.org_secrets if self.identity is not None else ()
        return {k: r for k, r in self.job_secrets.items() if r.env is None or k in allowed}

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        """Fill type defaults and the paths derived from ``recipes_dir``."""
        if not isinstance(data, dict):
            return data
        data = {k: v for k, v in data.items() if v is not None or k in _NULLABLE}
        defaults = TYPE_DEFAULTS.get(data.get("type"))
        if defaults is not None:
            data.setdefault("gpus_per_node", defaults.gpus_per_node)
        recipes_dir = data.setdefault("recipes_dir", "~/vertex-oss-training")
        try:
            check_remote_path(recipes_dir)
        except (TypeError, ValueError, AttributeError):
            return data  # reported on recipes_dir itself
        data.setdefault("nemorun_home", join_remote(recipes_dir, "nemo"))
        if isinstance(data["nemorun_home"], str):
            data.setdefault("log_dir", join_remote(data["nemorun_home"], "logs"))
        images = data.get("images", {})
        if isinstance(images, dict):
            images = dict(images)
            for fw in frameworks().values():
                images.setdefault(fw.name, fw.default_image(recipes_dir))
            data["images"] = images
        return data

    def as_user(self, user: str, key_id: str = "") -> ClusterProfile:
        """This cluster as ``user`` sees it: logged in as them, ``~`` their home, with
        certificates whose key id is ``key_id``. ``""`` (or the shared account's name) is
        the shared account."""
        if not user or user == self.login.user:
            return self
        rules = None if self.identity is None else self.identity.person_rules(self.login)
        return self.model_copy(update={"login": self.login.as_user(user, key_id, rules)})

    @property
    def machine(self) -> str:
        return TYPE_DEFAULTS[self.type].machine

    def image_for(self, framework: str) -> str:
        """The default image path for a framework (by default, its image in its directory)."""
        return self.images[framework]

    def job_shape(
        self,
        nodes: int,
        *,
        partition: str | None = None,
        time_limit: str | None = None,
        account: str | None = None,
        exclude: str | None = None,
    ) -> JobShape:
        """What a job of ``nodes`` asks Slurm for on this cluster: the partition, time
        limit and account it names, else this cluster's. The start estimate and the
        submit both take their sbatch options from it."""
        return JobShape(
            nodes=nodes,
            partition=partition or self.partition,
            time_limit=time_limit or self.time_limit,
            account=account or self.account,
            exclude=exclude,
        )

    def resolve_image(self, image: str | None, framework: str) -> str:
        """The image path for a request's ``image=``: a name of ``images``, a path, or None."""
        if image is None:
            return self.image_for(framework)
        return self.images.get(image, image)

    def attach_url(self, *, job_id: str) -> str | None:
        """The optional web link for attaching to an interactive job."""
        if self.attach_url_template is None:
            return None
        return self.attach_url_template.format(
            host=self.login.host,
            port=self.login.port,
            user=self.login.user,
            job_id=job_id,
            cluster=self.name,
        )

    def tensorboard_url(self, *, log_dir: str, job_id: str, launch_id: str) -> str | None:
        """The optional link to a run's TensorBoard (``log_dir`` on the login node)."""
        if self.tensorboard_url_template is None:
            return None
        return self.tensorboard_url_template.format(
            log_dir=quote(log_dir, safe="/~"),
            job_id=quote(job_id, safe=""),
            launch_id=quote(launch_id, safe=""),
        )
