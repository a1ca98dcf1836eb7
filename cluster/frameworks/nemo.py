"""NeMo (pretraining, CPT, SFT): ``run.py`` on nemo-run, its status block, its files.

``run.py`` (run in ``<recipes_dir>/nemo`` from a login shell, ``NEMORUN_HOME``
set) submits through nemo-run and prints a status block with the Slurm job id
and the task's Local Directory. There nemo-run writes the task's log,
``log-<jobname>_<jobid>_<restart>.out`` (one per Slurm restart; the guide's
scheme is ``<jobid>.log``), and sbatch's own output ``sbatch_<jobname>_<jobid>.out``.
The Slurm job name is ``<account>-<account>.<experiment name>``. Checkpoints go
to ``<log_dir>/<experiment name>/checkpoints/``, a save in progress marked by a
sibling ending in ``-unfinished``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cluster.launching.parts import FLOAT_PATTERN, STEPS_PATTERN, Mount
from cluster.launching.spec import Framework
from cluster.site.framework_registry import RecipeFields, register
from cluster.slurm.sbatch import JobShape, limit_options
from cluster.ssh.remote import RemoteArg, RPath, RSetting, join_remote
from cluster.watching.progress import Point, Progress, experiment_dirs, parse_nemo
from cluster.watching.tracking import Tracking, check_job_id

if TYPE_CHECKING:
    from cluster.launching.spec import LaunchSpec

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: The built-in recipes: ``<workload>/<model>_<suffix>.py`` for each model.
MODELS = ("llama3p1_2b", "llama3p1_8b", "llama3p1_70b")
SCRIPT_SUFFIX = {"pretrain": "pt", "cpt": "cpt", "sft": "sft"}
OVERRIDES = {
    "trainer.max_steps": STEPS_PATTERN,
    "trainer.val_check_interval": STEPS_PATTERN,
    "data.global_batch_size": "[0-9]{1,5}",
    "data.micro_batch_size": "[0-9]{1,3}",
    "optim.config.lr": FLOAT_PATTERN,
}
#: The flags of the guide's launch line: a run.py without one of them cannot launch.
REQUIRED_FLAGS = ("-e", "--slurm-type", "--partition", "-d", "-i", "-s", "-n", "--experiment-name")
#: The directories run.py mounts into the container: flag, profile setting.
MOUNT_FLAGS = (("--log-dir", "log_dir"), ("--cache-dir", "cache_dir"), ("--data-dir", "data_dir"))
#: Flags the guide never names, each left out when the site's run.py lacks it.
OPTIONAL_FLAGS = (*(flag for flag, _ in MOUNT_FLAGS), "-t", "--account", "--exclude")
#: sbatch reads these when run.py cannot pass the option: "environment variables will override
#: any options set in a batch script" (SchedMD/slurm doc/man/man1/sbatch.1, INPUT ENVIRONMENT
#: VARIABLES, at 000729e63fd93465140c5b78274bfae7a3742dcf), so they beat the #SBATCH lines
#: nemo-run writes. sbatch has no such variable for --exclude: that one is set after the submit.
SBATCH_ENV = {"-t": "SBATCH_TIMELIMIT", "--account": "SBATCH_ACCOUNT"}
#: then=export: NeMo 2's own exporter, the ``nemo`` CLI of the NeMo container (nemo-run's CLI
#: with NeMo's ``llm`` entrypoints): ``llm.export_ckpt(path, target="hf", output_path)``, which
#: reads the checkpoint's ``context/`` and prints ``✓ Checkpoint exported to <dir>`` (through
#: rich, folded at the console's width in a log file). NVIDIA/NeMo
#: 00138e21c9e332d045509c4b9edf9b0a6a8b81be, nemo/collections/llm/api.py.
EXPORT_COMMAND = ("nemo", "llm", "export", "-y")


def nemo_run_argv(
    shape: JobShape,
    *,
    cluster_type: str | None,
    work_dir: str,
    image: str,
    script: str,
    experiment_name: str,
    log_dir: str | None = None,
    cache_dir: str | None = None,
    data_dir: str | None = None,
    overrides: tuple[tuple[str, str], ...] = (),
) -> list[RemoteArg]:
    """``python3 run.py -e slurm ...``; recipe overrides follow ``--``. The shape's limits
    go under sbatch's own flags (:func:`cluster.slurm.sbatch.limit_options`), which run.py hands
    to sbatch; give a shape without those the site's run.py lacks."""
    argv: list[RemoteArg] = ["python3", "run.py", "-e", "slurm"]
    if cluster_type:
        argv += ["--slurm-type", cluster_type]
    argv += ["--partition", shape.partition]
    argv += ["-d", RPath(work_dir), "-i", RPath(image), "-s", script, "-n", str(shape.nodes)]
    argv += ["--experiment-name", experiment_name]
    for flag, path in (
        ("--log-dir", log_dir),
        ("--cache-dir", cache_dir),
        ("--data-dir", data_dir),
    ):
        if path:
            argv += [flag, RPath(path)]
    argv += limit_options(shape)
    if overrides:
        argv += ["--", *(f"{key}={value}" for key, value in overrides)]
    return argv


