"""The tracking record a submission returns and the poller moves forward.

A submission returns a :class:`Tracking`: a plain record that the bot stores
without looking inside and moves forward after each poll
(:meth:`cluster.watching.collector.JobSnapshot.advance`). The collector's remote half reads
it as data (directories, file name patterns, checkpoint rules), so it needs no
framework code of its own. The job model itself is :class:`cluster.launching.spec.Framework`;
the registry of frameworks is :mod:`cluster.site.framework_registry`.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from cluster.site.framework_registry import FrameworkName

JOB_ID_RE = re.compile(r"[0-9]+(_[0-9]+)?")


class Tracking(BaseModel):
    """Where one Slurm job's files are, and how far the bot has read them.

    ``log_dir`` may hold one ``*`` (a job found again after a restart, before its
    directory is known); the collector picks the directory that holds the job's log
    and :meth:`~cluster.watching.collector.JobSnapshot.advance` pins it.
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
    # Megatron: a file in checkpoint_dir holding the newest complete checkpoint's step, written
    # after its directory; a checkpoint past it is a save in progress (none before it exists).
    tracker_file: str = ""
    attach_path: str = ""  # interactive: the file that appears when the job can be attached
    attach_alternatives: tuple[str, ...] = ()  # where else a site's launcher may write it
    evidence: tuple[str, ...] = ()  # glob patterns of every file the job leaves
    log_path: str = ""  # the main log found so far
    log_offset: int = 0

    def payload(self) -> dict[str, object]:
        """What the remote half reads (JSON)."""
        return self.model_dump(mode="json")


def check_job_id(job_id: str) -> str:
    if not JOB_ID_RE.fullmatch(job_id):
        raise ValueError(f"not a Slurm job id: {job_id!r}")
    return job_id
