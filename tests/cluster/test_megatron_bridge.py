"""The Megatron-Bridge job model (pure): recipes, the sbatch + srun line, its files, from=,
and registry images (cluster.site.image_refs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.frameworks.megatron_bridge import MEGATRON_BRIDGE, batch_script
from cluster.launching.launch import plan_launch
from cluster.launching.recipes import DEFAULT_CATALOG
from cluster.launching.spec import LaunchSpec
from cluster.site.image_refs import check_image_ref, enroot_uri, is_registry_ref, pyxis_image
from cluster.site.profiles import ClusterProfile
from cluster.watching.progress import tensorboard_dirs
from commands.rules import ImageRule


def profile(**fields: object) -> ClusterProfile:
    return ClusterProfile.model_validate(
        {
            "name": "a4",
            "type": "hcc-a4",
            "login": {"host": "127.0.0.1", "port": 2222, "user": "trainer"},
            "partition": "a4",
            "max_nodes": 4,
            **fields,
        }
    )


def spec(workload: str = "pretrain", **fields: object) -> LaunchSpec:
    recipe = DEFAULT_CATALOG.find(workload, "llama3p1_8b", "megatron-bridge")
    assert recipe is not None
    base = LaunchSpec.from_recipe(
        fields.pop("profile", profile()),  # type: ignore[arg-type]
        recipe,
        launch_id="L-7f3a9c",
        nodes=2,
        overrides=(("train.train_iters", "100"),),
    )
    return LaunchSpec(**{**base.__dict__, **fields})


@pytest.mark.parametrize(
    ("workload", "recipe"),
    [
        ("pretrain", "--recipe=llama31_8b_pretrain_config"),
        ("cpt", "--recipe=llama31_8b_pretrain_config"),
        ("sft", "--recipe=llama31_8b_sft_config"),
        ("peft", "--recipe=llama31_8b_peft_config --peft_scheme=lora"),
    ],
)
def test_workloads_map_to_megatron_bridge_recipes(workload: str, recipe: str) -> None:
    script = batch_script(spec(workload))
    assert f"run_recipe.py {recipe} train.train_iters=100 checkpoint.save=" in script


def test_the_launch_is_one_sbatch_with_a_task_per_gpu_and_srun_in_the_container() -> None:
    plan = plan_launch(spec())
    line = plan.command_line
    assert line.startswith("sbatch --parsable -N 2 -p a4 --ntasks-per-node=8 --gpus-per-node=8 ")
    assert "-J llama31_8b_pretrain-L-7f3a9c" in line  # the recipe names the job, not the program
    script = batch_script(spec())
    assert "export CONTAINER_IMAGE='nvcr.io#nvidia/nemo:26.02'" in script  # pyxis's form
    assert '--container-image="$CONTAINER_IMAGE"' in script
    assert '"$HOME"/.cache:"$HOME"/.cache' in script and "/usr/local/gib:/usr/local/gib" in script
    assert ". /usr/local/gib/scripts/set_nccl_env.sh" in script  # A4's NCCL set-up
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in script  # Blackwell needs no single connection
    assert 'srun --kill-on-bad-exit=1 --output="$RUN_DIR/log-llama31_8b_pretrain-L-7f3a9c_%j_' in (
        script
    )
    assert 'checkpoint.save="$RUN_DIR/checkpoints" checkpoint.load="$RUN_DIR/checkpoints"' in script
    assert 'logger.tensorboard_dir="$RUN_DIR/tb_logs"' in script  # not the recipes' shared one
    hopper = batch_script(spec(profile=profile(type="hcc-a3m")))
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in hopper
    assert ". /var/lib/tcpxo/lib64/nccl-env-profile.sh" in hopper


def test_a_file_image_keeps_its_path_and_is_checked_at_preflight() -> None:
    own = spec(image="~/images/nemo-26.02.sqsh")
    assert 'export CONTAINER_IMAGE="$HOME"/images/nemo-26.02.sqsh' in batch_script(own)
    assert own.fw.preflight_files(own)["image"] == "~/images/nemo-26.02.sqsh"
    assert "image" not in spec().fw.preflight_files(spec())  # the registry's to import


def test_tracking_points_at_the_run_directory_and_the_tracker_file() -> None:
    tracking = MEGATRON_BRIDGE.tracking(spec(), "4187\n")
    here = "~/vertex-oss-training/megatron_bridge/experiments/llama31_8b_pretrain-L-7f3a9c"
    assert tracking.job_id == "4187" and tracking.log_dir == here
    assert tracking.log_names == ("log-*_4187_*.out",)
    assert tracking.checkpoint_dir == f"{here}/checkpoints"
    assert tracking.tracker_file == "latest_checkpointed_iteration.txt"
    assert "../../sbatch_llama31_8b_pretrain-L-7f3a9c_4187.out" in tracking.evidence
    with pytest.raises(ValueError, match="no job id|not a Slurm job id"):
        MEGATRON_BRIDGE.tracking(spec(), "sbatch: error: invalid partition specified: general")


def test_from_loads_the_whole_state_or_the_weights_and_never_another_frameworks() -> None:
    assert MEGATRON_BRIDGE.start_key("megatron-bridge", True) == "checkpoint.load"
    assert MEGATRON_BRIDGE.start_key("megatron-bridge", False) == "checkpoint.pretrained_checkpoint"
    with pytest.raises(ValueError, match="that launch ran on nemo"):
        MEGATRON_BRIDGE.start_key("nemo", True)
    parent = MEGATRON_BRIDGE.tracking(spec(), "41\n")
    value = MEGATRON_BRIDGE.start_value(parent, "iter_0000020", profile())
    assert value == parent.checkpoint_dir  # Megatron loads the tracker's (newest) iteration
    resumed = batch_script(spec(start_from=("checkpoint.load", value)))
    home = value.replace("~/", '"$HOME"/')
    assert f"checkpoint.load={home}" in resumed
    sft = batch_script(spec("sft", start_from=("checkpoint.pretrained_checkpoint", value)))
    assert 'checkpoint.load="$RUN_DIR/checkpoints" checkpoint.pretrained_checkpoint=' in sft


@pytest.mark.parametrize(
    ("value", "pyxis"),
    [
        ("nvcr.io/nvidia/nemo:26.02", "nvcr.io#nvidia/nemo:26.02"),
        ("nvcr.io#nvidia/nemo-rl:v0.5.0", "nvcr.io#nvidia/nemo-rl:v0.5.0"),
        ("docker://nvcr.io#nvidia/nemo:26.02", "nvcr.io#nvidia/nemo:26.02"),
        ("docker://nvcr.io/nvidia/nemo:26.02", "nvcr.io#nvidia/nemo:26.02"),
        ("registry.example.com:5000/team/nemo:v1", "registry.example.com:5000#team/nemo:v1"),
        ("nvidia/cuda:12.4.1-base-ubuntu22.04", "nvidia/cuda:12.4.1-base-ubuntu22.04"),
    ],
)
def test_registry_references_in_every_spelling(value: str, pyxis: str) -> None:
    assert is_registry_ref(value) and check_image_ref(value) == value
    assert pyxis_image(value) == pyxis and enroot_uri(value) == f"docker://{pyxis}"


@pytest.mark.parametrize(
    "value",
    [
        "nemo",  # a name in a profile's images
        "/opt/images/nemo.sqsh",
        "~/nemo.sqsh",
        "nemo.sqsh",
        "docker://NVCR.io/Nemo",
        "nvcr.io/nvidia/nemo:26.02;rm -rf ~",
        "nvcr.io/nvidia/nemo:$(id)",
        "user:secret@nvcr.io/nvidia/nemo:26.02",  # credentials are the site's, never in a name
    ],
)
def test_what_is_not_a_registry_reference(value: str) -> None:
    assert not is_registry_ref(value)


def test_a_profile_takes_a_registry_image_and_refuses_nonsense() -> None:
    built = profile(images={"nemo-26": "nvcr.io/nvidia/nemo:26.02"})
    assert built.resolve_image("nemo-26", "nemo") == "nvcr.io/nvidia/nemo:26.02"
    with pytest.raises(ValueError, match="registry reference"):
        profile(images={"bad": "nvcr.io/nvidia/nemo:26.02;id"})


def test_custom_image_rules_name_the_registries_they_allow() -> None:
    rule = ImageRule(users=("*",), registries=("nvcr.io/nvidia/",))
    assert rule.holds("nvcr.io/nvidia/nemo:26.02")
    assert rule.holds("docker://nvcr.io#nvidia/nemo-rl:v0.5.0")
    assert not rule.holds("nvcr.io/evil/nemo:1")
    assert not rule.holds("/scratch/images/x.sqsh")  # no dirs: no files
    with pytest.raises(ValueError, match="dirs or the registries"):
        ImageRule(users=("*",))


def test_every_launcher_gets_a_registry_image_in_pyxis_form() -> None:
    nemo = DEFAULT_CATALOG.find("sft", "llama3p1_8b", "nemo")
    rl = DEFAULT_CATALOG.find("dpo", "llama3p1_8b", "nemo-rl")
    assert nemo is not None and rl is not None
    for recipe, image in (
        (nemo, "nvcr.io/nvidia/nemo:26.02"),
        (rl, "docker://nvcr.io/nvidia/nemo-rl:v0.5.0"),
    ):
        launch = LaunchSpec.from_recipe(profile(), recipe, launch_id="L-1", nodes=1, image=image)
        assert launch.image_path == pyxis_image(image) and "#" in launch.image_path
        assert launch.image_path in plan_launch(launch).script()


RUN_RECIPE = (
    Path(__file__).parents[2] / "devcluster/login/vertex-oss-training/megatron_bridge/run_recipe.py"
)


def test_tensorboard_is_the_run_directorys_own_and_said_when_the_writer_is_made() -> None:
    """The log does not name the directory (``> setting tensorboard ...``): the batch
    script chose ``<run dir>/tb_logs``, and the directory the log was found in is the run's."""
    tracking = MEGATRON_BRIDGE.tracking(spec(), "4187\n")
    made = "  successfully loaded checkpoint\n> setting tensorboard ...\nStarting training loop\n"
    assert MEGATRON_BRIDGE.tensorboard_printed(made) == ["tb_logs"]
    assert MEGATRON_BRIDGE.tensorboard_printed("Starting training loop at iteration 0\n") == []
    assert MEGATRON_BRIDGE.tensorboard_printed("x > setting tensorboard ... later\n") == []
    job_dir = "/home/trainer/vertex-oss-training/megatron_bridge/experiments/x-L-7f3a9c"
    assert MEGATRON_BRIDGE.tensorboard_dir("tb_logs", tracking, job_dir) == f"{job_dir}/tb_logs"
    assert MEGATRON_BRIDGE.tensorboard_dir("tb_logs", tracking, "") == (
        f"{tracking.log_dir}/tb_logs"
    )
    assert tensorboard_dirs(made) == []  # NeMo's and NeMo-RL's lines are another shape


def test_the_stand_in_writes_events_where_the_batch_script_says(tmp_path: Path) -> None:
    """The dev cluster's run_recipe.py (this checkout's copy, run here as the only rank)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DEVCLUSTER_STEP_TIME_S": "0"}
    env.update(DEVCLUSTER_SAVE_TIME_S="0", DEVCLUSTER_TEARDOWN_S="0")
    board = tmp_path / "run" / "tb_logs"
    argv = [sys.executable, str(RUN_RECIPE), "--recipe=llama31_8b_pretrain_config"]
    argv += ["train.train_iters=2", f"checkpoint.save={tmp_path}/run/checkpoints"]
    out = subprocess.run(
        [*argv, f"logger.tensorboard_dir={board}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert MEGATRON_BRIDGE.tensorboard_printed(out.stdout) == ["tb_logs"]
    assert [p.name.startswith("events.out.tfevents.") for p in board.iterdir()] == [True]