@dataclass(frozen=True)
class NemoStatus:
    """What nemo-run's "Experiment Status" block says about the first task."""

    experiment_id: str
    task: str
    status: str
    job_id: str
    local_dir: str


def parse_status_block(text: str) -> NemoStatus:
    """Parse run.py's output; ValueError when no job id is in it."""
    clean = _ANSI_RE.sub("", text)
    fields: dict[str, str] = {}
    for line in clean.splitlines():
        line = line.strip()
        if match := re.match(r"Experiment Status for (\S+)", line):
            fields["experiment_id"] = match.group(1)
        elif match := re.match(r"Task [0-9]+: (\S+)", line):
            fields.setdefault("task", match.group(1))
        elif match := re.match(r"- (Status|Job id|Local Directory): (.+)", line):
            key = {"Status": "status", "Job id": "job_id", "Local Directory": "local_dir"}
            fields.setdefault(key[match.group(1)], match.group(2).strip())
    job_id = fields.get("job_id", "")
    if not re.fullmatch(r"[0-9]+(_[0-9]+)?", job_id):
        raise ValueError(f"no Slurm job id in nemo-run's output: {clean.strip()[-300:]!r}")
    return NemoStatus(
        experiment_id=fields.get("experiment_id", ""),
        task=fields.get("task", ""),
        status=fields.get("status", ""),
        job_id=job_id,
        local_dir=fields.get("local_dir", ""),
    )


