"""Image jobs: ``/images import`` and ``/images fetch`` as Slurm batch jobs.

``import`` runs the guide's conversion (``enroot import -o <name>.sqsh docker://...``);
``fetch`` copies the guide's prebuilt image for the cluster's region
(``gcloud storage cp gs://vmds-containers-<region>/vmds_nemo_squashfs/<image> ...``), or
links it where the bucket is mounted (``/gcs/vmds-containers-<region>/...``). Both write
only into the cluster's image directory (``image_dir``, by default
``<recipes_dir>/images``): a partial file first, renamed to ``<name>.sqsh`` when whole.

Registry credentials are the site's, never trainbot's: the job copies the enroot
credentials file of the Unix user it runs as (``$ENROOT_CONFIG_PATH/.credentials``, by
default ``~/.config/enroot/.credentials``, netrc format) into a private directory
(``mktemp -d``, mode 700), points ``ENROOT_CONFIG_PATH`` there for the import, and removes
it when the job ends, however it ends. trainbot never reads, holds or passes them.

Building the job and reading its end are pure (:func:`plan_import`, :func:`plan_fetch`,
:func:`job_script`, :func:`outcome`); the SSH calls are :func:`submit_image_job` and
:func:`image_job_state`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Literal

from cluster.images.listing import PREBUILT, prebuilt_for
from cluster.site.image_refs import enroot_uri, is_registry_ref
from cluster.site.profile_fields import IMAGE_NAME_PATTERN
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import check_job_id
from cluster.slurm.sacct import build_sacct, parse_sacct
from cluster.slurm.sbatch import parse_sbatch_parsable
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import join_remote, quote_path

SUBMIT_TIMEOUT_S = 30.0
STATE_TIMEOUT_S = 20.0
JOB_TIME = "02:00:00"  # a NeMo image is ~20 GB: minutes to import or copy, never hours
LOG_TAIL_BYTES = 4000
JOB_PREFIX = "trainbot-image-"
#: What the job prints when the image is in place (the last line of a good run).
READY_MARK = "trainbot-image: ready "

Kind = Literal["import", "fetch"]


@dataclass(frozen=True)
class ImageJob:
    """One image job on one cluster: what it makes, from what, and where."""

    kind: Kind
    cluster: str
    name: str  # the image's name: image=<name> picks it once it is there
    source: str  # import: enroot's URI (docker://...); fetch: the gs:// URI
    target: str  # <image_dir>/<name>.sqsh on the login node
    mounted: str = ""  # fetch: the prebuilt image where the bucket is mounted (linked if there)
    partition: str = ""

    @property
    def log_path(self) -> str:
        """Where the job's output goes (beside the image, hidden)."""
        folder = self.target.rsplit("/", 1)[0]
        return join_remote(folder, f".{self.name}.%j.log")

    def log_of(self, job_id: str) -> str:
        return self.log_path.replace("%j", check_job_id(job_id))

    @property
    def job_name(self) -> str:
        return f"{JOB_PREFIX}{self.kind}-{self.name}"


def check_image_name(name: str, profile: ClusterProfile) -> str:
    """A name an imported image may take: a plain name (no path, no ``..``), not one the
    cluster's config already gives to another image; ValueError saying what would do."""
    if not re.fullmatch(IMAGE_NAME_PATTERN, name) or ".." in name:
        raise ValueError(
            f"image name {name!r} is not valid: use 1 to 32 lower case letters, digits and "
            ". _ -, starting with a letter or digit (no / and no ..), such as nemo-26.02"
        )
    if name in profile.images:
        raise ValueError(
            f"{name!r} is already an image of {profile.name} in its config "
            f"({profile.images[name]}); choose another name"
        )
    return name


def image_path(profile: ClusterProfile, name: str) -> str:
    """Where the image called ``name`` lies in the cluster's image directory."""
    return join_remote(profile.image_directory, f"{name}.sqsh")


def plan_import(profile: ClusterProfile, reference: str, name: str) -> ImageJob:
    """``/images import <reference> as <name>`` on ``profile``'s cluster."""
    if not is_registry_ref(reference):
        raise ValueError(
            f"{reference!r} is not a registry reference; give one such as "
            "nvcr.io/nvidia/nemo:26.02, nvcr.io#nvidia/nemo:26.02 or docker://..."
        )
    name = check_image_name(name, profile)
    return ImageJob(
        "import", profile.name, name, enroot_uri(reference), image_path(profile, name),
        partition=profile.partition,
    )  # fmt: skip


