"""What every framework object provides, the registry of them, and the tracking record
a submission returns.

A :class:`Framework` owns everything that differs between NeMo and NeMo-RL: the
launcher's argv and working directory, parsing what the launcher printed, where
the job's files are (logs, sbatch log, checkpoints, ``attach.sh``), how progress
reads, the pre-flight files, and the files that are evidence when the job fails.
It also holds the facts the rest of the bot asks of a framework: its name on the
``/train`` line (and other spellings of it), its label in help text, its default
image, the workloads it runs (and which of them run on it when nobody names a
framework), and its entries in the built-in recipe catalog.

Each framework module ends with ``register(TheFramework())``. Everything that
lists frameworks or workloads reads :data:`FRAMEWORKS`: ``framework=`` on the
command line, the :data:`FrameworkName` and :data:`Workload` checks of stored
requests and records, the built-in catalog, and each cluster profile's default
images.

A submission returns a :class:`Tracking`: a plain record that the bot stores
without looking inside and moves forward after each poll
(:meth:`cluster.collector.JobSnapshot.advance`). The collector's remote half reads
it as data (directories, file name patterns, checkpoint rules), so it needs no
framework code of its own.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal, Required, TypedDict, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict

from cluster.progress import Point, Progress
from cluster.remote import RemoteArg, join_remote

if TYPE_CHECKING:
    from cluster.launch import LaunchSpec
    from cluster.profiles import ClusterProfile

JOB_ID_RE = re.compile(r"[0-9]+(_[0-9]+)?")
NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
#: Override value patterns the built-in recipes share.
STEPS_PATTERN = "[0-9]{1,7}"
FLOAT_PATTERN = r"[0-9]+(\.[0-9]+)?([eE]-?[0-9]{1,3})?"

#: Every framework by name, in the order their modules register them (file name order).
FRAMEWORKS: dict[str, Framework] = {}


def check_framework_name(value: str) -> str:
    if value not in FRAMEWORKS:
        raise ValueError(f"unknown framework {value!r}; known: {', '.join(FRAMEWORKS)}")
    return value


def workloads() -> tuple[str, ...]:
    """Every workload some framework runs, in registration order."""
    return tuple(dict.fromkeys(w for fw in FRAMEWORKS.values() for w in fw.workloads))


def check_workload(value: str) -> str:
    known = workloads()
    if value not in known:
        raise ValueError(f"unknown workload {value!r}; known: {', '.join(known)}")
    return value


#: A registered framework's name (checked when a request or record is built or read back).
FrameworkName = Annotated[str, AfterValidator(check_framework_name)]
#: A workload some registered framework runs.
Workload = Annotated[str, AfterValidator(check_workload)]


def framework(name: str) -> Framework:
    """The registered framework called ``name`` (ValueError naming the known ones)."""
    return FRAMEWORKS[check_framework_name(name)]


def default_framework(workload: str) -> str | None:
    """The framework a workload runs on when the user names none."""
    return next((fw.name for fw in FRAMEWORKS.values() if workload in fw.default_for), None)


def interactive_framework() -> Framework:
    """The framework ``/train interactive`` allocates on: the first that has interactive jobs."""
    return next(fw for fw in FRAMEWORKS.values() if fw.interactive)


class RecipeFields(TypedDict, total=False):
    """One built-in recipe of a framework: the fields of ``cluster.recipes.RecipeEntry``
    but ``framework``."""

    workload: Required[str]
    model: Required[str]
    script: str
    job_script: str
    args: tuple[str, ...]
    overrides: dict[str, str]
    default_nodes: int
    description: str


class Tracking(BaseModel):
    """Where one Slurm job's files are, and how far the bot has read them.

    ``log_dir`` may hold one ``*`` (a job found again after a restart, before its
    directory is known); the collector picks the directory that holds the job's log
    and :meth:`~cluster.collector.JobSnapshot.advance` pins it.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    framework: FrameworkName
    job_id: str
    interactive: bool = False
    log_dir: str = ""  # where the main log is
    log_names: tuple[str, ...] = ()  # fnmatch patterns in that directory, best first
    # Where the main log may be in any layout a site may have (absolute glob patterns, best
    # first); when set, they are searched instead of log_dir and log_names, and the
    # directory of the log found is the job's directory for evidence.
    log_globs: tuple[str, ...] = ()
    restart_pattern: str = ""  # regex: group 1 is the restart count in a log's name (or path)
    checkpoint_dir: str = ""
    checkpoint_pattern: str = ""  # regex a complete checkpoint's name fully matches; group 1: step
    unfinished_suffix: str = ""  # a sibling ``<name><suffix>`` means the save is in progress
    attach_path: str = ""  # interactive: the file that appears when the job can be attached
    attach_alternatives: tuple[str, ...] = ()  # where else a site's launcher may write it
    evidence: tuple[str, ...] = ()  # glob patterns of every file the job leaves
    log_path: str = ""  # the main log found so far
    log_offset: int = 0

    def payload(self) -> dict[str, object]:
        """What the remote half reads (JSON)."""
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class Mount:
    """A directory a launch mounts into its container: where it is and what names it."""

    path: str  # on the login node
    source: str  # what puts it in the launch: "run.py's --data-dir"
    setting: str  # where a person changes it: "data_dir in the cluster's config"


