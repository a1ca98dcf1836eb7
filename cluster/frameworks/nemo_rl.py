"""NeMo-RL (SFT, DPO, GRPO, reward models): ``sbatch ... launch.sh`` in ``<recipes_dir>/nemo_rl``.

The job works in ``<nemo_rl dir>/<job id>/`` (``checkpoints/step_N``, written as
``tmp_step_N`` and renamed when complete). Where its output goes depends on the
site's ``launch.sh``, and is found per job: the seed's writes ``<job id>/nemo_rl_output.log``,
``ray-logs/`` and ``<job id>/attach.sh``; one that wraps NeMo-RL's ``ray.sub``
(NVIDIA-NeMo/RL 7ea279abfbeb698b092856d0dab61e7cf39bc909) writes the driver's output to
``<job id>-logs/ray-driver.log`` (``<job id>-<restart>-logs/`` after a requeue) beside
``ray-head.log`` and ``ray-worker-N.log``, and ``<job id>-attach.sh``. sbatch's own
output is ``slurm-<job id>.out`` in the submit directory. The container image goes to the
job as ``CONTAINER`` (NeMo-RL's Slurm launchers read it; sbatch exports the
submitting shell's environment).
"""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING

from cluster.launching.parts import FLOAT_PATTERN, STEPS_PATTERN, Mount
from cluster.launching.spec import Framework
from cluster.site.framework_registry import RecipeFields, register
from cluster.slurm.sbatch import JobShape, parse_sbatch_parsable, sbatch_options
from cluster.ssh.remote import RemoteArg, RPath, RSetting, join_remote
from cluster.watching.progress import Point, Progress, parse_nemo_rl
from cluster.watching.tracking import Tracking, check_job_id

if TYPE_CHECKING:
    from cluster.launching.spec import LaunchSpec
    from cluster.site.profiles import ClusterProfile

CHECKPOINT_DIR_KEY = "checkpointing.checkpoint_dir"
_REMOTE_PATH_RE = re.compile(r"(~|/)(/?[A-Za-z0-9._+@-]+)*/?")
AUTH_FILE = "configs/auth.sh"  # the guide's place for HF_TOKEN and WANDB_API_KEY
#: then=export: NeMo-RL's converter of a DCP checkpoint (the DTensor policy's
#: ``step_N/policy/weights``) to Hugging Face format, reading the model and tokenizer from the
#: run's ``step_N/config.yaml``; it ends printing ``Saved HF checkpoint to: <dir>``
#: (NVIDIA-NeMo/RL 0563dc35d59bde51ea44d2821009368d9a3751d2,
#: examples/converters/convert_dcp_to_hf.py). Relative to the NeMo-RL directory, where the
#: job scripts run ``examples/run_<algorithm>.py``.
EXPORT_PROGRAM = "examples/converters/convert_dcp_to_hf.py"
#: The built-in recipes: ``algorithms/<workload>.sh`` for each model, named to NeMo-RL.
HF_MODELS = {
    "llama3p1_8b": "meta-llama/Llama-3.1-8B-Instruct",
    "llama3p1_70b": "meta-llama/Llama-3.1-70B-Instruct",
}
OVERRIDES = {
    "policy.max_total_sequence_length": "[0-9]{1,6}",
    "policy.train_global_batch_size": "[0-9]{1,5}",
    "policy.train_micro_batch_size": "[0-9]{1,3}",
    "checkpointing.save_period": STEPS_PATTERN,
    # DD:HH:MM:SS: save and stop early before this much time has passed (nemo_rl/utils/timer.py)
    "checkpointing.checkpoint_must_save_by": "[0-9]{2}:[0-9]{2}:[0-9]{2}:[0-9]{2}",
    "logger.wandb_enabled": "True|False",
    "logger.tensorboard_enabled": "True|False",
}
ALGORITHM_OVERRIDES: dict[str, dict[str, str]] = {
    "sft": {"sft.max_num_steps": STEPS_PATTERN, "sft.max_num_epochs": "[0-9]{1,4}"},
    "dpo": {"dpo.max_num_steps": STEPS_PATTERN, "dpo.reference_policy_kl_penalty": FLOAT_PATTERN},
    "grpo": {
        "grpo.max_num_steps": STEPS_PATTERN,
        "grpo.num_prompts_per_step": "[0-9]{1,5}",
        "grpo.num_generations_per_prompt": "[0-9]{1,4}",
        "grpo.val_period": STEPS_PATTERN,
    },
    "rm": {"rm.max_num_steps": STEPS_PATTERN},
}


