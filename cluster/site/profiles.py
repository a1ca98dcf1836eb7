"""Cluster profiles: where a cluster's login node is and how jobs run there.

A profile is one entry under ``clusters:`` in the config file. A cluster is
described by what it has (GPUs per node and their model, the network fabric and
the NCCL settings its jobs get, the launcher's cluster type when the recipes want
one: :mod:`cluster.site.presets`); a *type* names one of the four Google Cloud presets,
which fills those in (a profile may still override any of them). The container
flags, and the NCCL set-up of a preset, are the launchers' business: trainbot passes
the type to them (``run.py --slurm-type``, ``launch.sh --cluster_type``), as a
person would; ``nccl_env`` is exported before the launcher runs.

The values its fields hold are checked by :mod:`cluster.site.profile_fields` (paths on
the login node are strings, absolute or starting with ``~/``, made of characters
that need no shell quoting); the login node and whose user a launch runs as are
:mod:`cluster.site.login`'s. Paths on the bot's machine (the SSH key and known_hosts)
are :class:`pathlib.Path`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import quote

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from cluster.site.framework_registry import frameworks
from cluster.site.image_refs import ImageRef
from cluster.site.login import RESERVED_USERS, Identity, LoginNode
from cluster.site.presets import (
    GPU_MODEL_PATTERN,
    NCCL_NAME_PATTERN,
    PRESETS,
    Fabric,
    NcclValue,
    Preset,
    PresetName,
    describe_machine,
)
from cluster.site.profile_fields import (
    CLUSTER_NAME_PATTERN,
    ENV_NAME_PATTERN,
    IMAGE_NAME_PATTERN,
    SLURM_NAME_PATTERN,
    RemotePath,
    SecretRef,
    TokenizerSeed,
    check_attach_template,
    check_eval_command,
    check_remote_path,
    check_tensorboard_template,
    check_time_limit,
)
from cluster.slurm.sbatch import JobShape
from cluster.ssh.remote import join_remote

ClusterType = PresetName
_NULLABLE = (
    "account", "time_limit", "attach_url_template", "tensorboard_url_template", "region",
)  # fmt: skip
_PRESET_NAMES = ", ".join(PRESETS)
_BY_NAME: dict[str, Preset] = {str(name): preset for name, preset in PRESETS.items()}
TYPE_DEFAULTS = PRESETS  # the presets under their older name


class ClusterProfile(BaseModel):
    """One cluster: the login node, Slurm defaults, images and directories.

    Fields left out take their defaults from the cluster ``type`` (a preset) and from
    ``recipes_dir`` (see :meth:`_fill_defaults`). Without a ``type``, the cluster says
    what it has: ``gpus_per_node`` (required), ``gpu_model``, ``fabric``, ``nccl_env``,
    and ``launcher_type`` when its recipes want a cluster type. ``images`` holds each
    framework's default image under the framework's name unless the config names
    another. ``price_per_gpu_hour`` prices this cluster's GPU-hours for ``/usage``
    (before ``policy.usage.price_per_gpu_hour``).
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, use_attribute_docstrings=True
    )

    name: str = Field(pattern=CLUSTER_NAME_PATTERN)
    """The cluster's name: its key under `clusters` (not written in the file)."""
    type: ClusterType | None = None
    """A Google Cloud preset (`hcc-a3m`, `hcc-a3u`, `hcc-a4`, `hcc-a3h`) that fills in
    `gpus_per_node`, `gpu_model`, `fabric` and `launcher_type`; left out: any Slurm GPU
    cluster, which says what it has (docs/clusters.md)."""
    gpu_model: str | None = Field(default=None, pattern=GPU_MODEL_PATTERN)
    """The GPUs' model (`H100`, `A100-80GB`): shown beside the cluster's name, a key of
    `policy.usage.price_per_gpu_hour`, compared by `trainbot doctor` with Slurm's GRES."""
    fabric: Fabric | None = None
    """What the GPUs talk over: `tcpx`, `tcpxo`, `rdma`, `infiniband`, `roce`, `efa` or
    `ethernet`."""
    nccl_env: dict[Annotated[str, Field(pattern=NCCL_NAME_PATTERN)], NcclValue] = Field(
        default_factory=dict
    )
    """`NCCL_*` (and `UCX_*`, `FI_*`, `OMPI_MCA_*`, `TORCH_NCCL_*`) variables exported before
    the launcher runs, so the job's NCCL finds the fabric."""
    launcher_type: str | None = Field(default=None, pattern=SLURM_NAME_PATTERN)
    """The value passed as `run.py --slurm-type` and `launch.sh --cluster_type`; default: the
    preset's type; without one, the flag is not passed."""
    price_per_gpu_hour: float | None = Field(default=None, ge=0, le=1_000_000)
    """What a GPU-hour costs here, for `/usage` (before `policy.usage.price_per_gpu_hour`)."""
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
    image_dir: RemotePath = "~/vertex-oss-training/images"
    """On the login node: where `/images import` and `/images fetch` write images
    (`<name>.sqsh`), so that `image=<name>` finds them. Default: `<recipes_dir>/images`."""
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
    """GPUs per node, as Slurm's GRES says (`gpu:h100:8` is 8); default: the preset's; required
    without a `type`."""
    tokenizer_seed: TokenizerSeed | None = None
    """Where to get the GPT-2 tokenizer files when NeMo's tokenizer download races between ranks
    ([Errno 18] Invalid cross-device link); left out: no seeding."""
    eval_command: Annotated[str, AfterValidator(check_eval_command)] = ""
    """The site's evaluation recipe, which `then=eval:<task>[,<task>...]` runs after the
    launch has completed and its final checkpoint is exported to Hugging Face format: one shell
    command, run in the launch's container on one node, with `{model}` (the exported
    directory), `{tasks}` (the tasks, comma-separated) and `{output}` (a directory for its
    results), each filled in shell-quoted; it prints lm-evaluation-harness's results table
    (for example `lm_eval --model hf --model_args pretrained={model} --tasks {tasks}
    --batch_size auto --output_path {output}`). Empty: `then=eval` is refused here."""
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
        kind = data.get("type")
        preset = _BY_NAME.get(kind) if isinstance(kind, str) else None
        if preset is not None:
            data.setdefault("gpus_per_node", preset.gpus_per_node)
            data.setdefault("gpu_model", preset.gpu_model)
            data.setdefault("fabric", preset.fabric)
            data.setdefault("launcher_type", kind)
        elif kind is None and "gpus_per_node" not in data:
            raise ValueError(
                "gpus_per_node is required for a cluster without a type preset "
                f"({_PRESET_NAMES}): say how many GPUs a node has (Slurm's GRES, "
                "e.g. gpu:h100:8 is 8; trainbot doctor shows what sinfo reports)"
            )
        recipes_dir = data.setdefault("recipes_dir", "~/vertex-oss-training")
        try:
            check_remote_path(recipes_dir)
        except (TypeError, ValueError, AttributeError):
            return data  # reported on recipes_dir itself
        data.setdefault("nemorun_home", join_remote(recipes_dir, "nemo"))
        data.setdefault("image_dir", join_remote(recipes_dir, "images"))
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
        """The machine in words: the preset's name, or what the cluster has."""
        if self.type is not None:
            return PRESETS[self.type].machine
        return describe_machine(self.gpu_model, self.gpus_per_node, self.fabric)

    @property
    def kind(self) -> str:
        """A short word for the cluster's kind: its preset type, else its GPU model."""
        return self.type or self.gpu_model or "Slurm"

    def gpu_hour_price(self, table: dict[str, float]) -> float | None:
        """What a GPU-hour costs here: this cluster's own ``price_per_gpu_hour``, else
        ``table``'s entry for its name, its type, then its GPU model (None: no price)."""
        if self.price_per_gpu_hour is not None:
            return self.price_per_gpu_hour
        for key in (self.name, self.type, self.gpu_model):
            if key is not None and key in table:
                return table[key]
        return None

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

    @property
    def image_directory(self) -> str:
        """Where imported and fetched images lie: ``image_dir`` (``<recipes_dir>/images``
        unless the config names another)."""
        return self.image_dir

    def resolve_image(self, image: str | None, framework: str) -> str:
        """The image path for a request's ``image=``: a name of ``images``, a name of an image
        in :attr:`image_directory` (``<name>.sqsh``, imported or fetched), a path, or None."""
        if image is None:
            return self.image_for(framework)
        if image in self.images:
            return self.images[image]
        if re.fullmatch(IMAGE_NAME_PATTERN, image) and not image.endswith(".sqsh"):
            return join_remote(self.image_directory, f"{image}.sqsh")
        return image

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
