"""Megatron-Bridge (pretraining, CPT, SFT, PEFT/LoRA): ``sbatch`` + ``srun`` of ``run_recipe.py``.

NeMo Framework 26.x trains LLMs through Megatron-Bridge (``megatron.bridge``; NeMo 2's
``nemo.collections.llm`` is gone). Its recipes are Python functions
(``megatron.bridge.recipes.llama.llama31_8b_pretrain_config``) that its generic program,
``scripts/training/run_recipe.py``, loads by name (``--recipe``) and overrides with
Hydra-style dotted keys (``train.train_iters=100``). Its docs launch on Slurm two ways:
nemo-run's Slurm executor, or ``sbatch`` with ``srun`` and pyxis
(``scripts/training/launch_with_sbatch.sh``; the multi-node guide prefers "srun-native":
one task per GPU, ``--ntasks-per-node=8``, Megatron-Bridge reading its ranks from
``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``; NVIDIA-NeMo/Megatron-Bridge
067f987df03b8355b03192d88d70f1709fedf51a). trainbot takes the second: one ``sbatch
--parsable ... --wrap`` whose batch script runs ``srun`` once, so the job is one plain
Slurm job, its id comes back at once, and nothing else (no nemo-run, no site launcher)
stands between the bot and Slurm. ``docs/frameworks.md`` argues it.

The batch script sets the cluster type's NCCL environment, makes the run's directory
``<recipes_dir>/megatron_bridge/experiments/<job name>/``, and runs
``<that dir>/../../run_recipe.py`` (the site's copy of upstream's program, mounted into the
container at the same path) with pyxis's ``--container-image``, or, where ``srun`` has no
such option (no pyxis: the dev cluster), without a container and the image in
``CONTAINER_IMAGE``. The log is ``log-<job name>_<job id>_<restart>.out`` there (one per
Slurm restart, as nemo-run names its own); checkpoints go to ``checkpoints/`` there
(``checkpoint.save`` and ``checkpoint.load``), so every attempt of one launch resumes from
the newest complete one, which the tracker file ``latest_checkpointed_iteration.txt``
names. TensorBoard event files go to ``tb_logs/`` there (``logger.tensorboard_dir``: the
recipes' own default, ``<cwd>/nemo_experiments/default/tb_logs``, would be shared by every
launch run from the same directory); the last rank prints ``> setting tensorboard ...``
when it makes the writer (``megatron/bridge/training/state.py``), and that line is when
the thread names the directory.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from cluster.launching.parts import FLOAT_PATTERN, STEPS_PATTERN, Mount
from cluster.launching.spec import Framework
from cluster.site.framework_registry import RecipeFields, register
from cluster.site.image_refs import is_registry_ref, pyxis_image
from cluster.slurm.sbatch import parse_sbatch_parsable, sbatch_options
from cluster.ssh.remote import RemoteArg, RPath, join_remote, quote_path
from cluster.watching.megatron_log import parse_megatron
from cluster.watching.progress import Point, Progress
from cluster.watching.tracking import Tracking, check_job_id

if TYPE_CHECKING:
    from cluster.launching.spec import LaunchSpec
    from cluster.site.profiles import ClusterProfile

#: The bot's model names and Megatron-Bridge 0.6's recipe families (megatron.bridge.recipes.llama).
MODELS = {"llama3p1_8b": "llama31_8b", "llama3p1_70b": "llama31_70b"}
#: Workload -> the recipe function's suffix; CPT is the pretraining recipe started from a
#: checkpoint (checkpoint.pretrained_checkpoint), PEFT the PEFT recipe with LoRA.
RECIPE_SUFFIX = {
    "pretrain": "pretrain_config",
    "cpt": "pretrain_config",
    "sft": "sft_config",
    "peft": "peft_config",
}
#: then=export: the Hugging Face model each family converts back to (the bridge reads its
#: config; Megatron-Bridge's examples/conversion/convert_checkpoints.py ``--hf-model``).
HF_MODELS = {"llama3p1_8b": "meta-llama/Llama-3.1-8B", "llama3p1_70b": "meta-llama/Llama-3.1-70B"}
#: The site's copy of upstream's converter, beside run_recipe.py (as run_recipe.py is).
EXPORT_PROGRAM = "convert_checkpoints.py"
#: The container: NeMo Framework 26.02, which carries Megatron-Bridge (pyxis imports it).
DEFAULT_IMAGE = "nvcr.io/nvidia/nemo:26.02"
CHECKPOINT_PATTERN = r"^iter_([0-9]{7,})$"
TRACKER_FILE = "latest_checkpointed_iteration.txt"
TENSORBOARD_SUBDIR = "tb_logs"
#: What the last rank prints when it makes the TensorBoard writer (Megatron-Bridge's
#: GlobalState.tensorboard_logger, as Megatron-LM's global_vars): the directory is not in it.
TENSORBOARD_SET_RE = re.compile(r"^> setting tensorboard \.\.\.\s*$", re.MULTILINE)
LOAD_KEY, PRETRAINED_KEY = "checkpoint.load", "checkpoint.pretrained_checkpoint"
_PATH_VALUE = r"/[A-Za-z0-9._/+@-]{1,199}"
OVERRIDES = {
    "train.train_iters": STEPS_PATTERN,
    "train.global_batch_size": "[0-9]{1,5}",
    "train.micro_batch_size": "[0-9]{1,3}",
    "train.exit_interval": STEPS_PATTERN,
    "train.exit_duration_in_mins": "[0-9]{1,6}",
    "optimizer.lr": FLOAT_PATTERN,
    "checkpoint.save_interval": STEPS_PATTERN,
    "logger.log_interval": STEPS_PATTERN,
    "validation.eval_interval": STEPS_PATTERN,
    "model.tensor_model_parallel_size": "[0-9]{1,3}",
    "logger.wandb_project": "[A-Za-z0-9._-]{1,64}",
    "rerun_state_machine.rerun_mode": "disabled|validate_results|report_determinism_stats",
}
CPT_OVERRIDES = {PRETRAINED_KEY: _PATH_VALUE}
#: NCCL set-up per cluster type (FIELD_GUIDE section 2): the script Google's images ship,
#: sourced when it is there, and the directory the container must see it in.
NCCL_SETUP = {
    "hcc-a3m": "/var/lib/tcpxo/lib64/nccl-env-profile.sh",
    "hcc-a3u": "/usr/local/gib/scripts/set_nccl_env.sh",
    "hcc-a4": "/usr/local/gib/scripts/set_nccl_env.sh",
    "hcc-a3h": "/usr/local/gib/scripts/set_nccl_env.sh",
}
NCCL_MOUNT = {
    "hcc-a3m": "/var/lib/tcpxo/lib64",
    "hcc-a3u": "/usr/local/gib",
    "hcc-a4": "/usr/local/gib",
    "hcc-a3h": "/usr/local/gib",
}
#: Hopper needs one CUDA connection for Megatron's overlap with TP > 1; Blackwell does not.
HOPPER = ("hcc-a3m", "hcc-a3u", "hcc-a3h")


def run_dir(spec: LaunchSpec) -> str:
    """The launch's own directory (every attempt's logs and the checkpoints)."""
    return join_remote(spec.work_dir, "experiments", spec.job_name)


def recipe_flags(args: tuple[str, ...]) -> list[str]:
    """A catalog entry's ``args`` (``recipe=llama31_8b_sft_config``, ``peft_scheme=lora``)
    as run_recipe.py's flags (``--recipe=llama31_8b_sft_config``)."""
    return [f"--{arg}" if "=" in arg else arg for arg in args]


