"""What every framework object provides, and the tracking record a submission returns.

A :class:`Framework` owns everything that differs between NeMo and NeMo-RL: the
launcher's argv and working directory, parsing what the launcher printed, where
the job's files are (logs, sbatch log, checkpoints, ``attach.sh``), how progress
reads, the pre-flight files, and the files that are evidence when the job fails.

A submission returns a :class:`Tracking`: a plain record that the bot stores
without looking inside and moves forward after each poll
(:meth:`cluster.collector.JobSnapshot.advance`). The collector's remote half reads
it as data (directories, file name patterns, checkpoint rules), so it needs no
framework code of its own.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from cluster.profiles import ClusterProfile, join_remote
from cluster.progress import Point, Progress
from cluster.remote import RemoteArg

if TYPE_CHECKING:
    from cluster.launch import LaunchSpec

FrameworkName = Literal["nemo", "nemo-rl"]
JOB_ID_RE = re.compile(r"[0-9]+(_[0-9]+)?")


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
    restart_pattern: str = ""  # regex: group 1 is the restart count in a log's name
    checkpoint_dir: str = ""
    checkpoint_pattern: str = ""  # regex a complete checkpoint's name fully matches; group 1: step
    unfinished_suffix: str = ""  # a sibling ``<name><suffix>`` means the save is in progress
    attach_path: str = ""  # interactive: the file that appears when the job can be attached
    evidence: tuple[str, ...] = ()  # glob patterns of every file the job leaves
    log_path: str = ""  # the main log found so far
    log_offset: int = 0

    def payload(self) -> dict[str, object]:
        """What the remote half reads (JSON)."""
        return self.model_dump(mode="json")


class Framework(ABC):
    """One training framework's job model. Subclasses are stateless singletons."""

    name: FrameworkName
    launcher: str  # the file in the working directory that launches: run.py, launch.sh
    script_label: str  # what the recipe's script is called in messages
    subdir: str  # the framework's directory under the recipes checkout
    recipe_field: Literal["script", "job_script"]  # the catalog field naming its script
    recipe_globs: tuple[str, ...]  # where its scripts are, relative to subdir
    interactive: bool = False  # whether it has interactive allocations
    passes_comment: bool = False  # whether argv gives sbatch the comment (else set after)

    def work_dir(self, profile: ClusterProfile) -> str:
        return join_remote(profile.recipes_dir, self.subdir)

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

    @abstractmethod
    def parse_progress(self, text: str, carry: Point | None) -> Progress:
        """Progress in new log text; ``carry`` is the last point seen before it."""

    def tensorboard_dir(self, printed: str, tracking: Tracking, job_dir: str) -> str:
        """The run's TensorBoard directory on the login node, from the one its log names
        (:func:`cluster.progress.tensorboard_dirs`); ``job_dir`` is the absolute directory
        the collector found the job's log in."""
        return printed

    def attach_command(self, tracking: Tracking) -> str | None:
        """What a person runs on the login node to attach (None: not interactive)."""
        return None

    def retry_overrides(
        self, overrides: tuple[tuple[str, str], ...], previous: Tracking, profile: ClusterProfile
    ) -> tuple[tuple[str, str], ...]:
        """A resuming retry's recipe overrides, so it continues from ``previous``'s checkpoints."""
        return overrides


def check_job_id(job_id: str) -> str:
    if not JOB_ID_RE.fullmatch(job_id):
        raise ValueError(f"not a Slurm job id: {job_id!r}")
    return job_id