class Framework(ABC):
    """One training framework's job model. Subclasses are stateless singletons, each
    added to :data:`FRAMEWORKS` by :func:`register` in its own module."""

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
    passes_comment: bool = False  # whether argv gives sbatch the comment (else set after)
    help_argv: tuple[str, ...] = ()  # how pre-flight reads the launcher's --help (() = never)
    launcher_flags: tuple[str, ...] = ()  # flags argv may send that a site's launcher may lack

    def work_dir(self, profile: ClusterProfile) -> str:
        return join_remote(profile.recipes_dir, self.subdir)

    def default_image(self, recipes_dir: str) -> str:
        """Where the default image is in a recipes checkout (a profile's ``images[name]``)."""
        return join_remote(recipes_dir, self.subdir, self.image)

    def default_recipes(self) -> tuple[RecipeFields, ...]:
        """This framework's entries in the built-in recipe catalog."""
        return ()

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
        files = {"image": spec.image_path, "launcher": join_remote(spec.work_dir, self.launcher)}
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

    def tensorboard_dir(self, printed: str, tracking: Tracking, job_dir: str) -> str:
        """The run's TensorBoard directory on the login node, from the one its log names
        (:func:`cluster.progress.tensorboard_dirs`); ``job_dir`` is the absolute directory
        the collector found the job's log in."""
        return printed

    def attach_command(self, tracking: Tracking) -> str | None:
        """What a person runs on the login node to attach (None: not interactive)."""
        return None

    def start_key(self, parent_framework: str, same_workload: bool) -> str:
        """The recipe key that starts a run from another launch's checkpoint (``from=``),
        given the parent's framework and whether it ran the same workload; ValueError
        saying why when this framework cannot."""
        raise ValueError(f"{self.name} has no way to start from another launch's checkpoint")

    def start_value(self, parent: Tracking, checkpoint: str, profile: ClusterProfile) -> str:
        """The value for :meth:`start_key`: the parent's ``checkpoint`` (a name in its
        ``parent.checkpoint_dir``) as this framework's job reads it."""
        return join_remote(parent.checkpoint_dir, checkpoint)

    def retry_overrides(
        self, overrides: tuple[tuple[str, str], ...], previous: Tracking, profile: ClusterProfile
    ) -> tuple[tuple[str, str], ...]:
        """A resuming retry's recipe overrides, so it continues from ``previous``'s checkpoints."""
        return overrides


F = TypeVar("F", bound=Framework)


def register(fw: F) -> F:
    """Add a framework to :data:`FRAMEWORKS` (its module calls this once, for its object)."""
    if not NAME_RE.fullmatch(fw.name):
        raise ValueError(f"framework name {fw.name!r}: use lower case letters, digits, - and _")
    taken = {n: other.name for other in FRAMEWORKS.values() for n in (other.name, *other.aliases)}
    for name in (fw.name, *fw.aliases):
        if name in taken:
            raise ValueError(f"framework name {name!r} is taken by {taken[name]}")
    for workload in fw.default_for:
        if workload not in fw.workloads:
            raise ValueError(f"{fw.name} is the default for {workload} but does not run it")
        if (other := default_framework(workload)) is not None:
            raise ValueError(f"{workload} already runs on {other} by default")
    FRAMEWORKS[fw.name] = fw
    return fw


def check_job_id(job_id: str) -> str:
    if not JOB_ID_RE.fullmatch(job_id):
        raise ValueError(f"not a Slurm job id: {job_id!r}")
    return job_id
