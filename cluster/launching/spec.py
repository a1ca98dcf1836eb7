"""What one launch is, and the job model of the framework that runs it.

A :class:`LaunchSpec` is a checked request for one cluster (every field that
reaches a remote command line matches a strict pattern). Its :class:`Framework`
owns everything that differs between NeMo and NeMo-RL: the launcher's argv and
working directory, parsing what the launcher printed, where the job's files are
(logs, sbatch log, checkpoints, ``attach.sh``), how progress reads, the pre-flight
files, and the files that are evidence when the job fails. It also holds the facts
the registry (:mod:`cluster.site.framework_registry`) keeps of it: its name on the
``/train`` line (and other spellings of it), its label in help text, its default
image, the workloads it runs, and its entries in the built-in recipe catalog.

The two name each other, so they live here together; :mod:`cluster.launching.launch` turns a
spec into the script that submits it.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Literal

from pydantic import SecretStr

from cluster.launching.parts import OVERRIDE_KEY_PATTERN, OVERRIDE_VALUE_PATTERN, Mount
from cluster.site.framework_registry import FrameworkName, RecipeFields, frameworks, registered
from cluster.site.image_refs import check_image_ref, is_registry_ref, pyxis_image
from cluster.site.launcher_options import LauncherOptions
from cluster.site.profile_fields import SLURM_NAME_PATTERN
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import slurm_time_seconds
from cluster.slurm.sbatch import JobShape
from cluster.ssh.remote import RemoteArg, join_remote
from cluster.watching.progress import Point, Progress, tensorboard_dirs
from cluster.watching.tracking import Tracking

if TYPE_CHECKING:
    from cluster.launching.recipes import RecipeEntry

LAUNCH_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,39}")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
ARG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:+,@=-]{0,299}")
NODELIST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,\[\]-]{0,199}")
COMMENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 :._@-]{0,127}")
# A checkpoint as a job reads it: ~/..., /... or relative to the work dir; NeMo's names hold "=".
START_PATH_RE = re.compile(r"(~/|/)?[A-Za-z0-9._+@=-][A-Za-z0-9._+@=/-]{0,499}")
SCRIPT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*")


def _check(pattern: re.Pattern[str] | str, value: str, what: str) -> None:
    if not re.fullmatch(pattern, value):
        raise ValueError(f"invalid {what}: {value!r}")


class Framework(ABC):
    """One training framework's job model. Subclasses are stateless singletons, each
    added to the registry by :func:`~cluster.site.framework_registry.register` in its own module."""

    name: str  # what framework= says and records store: lower case letters, digits, - and _
    label: str  # what help text calls it: "NeMo-RL"
    aliases: tuple[str, ...] = ()  # other spellings framework= accepts: "nemo_rl"
    image: str  # the default container image, a file in the framework's directory
    workloads: tuple[str, ...]  # the workloads it runs
    default_for: tuple[str, ...] = ()  # those of them that run on it when no framework is named
    launcher: str  # the file in the working directory that launches: run.py, launch.sh
    script_label: str  # what the recipe's script is called in messages
    subdir: str  # the framework's directory under the recipes checkout
    recipe_field: Literal["script", "job_script"]  # the catalog field naming its script
    recipe_globs: tuple[str, ...]  # where its scripts are, relative to subdir
    interactive: bool = False  # whether it has interactive allocations
    listed: int = 100  # where help and messages list it among the frameworks (lowest first)
    passes_comment: bool = False  # whether argv gives sbatch the comment (else set after)
    help_argv: tuple[str, ...] = ()  # how pre-flight reads the launcher's --help (() = never)
    launcher_flags: tuple[str, ...] = ()  # flags argv may send that a site's launcher may lack
    # from=: whether a job saves and prunes where it starts (NeMo-RL's checkpoint_dir), so a
    # child starts from a copy of the parent's checkpoint in a directory of its own
    starts_in_copy: bool = False

    def work_dir(self, profile: ClusterProfile) -> str:
        return join_remote(profile.recipes_dir, self.subdir)

    def default_image(self, recipes_dir: str) -> str:
        """Where the default image is in a recipes checkout (a profile's ``images[name]``)."""
        return join_remote(recipes_dir, self.subdir, self.image)

    def default_recipes(self) -> tuple[RecipeFields, ...]:
        """This framework's entries in the built-in recipe catalog."""
        return ()

    def job_base(self, spec: LaunchSpec) -> str:
        """The job name's first part when the launch has no ``name=`` ("": the script's stem)."""
        return ""

    @abstractmethod
    def argv(self, spec: LaunchSpec) -> list[RemoteArg]:
        """The launcher's command line, as a person types it in :meth:`work_dir`."""

    def script_env(self, spec: LaunchSpec) -> dict[str, str]:
        """Plain (non-secret) variables the launch script exports before the launcher."""
        return {}

    @abstractmethod
    def tracking(self, spec: LaunchSpec, output: str) -> Tracking:
        """Parse the launcher's output (ValueError when it holds no job id)."""

    @abstractmethod
    def found(self, spec: LaunchSpec, job_id: str) -> Tracking:
        """The record for a job found again by its launch id (the launcher's output is lost)."""

    def preflight_files(self, spec: LaunchSpec) -> dict[str, str]:
        """Files that must exist before a submission: label -> login-node path."""
        files = {"launcher": join_remote(spec.work_dir, self.launcher)}
        if not is_registry_ref(spec.image_path):  # pyxis imports a registry image at start
            files = {"image": spec.image_path, **files}
        if spec.script:
            files["recipe"] = join_remote(spec.work_dir, spec.script)
        return files

    def preflight_writable(self, spec: LaunchSpec) -> dict[str, str]:
        """Directories the job writes: label -> login-node path."""
        return {"cache_dir": spec.profile.cache_dir, "work_dir": spec.work_dir}

    def preflight_mounts(self, spec: LaunchSpec) -> dict[str, Mount]:
        """Directories the job's container mounts, which must exist before it starts (pyxis
        fails the container when a mount source is missing; nothing creates it)."""
        return {}

    def auth_file(self, spec: LaunchSpec) -> str | None:
        """A file the job sources that may set the secrets the launch exports (None: none)."""
        return None

    def launcher_problems(self, spec: LaunchSpec) -> list[str]:
        """Why the site's launcher (``spec.launcher``, from its ``--help``) cannot run this
        launch; empty when it can, or when its options are not known."""
        return []

    def launcher_notes(self, spec: LaunchSpec) -> list[str]:
        """What the site's launcher lacks and how the launch does without it (for the thread)."""
        return []

    def slurm_updates(self, spec: LaunchSpec) -> dict[str, str]:
        """Job fields to set with ``scontrol update`` right after the submit, for what the
        site's launcher cannot pass to sbatch: ``{"ExcNodeList": "dev1"}``."""
        return {}

    @abstractmethod
    def parse_progress(self, text: str, carry: Point | None) -> Progress:
        """Progress in new log text; ``carry`` is the last point seen before it."""

    def checkpoint_dir(self, text: str, tracking: Tracking) -> str | None:
        """Where the run says it saves checkpoints, when new log ``text`` says so and that
        differs from ``tracking.checkpoint_dir`` (None: nothing new)."""
        return None

    def tensorboard_printed(self, text: str) -> list[str]:
        """The TensorBoard directories new log ``text`` names, as printed, in order, once
        each (:func:`cluster.watching.progress.tensorboard_dirs`: NeMo's and NeMo-RL's lines)."""
        return tensorboard_dirs(text)

    def tensorboard_dir(self, printed: str, tracking: Tracking, job_dir: str) -> str:
        """The run's TensorBoard directory on the login node, from one that
        :meth:`tensorboard_printed` found; ``job_dir`` is the absolute directory the
        collector found the job's log in."""
        return printed

    def attach_command(self, tracking: Tracking) -> str | None:
        """What a person runs on the login node to attach (None: not interactive)."""
        return None

    def start_key(self, parent_framework: str, same_workload: bool) -> str:
        """The recipe key that starts a run from another launch's checkpoint (``from=``),
        given the parent's framework and whether it ran the same workload; ValueError
        saying why when this framework cannot."""
        raise ValueError(f"{self.name} has no way to start from another launch's checkpoint")

    def start_copy(
        self, parent: Tracking, checkpoint: str, profile: ClusterProfile, launch_id: str
    ) -> tuple[str, str, str]:
        """``from=`` where the framework :attr:`starts_in_copy`: (the parent's checkpoint to
        copy, where the copy goes, the value for :meth:`start_key`), all in ``profile``'s
        terms: the child's own directory under the framework's, named for ``launch_id``."""
        work = self.work_dir(profile)
        found = parent.checkpoint_dir
        base = found if found.startswith(("/", "~")) else join_remote(work, found)
        own = join_remote(f"from-{launch_id}", "checkpoints")
        return join_remote(base, checkpoint), join_remote(work, own, checkpoint), own

    def start_value(self, parent: Tracking, checkpoint: str, profile: ClusterProfile) -> str:
        """The value for :meth:`start_key`: the parent's ``checkpoint`` (a name in its
        ``parent.checkpoint_dir``) as this framework's job reads it."""
        return join_remote(parent.checkpoint_dir, checkpoint)

    #: then=export: the name of the framework's own converter to Hugging Face format, as
    #: messages call it ("": this framework has none trainbot runs yet)
    export_tool: str = ""

    def export_argv(
        self, spec: LaunchSpec, model: str, checkpoint: str, hf_dir: str
    ) -> list[RemoteArg]:
        """then=export: the command (run in the launch's container, in :meth:`work_dir`)
        that converts ``checkpoint`` (a directory) of ``model`` (the bot's model name) to
        Hugging Face format in ``hf_dir``."""
        raise NotImplementedError(f"{self.label} has no export trainbot runs")

    def retry_overrides(
        self, overrides: tuple[tuple[str, str], ...], previous: Tracking, profile: ClusterProfile
    ) -> tuple[tuple[str, str], ...]:
        """A resuming retry's recipe overrides, so it continues from ``previous``'s checkpoints."""
        return overrides


def framework(name: str) -> Framework:
    """The registered framework called ``name`` (ValueError naming the known ones)."""
    fw = registered(name)
    if not isinstance(fw, Framework):
        raise TypeError(f"framework {name!r} is registered but is no Framework")
    return fw


def interactive_framework() -> Framework:
    """The framework ``/train interactive`` allocates on: the first that has interactive jobs."""
    return framework(next(fw.name for fw in frameworks().values() if fw.interactive))


@dataclass(frozen=True)
class LaunchSpec:
    """One launch on one cluster. ``script`` is relative to the framework's directory
    (:attr:`work_dir`); None for interactive jobs."""

    profile: ClusterProfile
    launch_id: str
    framework: FrameworkName
    nodes: int
    script: str | None = None
    partition: str | None = None
    time_limit: str | None = None
    name: str | None = None
    image: str | None = None
    args: tuple[str, ...] = ()
    overrides: tuple[tuple[str, str], ...] = ()
    interactive: bool = False
    exclude: str | None = None  # Slurm node list to keep away from (a failed node)
    comment: str | None = None  # Slurm's --comment, where the launcher takes one
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, SecretStr] = field(default_factory=dict, repr=False)
    # What the site's launcher accepts (its --help), when known: argv leaves out what it lacks.
    launcher: LauncherOptions | None = None
    submit_by: int = 0  # epoch seconds: the launcher neither starts nor runs past it (0: no bound)
    # from=: (recipe key, another launch's checkpoint as the job reads it), after the overrides
    start_from: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        framework(self.framework)  # ValueError naming the known frameworks
        _check(LAUNCH_ID_RE, self.launch_id, "launch id")
        if not 1 <= self.nodes <= 4096:
            raise ValueError(f"invalid node count: {self.nodes}")
        if self.name is not None:
            _check(NAME_RE, self.name, "name (letters, digits, _ and -)")
        if self.partition is not None:
            _check(SLURM_NAME_PATTERN, self.partition, "partition")
        if self.time_limit is not None:
            slurm_time_seconds(self.time_limit)
        if self.script is not None and (
            not SCRIPT_RE.fullmatch(self.script) or ".." in self.script.split("/")
        ):
            raise ValueError(f"invalid script path: {self.script!r}")
        if self.interactive and not self.fw.interactive:
            raise ValueError(f"{self.framework} has no interactive jobs")
        if self.script is None and not self.interactive:
            raise ValueError("a script is needed (only interactive jobs go without)")
        if self.exclude is not None:
            _check(NODELIST_RE, self.exclude, "node list")
        if self.comment is not None:
            _check(COMMENT_RE, self.comment, "comment")
        for arg in self.args:
            _check(ARG_RE, arg, "recipe argument")
        for key, value in self.overrides:
            _check(OVERRIDE_KEY_PATTERN, key, "override key")
            _check(OVERRIDE_VALUE_PATTERN, value, f"value for {key}")
        check_image_ref(self.image_path)
        _check_start(self.start_from)

    @classmethod
    def from_recipe(
        cls,
        profile: ClusterProfile,
        recipe: RecipeEntry,
        *,
        launch_id: str,
        nodes: int,
        partition: str | None = None,
        time_limit: str | None = None,
        name: str | None = None,
        image: str | None = None,
        overrides: tuple[tuple[str, str], ...] = (),
        env: Mapping[str, str] | None = None,
        secrets: Mapping[str, SecretStr] | None = None,
        comment: str | None = None,
    ) -> LaunchSpec:
        """A spec for a catalog recipe: its framework, script or job script, and fixed args."""
        return cls(
            profile=profile,
            launch_id=launch_id,
            framework=recipe.framework,
            nodes=nodes,
            script=recipe.script_file,
            partition=partition,
            time_limit=time_limit,
            name=name,
            image=image,
            args=recipe.args,
            overrides=overrides,
            env=dict(env or {}),
            secrets=dict(secrets or {}),
            comment=comment,
        )

    @property
    def fw(self) -> Framework:
        return framework(self.framework)

    @property
    def shape(self) -> JobShape:
        """What the job asks Slurm for (the options of its submit, and of its estimate)."""
        return self.profile.job_shape(
            self.nodes, partition=self.partition, time_limit=self.time_limit, exclude=self.exclude
        )

    @property
    def cluster(self) -> str:
        return self.profile.name

    @property
    def slurm_partition(self) -> str:
        return self.partition or self.profile.partition

    @property
    def slurm_time(self) -> str | None:
        return self.time_limit or self.profile.time_limit

    @property
    def image_path(self) -> str:
        """The image as the launcher passes it to pyxis: a login-node path, or a registry
        reference in pyxis's ``registry#path:tag`` form (enroot would read
        ``nvcr.io/nvidia/nemo`` as a Docker Hub path)."""
        image = self.profile.resolve_image(self.image, self.framework)
        return pyxis_image(image) if is_registry_ref(image) else image

    @property
    def work_dir(self) -> str:
        """Where the launcher runs: the framework's directory in the recipes checkout."""
        return self.fw.work_dir(self.profile)

    @property
    def job_name(self) -> str:
        """``<name>-<launch id>``: the experiment name (NeMo) or ``-J`` (NeMo-RL)."""
        if self.name:
            base = self.name
        elif self.interactive:
            base = "interactive"
        else:
            base = self.fw.job_base(self) or PurePosixPath(self.script or "job").stem
        return f"{base}-{self.launch_id}"

    def secret_files(self) -> dict[str, str]:
        return {k: v.file for k, v in self.profile.job_secrets.items() if v.file is not None}


def _check_start(start_from: tuple[str, str] | None) -> None:
    if start_from is None:
        return
    key, path = start_from
    _check(OVERRIDE_KEY_PATTERN, key, "start key")
    _check(START_PATH_RE, path, "checkpoint path")
    if ".." in path.split("/"):
        raise ValueError(f"invalid checkpoint path: {path!r}")