def plan_fetch(profile: ClusterProfile, framework: str) -> ImageJob:
    """``/images fetch <framework>``: the guide's prebuilt image for the cluster's region,
    named for the image file (``nemo-20250721``)."""
    if framework not in PREBUILT:
        raise ValueError(
            f"the guide has no prebuilt image for {framework!r}; it has one for "
            f"{', '.join(PREBUILT)}"
        )
    if not profile.region:
        raise ValueError(
            f"{profile.name} has no region in its config, so the guide's prebuilt images "
            "(one bucket per region: us, europe, asia) are not known there; set region: in "
            "its config, or use /images import"
        )
    _, uri, mounted = next(p for p in prebuilt_for(profile.region) if p[0] == framework)
    name = PREBUILT[framework].removesuffix(".sqsh")
    return ImageJob(
        "fetch", profile.name, name, uri, image_path(profile, name), mounted=mounted,
        partition=profile.partition,
    )  # fmt: skip


def job_script(job: ImageJob) -> str:
    """The batch script (sent on stdin to ``sbatch``: nothing in it shows in ``ps``)."""
    dest = quote_path(job.target)
    head = [
        "#!/bin/bash",
        "set -euo pipefail",
        f"dest={dest}",
        'part="$dest.partial-${SLURM_JOB_ID:-$$}"',
    ]
    if job.kind == "import":
        body = [
            "umask 077",
            'conf=$(mktemp -d "${TMPDIR:-/tmp}/trainbot-enroot.XXXXXXXX")',
            'trap \'rm -rf "$conf" "$part"\' EXIT',
            'creds="${ENROOT_CONFIG_PATH:-$HOME/.config/enroot}/.credentials"',
            'if [ -r "$creds" ]; then',
            '    cp "$creds" "$conf/.credentials"',
            "    echo \"trainbot-image: the site's enroot credentials file $creds, in a "
            'private directory for this job"',
            "else",
            '    echo "trainbot-image: no enroot credentials file at $creds; importing '
            'anonymously"',
            "fi",
            'export ENROOT_CONFIG_PATH="$conf"',
            f'echo "trainbot-image: enroot import -o $part" {shlex.quote(job.source)}',
            f'enroot import -o "$part" {shlex.quote(job.source)}',
            'chmod 644 "$part"',
        ]
    else:
        mounted = shlex.quote(job.mounted)
        body = [
            "trap 'rm -f \"$part\"' EXIT",
            f"if [ -f {mounted} ]; then",
            f'    ln -sfn {mounted} "$dest"',
            f'    echo "trainbot-image: linked $dest to the mounted bucket" {mounted}',
            f'    echo "{READY_MARK}$dest"',
            "    exit 0",
            "fi",
            f'echo "trainbot-image: gcloud storage cp" {shlex.quote(job.source)}',
            f'gcloud storage cp {shlex.quote(job.source)} "$part"',
        ]
    tail = ['mv -f "$part" "$dest"', f'echo "{READY_MARK}$dest"']
    return "\n".join([*head, *body, *tail]) + "\n"


def submit_command(job: ImageJob) -> str:
    """``sbatch`` for the job: one node, its log beside the image, the script on stdin.
    The image directory is made first (the log's directory must exist)."""
    folder = quote_path(job.target.rsplit("/", 1)[0])
    words = ["sbatch", "--parsable", "-N", "1", "-J", job.job_name, "-t", JOB_TIME]
    if job.partition:
        words += ["-p", job.partition]
    return f"mkdir -p {folder} && cd {folder} && {shlex.join(words)} -o {quote_path(job.log_path)}"


async def submit_image_job(pool: SSHPool, profile: ClusterProfile, job: ImageJob) -> str:
    """Submit ``job`` on ``profile``'s login node (as the Unix user the profile logs in
    as: the person's where identity maps them); its Slurm job id."""
    result = await pool.run(
        profile.login,
        submit_command(job),
        input=job_script(job),
        timeout_s=SUBMIT_TIMEOUT_S,
        cluster=profile.name,
    )
    return parse_sbatch_parsable(result.stdout).job_id


@dataclass(frozen=True)
class JobState:
    """What Slurm and the job's log say of an image job."""

    state: str  # Slurm's word (PENDING, RUNNING, COMPLETED, FAILED, ...); "" before sacct has it
    exit_code: str = ""
    log_tail: str = ""