def batch_script(spec: LaunchSpec) -> str:
    """The ``--wrap`` script: NCCL set-up, the run's directory, one ``srun`` of
    run_recipe.py on every GPU, in the container where pyxis is there."""
    profile = spec.profile
    here = quote_path(spec.work_dir)
    image = pyxis_image(spec.image_path) if is_registry_ref(spec.image_path) else spec.image_path
    image_arg = shlex.quote(image) if is_registry_ref(spec.image_path) else quote_path(image)
    mounts = [spec.work_dir, profile.cache_dir, profile.data_dir]
    lines = [
        "set -e",
        f"RUN_DIR={quote_path(run_dir(spec))}",
        'mkdir -p "$RUN_DIR/checkpoints"',
        "export TORCH_NCCL_AVOID_RECORD_STREAMS=1 NCCL_NVLS_ENABLE=0",
    ]
    if profile.type in HOPPER:
        lines.append("export CUDA_DEVICE_MAX_CONNECTIONS=1")
    kind = profile.type  # a preset's NCCL set-up; a cluster without one exports its nccl_env
    setup = NCCL_SETUP.get(kind) if kind else None
    if kind and setup:
        lines.append(
            f"if [ -f {setup} ]; then . {setup}; "
            f"else echo 'trainbot: no {setup} on this node: NCCL runs on its defaults'; fi"
        )
        mounts.append(NCCL_MOUNT[kind])
    container = ",".join(f"{m}:{m}" for m in mounts)
    lines += [
        f"export CONTAINER_IMAGE={image_arg}",
        "if srun --help 2>&1 | grep -q -- --container-image; then",
        f'  set -- --container-image="$CONTAINER_IMAGE" --container-mounts={_mounts(container)} '
        f"--container-workdir={here} --container-writable --no-container-mount-home",
        "else",
        "  echo 'trainbot: srun has no --container-image here (no pyxis): the ranks run "
        "outside a container'",
        "  set --",
        "fi",
    ]
    program = [*recipe_flags(spec.args), *(f"{k}={v}" for k, v in spec.overrides)]
    load = '"$RUN_DIR/checkpoints"'
    extra: list[str] = []
    if spec.start_from is not None:
        key, value = spec.start_from
        if key == LOAD_KEY:
            load = quote_path(value)
        else:
            extra.append(f"{key}={quote_path(value)}")
    extra.append(f'logger.tensorboard_dir="$RUN_DIR/{TENSORBOARD_SUBDIR}"')
    words = " ".join(shlex.quote(w) for w in program)
    lines.append(
        'exec srun --kill-on-bad-exit=1 --output="$RUN_DIR/log-'
        f'{spec.job_name}_%j_${{SLURM_RESTART_COUNT:-0}}.out" "$@" '
        f"python3 {here}/{shlex.quote(spec.script or 'run_recipe.py')} {words} "
        f'checkpoint.save="$RUN_DIR/checkpoints" {LOAD_KEY}={load} {" ".join(extra)}'
    )
    return "\n".join(lines)