def sbatch_argv(
    shape: JobShape,
    *,
    job_name: str,
    cluster_type: str | None,
    job_script: str | None = None,
    interactive: bool = False,
    comment: str | None = None,
    args: tuple[str, ...] = (),
    overrides: tuple[tuple[str, str], ...] = (),
) -> list[RemoteArg]:
    """``sbatch --parsable -N n -p part [-t T] ... -J name launch.sh --cluster_type ...``:
    the shape's options (:func:`cluster.slurm.sbatch.sbatch_options`), as its estimate gives
    them."""
    argv: list[RemoteArg] = ["sbatch", "--parsable", *sbatch_options(shape), "-J", job_name]
    if comment:
        argv += ["--comment", comment]
    argv.append("launch.sh")
    if cluster_type:
        argv += ["--cluster_type", cluster_type]
    if interactive:
        argv.append("--interactive")
    if job_script:
        argv += ["--job_script", job_script]
    argv += [*args, *(f"{key}={value}" for key, value in overrides)]
    return argv


class NeMoRL(Framework):
    name = "nemo-rl"
    listed = 20
    label = "NeMo-RL"
    aliases = ("nemo_rl", "nemorl")
    image = "nemo_rl-h20260302.sqsh"
    workloads = ("sft", "dpo", "grpo", "rm")
    default_for = ("dpo", "grpo", "rm")
    launcher = "launch.sh"
    script_label = "job script"
    passes_comment = True  # launch.sh passes its options to sbatch
    subdir = "nemo_rl"
    starts_in_copy = True  # it resumes, saves and prunes in checkpointing.checkpoint_dir
    recipe_field = "job_script"
    recipe_globs = ("algorithms/*.sh",)
    interactive = True

    export_tool = "NeMo-RL's convert_dcp_to_hf.py"

    def export_argv(
        self, spec: LaunchSpec, model: str, checkpoint: str, hf_dir: str
    ) -> list[RemoteArg]:
        """``python3 examples/converters/convert_dcp_to_hf.py --config <step_N>/config.yaml
        --dcp-ckpt-path <step_N>/policy/weights --hf-ckpt-path <dir>``."""
        return [
            "python3",
            RPath(join_remote(spec.work_dir, EXPORT_PROGRAM)),
            "--config",
            RPath(join_remote(checkpoint, "config.yaml")),
            "--dcp-ckpt-path",
            RPath(join_remote(checkpoint, "policy", "weights")),
            "--hf-ckpt-path",
            RPath(hf_dir),
        ]

    def default_recipes(self) -> tuple[RecipeFields, ...]:
        return tuple(
            {
                "workload": workload,
                "model": model,
                "job_script": f"algorithms/{workload}.sh",
                "args": (f"policy.model_name={hf_name}",),
                "overrides": {**OVERRIDES, **ALGORITHM_OVERRIDES[workload]},
            }
            for workload in self.workloads
            for model, hf_name in HF_MODELS.items()
        )

    def argv(self, spec: LaunchSpec) -> list[RemoteArg]:
        profile = spec.profile
        argv = sbatch_argv(
            spec.shape,
            job_name=spec.job_name,
            cluster_type=profile.launcher_type,
            job_script=spec.script,
            interactive=spec.interactive,
            comment=spec.comment,
            args=spec.args,
            overrides=spec.overrides,
        )
        return [*argv, RSetting("=".join(spec.start_from))] if spec.start_from else argv

    def script_env(self, spec: LaunchSpec) -> dict[str, RemoteArg]:
        # The drivers print with plain print() and ray.sub sends the driver's output to a
        # file: without PYTHONUNBUFFERED Python writes it in 8 KiB blocks, minutes apart
        # (sbatch exports it to the job; srun and pyxis pass it on to the ranks and the
        # driver's container).
        return {"CONTAINER": RPath(spec.image_path), "PYTHONUNBUFFERED": "1"}

    def preflight_mounts(self, spec: LaunchSpec) -> dict[str, Mount]:
        # NeMo-RL's ray.sub mounts MOUNTS, "src:dst[:flags],..." (pyxis' --container-mounts).
        mounts = {}
        for entry in spec.env.get("MOUNTS", "").split(","):
            source = entry.split(":", 1)[0].strip()
            if source.startswith(("/", "~/")) and _REMOTE_PATH_RE.fullmatch(source):
                what = f"the MOUNTS entry {entry.strip()}"
                mounts[f"MOUNTS {source}"] = Mount(source, what, "MOUNTS in the environment")
        return mounts

    def auth_file(self, spec: LaunchSpec) -> str | None:
        # launch.sh sources configs/auth.sh inside the job, after sbatch exported the launch's
        # environment: what it assigns there replaces what trainbot exported.
        return join_remote(spec.work_dir, AUTH_FILE)

    def tracking(self, spec: LaunchSpec, output: str) -> Tracking:
        return self.found(spec, parse_sbatch_parsable(output).job_id)

    def found(self, spec: LaunchSpec, job_id: str) -> Tracking:
        check_job_id(job_id)
        job_dir = join_remote(spec.work_dir, job_id)
        # ray.sub writes its logs under BASE_LOG_DIR (default: the submit directory).
        log_base = spec.env.get("BASE_LOG_DIR", "").rstrip("/")
        if not log_base.startswith(("/", "~/")) or not _REMOTE_PATH_RE.fullmatch(log_base):
            log_base = spec.work_dir
        checkpoints = dict(spec.overrides).get(CHECKPOINT_DIR_KEY, "")
        if checkpoints and not checkpoints.startswith(("/", "~")):
            checkpoints = join_remote(spec.work_dir, checkpoints)  # the job runs in work_dir
        return Tracking(
            framework=self.name,
            job_id=job_id,
            interactive=spec.interactive,
            log_dir=job_dir,
            log_names=("nemo_rl_output.log",),
            log_globs=(
                join_remote(job_dir, "nemo_rl_output.log"),
                join_remote(log_base, f"{job_id}-logs", "ray-driver.log"),
                join_remote(log_base, f"{job_id}-[0-9]*-logs", "ray-driver.log"),
            ),
            restart_pattern=rf"/{re.escape(job_id)}-([0-9]+)-logs/ray-driver\.log$",
            checkpoint_dir=checkpoints or join_remote(job_dir, "checkpoints"),
            checkpoint_pattern=r"^step_([0-9]+)$",
            attach_path=join_remote(job_dir, "attach.sh") if spec.interactive else "",
            attach_alternatives=(  # ray.sub's
                (join_remote(spec.work_dir, f"{job_id}-attach.sh"),) if spec.interactive else ()
            ),
            evidence=(
                "nemo_rl_output.log",
                f"../slurm-{job_id}.out",
                "*.out",
                "*.err",
                "ray-logs/*.log",
                "ray-logs/*.err",
                "ray-logs/*.out",
                "*.log",  # ray.sub's layout: ray-driver.log, ray-head.log, ray-worker-N.log
            ),
        )

    def parse_progress(self, text: str, carry: Point | None) -> Progress:
        return parse_nemo_rl(text, carry)

    def tensorboard_dir(self, printed: str, tracking: Tracking, job_dir: str) -> str:
        # A relative log dir (NeMo-RL's default, logs/exp_NNN/tensorboard) is relative to
        # the submit directory, where the job runs: the job directory's parent.
        if printed.startswith(("/", "~")) or not job_dir:
            return printed
        return posixpath.normpath(posixpath.join(posixpath.dirname(job_dir.rstrip("/")), printed))

    def attach_command(self, tracking: Tracking) -> str | None:
        return f"bash {tracking.attach_path}" if tracking.attach_path else None

    def start_key(self, parent_framework: str, same_workload: bool) -> str:
        if parent_framework != self.name or not same_workload:
            raise ValueError(
                "NeMo-RL starts only from a run of the same algorithm, continuing in its "
                "checkpoint directory (checkpointing.checkpoint_dir, from its highest step_N); "
                "to start from another run, convert its checkpoint to Hugging Face format and "
                "give it as policy.model_name"
            )
        return CHECKPOINT_DIR_KEY

    def start_value(self, parent: Tracking, checkpoint: str, profile: ClusterProfile) -> str:
        # The whole directory: NeMo-RL resumes from its highest complete step_N (relative
        # to the submit directory, where the job runs, as for a retry).
        base = self.work_dir(profile) + "/"
        found = parent.checkpoint_dir
        return found[len(base) :] if found.startswith(base) else found

    def retry_overrides(
        self, overrides: tuple[tuple[str, str], ...], previous: Tracking, profile: ClusterProfile
    ) -> tuple[tuple[str, str], ...]:
        # NeMo-RL resumes from the highest step_N in its checkpoint dir: point the retry at
        # the earlier attempt's (relative to the submit directory, where the job runs).
        base = self.work_dir(profile) + "/"
        if not previous.checkpoint_dir.startswith(base):
            return overrides
        keep = tuple(kv for kv in overrides if kv[0] != CHECKPOINT_DIR_KEY)
        return (*keep, (CHECKPOINT_DIR_KEY, previous.checkpoint_dir[len(base) :]))


NEMO_RL = register(NeMoRL())