async def image_job_state(
    pool: SSHPool, profile: ClusterProfile, job: ImageJob, job_id: str
) -> JobState:
    """Slurm's state of the job and the end of its log, in one round trip."""
    log = quote_path(job.log_of(job_id))
    command = (
        f"{build_sacct([job_id], duplicates=False)}; echo '---trainbot-log---'; "
        f"tail -c {LOG_TAIL_BYTES} {log} 2>/dev/null || true"
    )
    result = await pool.run(
        profile.login, command, timeout_s=STATE_TIMEOUT_S, check=False, cluster=profile.name
    )
    acct, _, tail = result.stdout.partition("---trainbot-log---\n")
    rows = [row for row in parse_sacct(acct) if row.job_id == job_id]
    if not rows:
        return JobState("", "", tail)
    return JobState(rows[-1].state, rows[-1].exit_code, tail)


# --- what the end of a job means, in words a person can act on ----------------------------

_HTTP_401 = re.compile(
    r"returned error code: 401[^\n]*|HTTPError 401[^\n]*|ServiceException: 401[^\n]*"
)
_URL_401 = re.compile(r"URL (\S+) returned error code: 401")
_NO_SPACE = re.compile(r"No space left on device|Errno 28")


@dataclass(frozen=True)
class Outcome:
    """How an image job ended: ``ok``, or why not and what to do (``cause``: ``auth``,
    ``disk_full``, ``node``, ``cancelled``, ``failed``). ``site``: the fix is the site's or the
    person's (credentials, disk space), not trainbot's: nobody is paged for it."""

    ok: bool
    cause: str
    text: str
    site: bool = True


def outcome(job: ImageJob, state: str, exit_code: str, log_tail: str) -> Outcome:
    """The end of ``job`` from Slurm's word and its log (pure)."""
    what = "import" if job.kind == "import" else "copy"
    if state == "COMPLETED" and READY_MARK in log_tail:
        return Outcome(True, "ok", f"Image {job.name} is ready: `{job.target}`. "
                       f"Use it with image={job.name}.")  # fmt: skip
    if found := _HTTP_401.search(log_tail):
        if job.kind == "import":
            url = _URL_401.search(log_tail)
            where = f" ({url.group(1)})" if url else ""
            text = (
                f"The registry refused the {what} of `{job.source}`: 401 Unauthorized{where}. "
                "The job used the enroot credentials file of the Unix user it ran as "
                "(`~/.config/enroot/.credentials`, or `$ENROOT_CONFIG_PATH/.credentials`; "
                "netrc lines such as `machine nvcr.io login $oauthtoken password <API key>`). "
                "Add or renew that registry's key there, then run the same /images import "
                "again."
            )
        else:
            text = (
                f"Google Cloud Storage refused the copy of `{job.source}` ({found.group(0)}). "
                "The Unix user the job ran as has no gcloud login that may read that bucket: "
                "run `gcloud auth login` (or set a service account) on the cluster, or ask "
                "its admins for read access, then run the same /images fetch again."
            )
        return Outcome(False, "auth", text)
    if _NO_SPACE.search(log_tail):
        folder = job.target.rsplit("/", 1)[0]
        return Outcome(
            False,
            "disk_full",
            f"The {what} of {job.name} stopped: the disk is full (No space left on device) "
            f"where it writes (`{folder}`, or enroot's temporary directory). A NeMo image "
            "needs about 20-40 GB free. Free space there (old .sqsh files), or ask the "
            "cluster's admins to set a larger image_dir, then run it again.",
        )
    if state in ("NODE_FAIL", "BOOT_FAIL", "PREEMPTED"):
        again = "/images import" if job.kind == "import" else "/images fetch"
        return Outcome(
            False,
            "node",
            f"The node the {what} of {job.name} ran on failed ({state}); nothing is wrong "
            f"with the image. Run the same {again} again.",
        )
    if state == "CANCELLED" or state.startswith("CANCELLED"):
        return Outcome(False, "cancelled", f"The {what} of {job.name} was cancelled.")
    last = [line for line in log_tail.strip().splitlines() if line.strip()][-3:]
    said = "; ".join(last) if last else "its log is empty"
    return Outcome(
        False,
        "failed",
        f"The {what} of {job.name} failed ({state or 'no Slurm state'}, exit {exit_code or '?'}): "
        f"{said}. Log: `{job.target.rsplit('/', 1)[0]}/.{job.name}.<job id>.log`.",
        site=False,
    )


def listed_names() -> tuple[str, ...]:
    """The frameworks ``/images fetch`` has a prebuilt image for."""
    return tuple(PREBUILT)