class NeMo(Framework):
    name = "nemo"
    listed = 10
    label = "NeMo"
    image = "nemo-20250721.sqsh"
    workloads = ("pretrain", "cpt", "sft")
    default_for = ("pretrain", "cpt", "sft")
    launcher = "run.py"
    script_label = "recipe"
    subdir = "nemo"
    recipe_field = "script"
    recipe_globs = ("pretrain/*.py", "cpt/*.py", "sft/*.py")

    export_tool = "NeMo's nemo llm export"

    def export_argv(
        self, spec: LaunchSpec, model: str, checkpoint: str, hf_dir: str
    ) -> list[RemoteArg]:
        """``nemo llm export -y path=<checkpoint> target=hf output_path=<dir>`` (nemo-run's
        CLI parser takes the ``=`` in NeMo's checkpoint names as part of the value)."""
        return [
            *EXPORT_COMMAND,
            RSetting(f"path={checkpoint}"),
            "target=hf",
            RSetting(f"output_path={hf_dir}"),
        ]

    def default_recipes(self) -> tuple[RecipeFields, ...]:
        return tuple(
            {
                "workload": workload,
                "model": model,
                "script": f"{workload}/{model}_{SCRIPT_SUFFIX[workload]}.py",
                "overrides": OVERRIDES,
            }
            for workload in self.workloads
            for model in MODELS
        )

    help_argv = ("python3", "run.py", "--help")
    launcher_flags = OPTIONAL_FLAGS

    def argv(self, spec: LaunchSpec) -> list[RemoteArg]:
        profile = spec.profile
        has = _has(spec)
        shape = spec.shape
        argv = nemo_run_argv(
            replace(
                shape,
                time_limit=shape.time_limit if has("-t") else None,
                account=shape.account if has("--account") else None,
                exclude=shape.exclude if has("--exclude") else None,
            ),
            cluster_type=profile.launcher_type,
            work_dir=spec.work_dir,
            image=spec.image_path,
            script=spec.script or "",
            experiment_name=spec.job_name,
            log_dir=profile.log_dir if has("--log-dir") else None,
            cache_dir=profile.cache_dir if has("--cache-dir") else None,
            data_dir=profile.data_dir if has("--data-dir") else None,
            overrides=spec.overrides if spec.launcher is None or spec.launcher.positionals else (),
        )
        if spec.start_from and (spec.launcher is None or spec.launcher.positionals):
            if "--" not in argv:
                argv.append("--")
            argv.append(RSetting("=".join(spec.start_from)))
        return argv

    def script_env(self, spec: LaunchSpec) -> dict[str, RemoteArg]:
        # PYTHONUNBUFFERED: rank output reaches the log as it is printed, not in 8 KiB blocks
        # (nemo-run's sbatch script runs srun, which passes the environment on to the ranks).
        env: dict[str, RemoteArg] = {
            "NEMORUN_HOME": RPath(spec.profile.nemorun_home),
            "PYTHONUNBUFFERED": "1",
        }
        has = _has(spec)
        shape = spec.shape
        for flag, value in (("-t", shape.time_limit), ("--account", shape.account)):
            if value and not has(flag):
                env[SBATCH_ENV[flag]] = value
        return env

    def preflight_mounts(self, spec: LaunchSpec) -> dict[str, Mount]:
        has = _has(spec)
        mounts = {}
        for flag, setting in MOUNT_FLAGS:
            path = getattr(spec.profile, setting)
            if path and has(flag):
                mounts[f"mount {setting}"] = Mount(
                    path, f"run.py's {flag}", f"{setting} in {spec.cluster}'s cluster config"
                )
        return mounts

    def launcher_problems(self, spec: LaunchSpec) -> list[str]:
        options = spec.launcher
        if options is None:
            return []
        problems = []
        if missing := [f for f in REQUIRED_FLAGS if f not in options.flags]:
            problems.append(
                f"run.py in {spec.work_dir} on {spec.cluster} has no {', '.join(missing)} "
                "(from its --help), which every launch needs: is it the guide's launcher?"
            )
        if (spec.overrides or spec.start_from) and not options.positionals:
            start = ["=".join(spec.start_from)] if spec.start_from else []
            given = " ".join([*(f"{k}={v}" for k, v in spec.overrides), *start])
            problems.append(
                f"run.py on {spec.cluster} takes no recipe overrides (its --help lists no "
                f"positional arguments), so {given} cannot be applied. Launch without them, "
                "or give run.py an overrides argument"
            )
        return problems

    def launcher_notes(self, spec: LaunchSpec) -> list[str]:
        if spec.launcher is None:
            return []
        has, notes = _has(spec), []
        where = f"run.py on {spec.cluster} has no"
        for flag, setting in MOUNT_FLAGS:
            path = getattr(spec.profile, setting)
            if path and not has(flag):
                notes.append(f"{where} {flag}: the job runs without {path} mounted")
        if spec.slurm_time and not has("-t"):
            notes.append(
                f"{where} -t: the time limit {spec.slurm_time} goes to sbatch as "
                "SBATCH_TIMELIMIT instead"
            )
        if spec.profile.account and not has("--account"):
            notes.append(
                f"{where} --account: the account {spec.profile.account} goes to sbatch as "
                "SBATCH_ACCOUNT instead"
            )
        if spec.exclude and not has("--exclude"):
            notes.append(
                f"{where} --exclude: trainbot asks Slurm to keep the job off {spec.exclude} "
                "right after the submit (scontrol update), which holds only if the job is "
                "still queued by then"
            )
        return notes

    def slurm_updates(self, spec: LaunchSpec) -> dict[str, str]:
        if spec.exclude and not _has(spec)("--exclude"):
            return {"ExcNodeList": spec.exclude}
        return {}

    def tracking(self, spec: LaunchSpec, output: str) -> Tracking:
        status = parse_status_block(output)
        return self._tracking(spec, status.job_id, status.local_dir)

    def found(self, spec: LaunchSpec, job_id: str) -> Tracking:
        # $NEMORUN_HOME/experiments/<title>/<title>_<unix time>/<task>: the time is unknown.
        name = spec.job_name
        experiments = join_remote(spec.profile.nemorun_home, "experiments", name)
        return self._tracking(spec, job_id, join_remote(experiments, "*", name))

    def _tracking(self, spec: LaunchSpec, job_id: str, local_dir: str) -> Tracking:
        check_job_id(job_id)
        return Tracking(
            framework=self.name,
            job_id=job_id,
            log_dir=local_dir,
            log_names=(f"log-*_{job_id}_*.out", f"{job_id}.log"),
            restart_pattern=rf"_{re.escape(job_id)}_([0-9]+)\.out$",
            # Until the run logs where (checkpoint_dir): the recipe logs to <log dir>/<name>
            # with NeMo's logger name, "default".
            checkpoint_dir=join_remote(
                spec.profile.log_dir, spec.job_name, "default", "checkpoints"
            ),
            checkpoint_pattern=r"-step=([0-9]+)(?:-|$)",
            unfinished_suffix="-unfinished",
            evidence=("*.out", "*.err", "*.log"),
        )

    def preflight_writable(self, spec: LaunchSpec) -> dict[str, str]:
        profile = spec.profile
        return {
            **super().preflight_writable(spec),
            "log_dir": profile.log_dir,
            "nemorun_home": profile.nemorun_home,
        }

    def parse_progress(self, text: str, carry: Point | None) -> Progress:
        return parse_nemo(text, carry)

    def checkpoint_dir(self, text: str, tracking: Tracking) -> str | None:
        # NeMo's ModelCheckpoint saves to <the experiment dir it logs>/checkpoints, where that
        # dir is <log dir>/<logger name>[/<version>] and upstream recipes name the logger
        # "default" (NVIDIA/NeMo 8cfedd7203462cb251a914e700e5605444277561,
        # nemo/lightning/nemo_logger.py, nemo/collections/llm/recipes/log/default.py).
        found = experiment_dirs(text)
        if not found:
            return None
        where = join_remote(found[-1], "checkpoints")
        return where if where != tracking.checkpoint_dir else None

    def start_key(self, parent_framework: str, same_workload: bool) -> str:
        if parent_framework != self.name:
            raise ValueError(
                f"a NeMo 2 recipe loads only NeMo 2 checkpoints, and that launch ran on "
                f"{parent_framework}"
            )
        # NeMo 2's AutoResume (nemo/lightning/resume.py): resume_from_path restores the
        # whole training state (a longer run of the same recipe); restore_config.path
        # loads the weights only (SFT or CPT from a pretraining run).
        return "resume.resume_from_path" if same_workload else "resume.restore_config.path"

    def tensorboard_dir(self, printed: str, tracking: Tracking, job_dir: str) -> str:
        # The log names the logger's save_dir, shared by every experiment logged there; this
        # run's event files are under <save_dir>/<experiment name>/ (the task's directory
        # is named after the experiment, as is the Slurm job).
        name = posixpath.basename(tracking.log_dir.rstrip("/"))
        return join_remote(printed, name) if name and name != "*" else printed


def _has(spec: LaunchSpec) -> Callable[[str], bool]:
    """Whether the site's run.py has a flag (every flag, while its options are not known)."""
    options = spec.launcher
    return lambda flag: options is None or flag in options.flags


NEMO = register(NeMo())