def _mounts(joined: str) -> str:
    """The mount list with ``~`` paths as ``"$HOME"/...`` (quote_path per entry)."""
    return ",".join(
        ":".join(quote_path(side) for side in entry.split(":")) for entry in joined.split(",")
    )


class MegatronBridge(Framework):
    name = "megatron-bridge"
    listed = 30
    label = "Megatron-Bridge"
    aliases = ("megatron_bridge", "mbridge")
    image = DEFAULT_IMAGE
    workloads = ("pretrain", "cpt", "sft", "peft")
    default_for = ("peft",)
    launcher = "run_recipe.py"
    script_label = "program"
    subdir = "megatron_bridge"
    recipe_field = "script"
    recipe_globs = ("*.py",)
    passes_comment = True

    export_tool = f"Megatron-Bridge's {EXPORT_PROGRAM} export"

    def export_argv(
        self, spec: LaunchSpec, model: str, checkpoint: str, hf_dir: str
    ) -> list[RemoteArg]:
        """``python3 convert_checkpoints.py export --hf-model <HF id> --megatron-path <iter
        dir> --hf-path <dir>`` (AutoBridge.export_ckpt underneath)."""
        hf_model = HF_MODELS.get(model, model)
        return [
            "python3",
            RPath(join_remote(spec.work_dir, EXPORT_PROGRAM)),
            "export",
            "--hf-model",
            hf_model,
            "--megatron-path",
            RPath(checkpoint),
            "--hf-path",
            RPath(hf_dir),
        ]

    def default_image(self, recipes_dir: str) -> str:
        return DEFAULT_IMAGE  # a registry image: pyxis imports it at the job's start

    def default_recipes(self) -> tuple[RecipeFields, ...]:
        recipes: list[RecipeFields] = []
        for workload, suffix in RECIPE_SUFFIX.items():
            for model, family in MODELS.items():
                args = [f"recipe={family}_{suffix}"]
                if workload == "peft":
                    args.append("peft_scheme=lora")
                overrides = {**OVERRIDES, **(CPT_OVERRIDES if workload != "pretrain" else {})}
                recipes.append(
                    {
                        "workload": workload,
                        "model": model,
                        "script": "run_recipe.py",
                        "args": tuple(args),
                        "overrides": overrides,
                        "description": f"megatron.bridge.recipes.llama.{family}_{suffix}",
                    }
                )
        return tuple(recipes)

    def job_base(self, spec: LaunchSpec) -> str:
        # The recipe's name, not the program's: llama31_8b_pretrain-L-7f3a9c.
        recipe = next((a.split("=", 1)[1] for a in spec.args if a.startswith("recipe=")), "")
        return recipe.removesuffix("_config")

    def argv(self, spec: LaunchSpec) -> list[RemoteArg]:
        gpus = str(spec.profile.gpus_per_node)
        argv: list[RemoteArg] = ["sbatch", "--parsable", *sbatch_options(spec.shape)]
        argv += [f"--ntasks-per-node={gpus}", f"--gpus-per-node={gpus}", "-J", spec.job_name]
        if spec.comment:
            argv += ["--comment", spec.comment]
        argv += ["-o", f"sbatch_{spec.job_name}_%j.out", f"--wrap={batch_script(spec)}"]
        return argv

    def preflight_files(self, spec: LaunchSpec) -> dict[str, str]:
        files = super().preflight_files(spec)
        files.pop("launcher", None)  # the program is the recipe entry's script
        return files

    def preflight_mounts(self, spec: LaunchSpec) -> dict[str, Mount]:
        where = f"{spec.cluster}'s cluster config"
        return {
            f"mount {setting}": Mount(
                getattr(spec.profile, setting), "the container's mounts", f"{setting} in {where}"
            )
            for setting in ("cache_dir", "data_dir")
        }

    def tracking(self, spec: LaunchSpec, output: str) -> Tracking:
        return self.found(spec, parse_sbatch_parsable(output).job_id)

    def found(self, spec: LaunchSpec, job_id: str) -> Tracking:
        check_job_id(job_id)
        here = run_dir(spec)
        return Tracking(
            framework=self.name,
            job_id=job_id,
            log_dir=here,
            log_names=(f"log-*_{job_id}_*.out",),
            restart_pattern=rf"_{re.escape(job_id)}_([0-9]+)\.out$",
            checkpoint_dir=join_remote(here, "checkpoints"),
            checkpoint_pattern=CHECKPOINT_PATTERN,
            tracker_file=TRACKER_FILE,
            evidence=(f"log-*_{job_id}_*.out", f"../../sbatch_{spec.job_name}_{job_id}.out"),
        )

    def parse_progress(self, text: str, carry: Point | None) -> Progress:
        return parse_megatron(text, carry)

    def tensorboard_printed(self, text: str) -> list[str]:
        # The log does not name the directory; the batch script chose it (logger.tensorboard_dir).
        return [TENSORBOARD_SUBDIR] if TENSORBOARD_SET_RE.search(text) else []

    def tensorboard_dir(self, printed: str, tracking: Tracking, job_dir: str) -> str:
        # <run dir>/tb_logs: the directory the collector found the log in is the run's own.
        return join_remote(job_dir or tracking.log_dir, printed)

    def start_key(self, parent_framework: str, same_workload: bool) -> str:
        if parent_framework != self.name:
            raise ValueError(
                "a Megatron-Bridge recipe loads Megatron checkpoints (iter_NNNNNNN with a "
                f"tracker file), and that launch ran on {parent_framework}; convert its "
                "checkpoint first and give it as checkpoint.pretrained_checkpoint"
            )
        # checkpoint.load resumes the whole training state (a longer run of the same recipe);
        # checkpoint.pretrained_checkpoint loads the weights only (SFT, PEFT or CPT from it).
        return LOAD_KEY if same_workload else PRETRAINED_KEY

    def start_value(self, parent: Tracking, checkpoint: str, profile: ClusterProfile) -> str:
        # The save directory: Megatron loads the iteration its tracker file names, the newest
        # complete checkpoint.
        return parent.checkpoint_dir


MEGATRON_BRIDGE = register(MegatronBridge())
