"""The framework objects: what each launcher prints, where each job's files are, how a
retry resumes. Pure, except that file picking runs the collector's remote half on
local files (the same code that runs on the login node)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.frameworks.nemo import NEMO, parse_status_block
from cluster.frameworks.nemo_rl import NEMO_RL
from cluster.launching.launch import plan_launch
from cluster.launching.recipes import DEFAULT_CATALOG
from cluster.launching.spec import LaunchSpec, framework
from cluster.site.framework_registry import frameworks
from cluster.site.profiles import ClusterProfile
from cluster.watching import collect_remote
from cluster.watching.progress import tensorboard_dirs

DATA = Path(__file__).parent / "data"


@pytest.fixture
def profile() -> ClusterProfile:
    return ClusterProfile(
        name="a4",
        type="hcc-a4",
        login={"host": "127.0.0.1", "port": 2222, "user": "trainer"},
        partition="a4",
        max_nodes=4,
    )


def spec_for(profile: ClusterProfile, workload: str, **changes: object) -> LaunchSpec:
    framework_name = "nemo-rl" if workload in ("dpo", "grpo", "rm") else "nemo"
    recipe = DEFAULT_CATALOG.find(workload, "llama3p1_8b", framework_name)
    assert recipe is not None
    return LaunchSpec.from_recipe(profile, recipe, launch_id="L-7f3a9c", nodes=2, **changes)  # type: ignore[arg-type]


def test_registry_names_every_framework_once() -> None:
    assert list(frameworks()) == ["nemo", "nemo-rl", "megatron-bridge"]  # listed in that order
    assert framework("nemo") is NEMO and framework("nemo-rl") is NEMO_RL
    known = "known: nemo, nemo-rl, megatron-bridge"
    with pytest.raises(ValueError, match=f"unknown framework 'jax'; {known}"):
        framework("jax")


@pytest.mark.parametrize("name", ["nemo_run_stdout.txt", "nemo_run_stdout_pending.txt"])
def test_nemo_status_block_recorded(name: str) -> None:
    status = parse_status_block((DATA / name).read_text())
    assert status.job_id in ("6", "7")
    assert status.local_dir.startswith("/home/trainer/vertex-oss-training/nemo/experiments/")
    assert status.local_dir.endswith("/" + status.task)
    assert status.experiment_id.startswith(status.task + "_")


def test_nemo_status_block_with_ansi_and_without_job() -> None:
    text = "\x1b[1mExperiment Status for x_1\x1b[0m\n\nTask 0: x\n- Status: RUNNING\n- Job id: 75\n"
    assert parse_status_block(text).job_id == "75"
    with pytest.raises(ValueError, match="no Slurm job id"):
        parse_status_block("run.py: error: recipe script not found")


def test_nemo_tracking_from_run_py_output(profile: ClusterProfile) -> None:
    spec = spec_for(profile, "sft", name="mine")
    tracking = NEMO.tracking(spec, (DATA / "nemo_run_stdout.txt").read_text())
    status = parse_status_block((DATA / "nemo_run_stdout.txt").read_text())
    assert tracking.framework == "nemo" and tracking.job_id == status.job_id
    assert tracking.log_dir == status.local_dir
    assert (
        tracking.checkpoint_dir
        == "~/vertex-oss-training/nemo/logs/mine-L-7f3a9c/default/checkpoints"
    )
    assert tracking.attach_path == "" and NEMO.attach_command(tracking) is None
    with pytest.raises(ValueError, match="no Slurm job id"):
        NEMO.tracking(spec, "Traceback ...\nValueError: bad recipe\n")


def test_nemo_job_found_again_searches_its_experiment(profile: ClusterProfile) -> None:
    spec = spec_for(profile, "sft")
    tracking = NEMO.found(spec, "42")
    name = "llama3p1_8b_sft-L-7f3a9c"
    assert tracking.log_dir == f"~/vertex-oss-training/nemo/experiments/{name}/*/{name}"
    with pytest.raises(ValueError, match="not a Slurm job id"):
        NEMO.found(spec, "42; rm -rf /")


def status_block(job_id: str, local_dir: Path) -> str:
    """What run.py prints after submitting (nemo-run's status block)."""
    return (
        f"Experiment Status for x_1\n\nTask 0: x\n- Status: SUBMITTED\n- Job id: {job_id}\n"
        f"- Local Directory: {local_dir}\n"
    )


def write(folder: Path, *names: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text(f"{name}\n")


@pytest.mark.parametrize(
    ("names", "log", "restart"),
    [
        (["log-u-u.x_7_0.out", "sbatch_u-u.x_7.out"], "log-u-u.x_7_0.out", 0),
        (
            ["log-u-u.x_7_0.out", "log-u-u.x_7_2.out", "log-u-u.x_7_1.out", "sbatch_u-u.x_7.out"],
            "log-u-u.x_7_2.out",
            2,
        ),
        (["7.log"], "7.log", 0),
        (["log-u-u.x_17_0.out", "77.log"], "", 0),
        ([], "", 0),
    ],
)
def test_nemo_main_log_is_the_newest_restart_of_this_job(
    tmp_path: Path, profile: ClusterProfile, names: list[str], log: str, restart: int
) -> None:
    write(tmp_path, *names)
    tracking = NEMO.tracking(spec_for(profile, "sft"), status_block("7", tmp_path))
    directory, main_log, found_restart = collect_remote.find_log(tracking.payload())
    assert main_log == (str(tmp_path / log) if log else "")
    assert found_restart == restart and directory == str(tmp_path)


def test_found_job_directory_is_resolved_by_its_log(
    tmp_path: Path, profile: ClusterProfile
) -> None:
    """A job found again after a restart: its experiment directory is searched for."""
    profile = profile.model_copy(update={"nemorun_home": str(tmp_path)})
    name = "llama3p1_8b_sft-L-7f3a9c"
    experiments = tmp_path / "experiments" / name
    write(experiments / f"{name}_100" / name, "log-u-u.x_6_0.out")  # an earlier attempt's job
    write(experiments / f"{name}_200" / name, "log-u-u.x_9_0.out", "sbatch_u-u.x_9.out")
    tracking = NEMO.found(spec_for(profile, "sft"), "9")
    directory, main_log, _ = collect_remote.find_log(tracking.payload())
    assert directory == str(experiments / f"{name}_200" / name)
    assert main_log.endswith("log-u-u.x_9_0.out")


def test_nemo_rl_tracking_from_sbatch_output(profile: ClusterProfile) -> None:
    spec = spec_for(profile, "dpo")
    tracking = NEMO_RL.tracking(spec, "26\n")
    assert tracking.log_dir == "~/vertex-oss-training/nemo_rl/26"
    assert tracking.log_names == ("nemo_rl_output.log",)
    assert tracking.checkpoint_dir == "~/vertex-oss-training/nemo_rl/26/checkpoints"
    assert "../slurm-26.out" in tracking.evidence
    assert NEMO_RL.tracking(spec, "27;cluster1\n").job_id == "27"


def test_nemo_rl_interactive_attach(profile: ClusterProfile) -> None:
    spec = LaunchSpec(
        profile=profile, launch_id="L-1", framework="nemo-rl", nodes=1, interactive=True
    )
    tracking = NEMO_RL.found(spec, "26")
    assert tracking.interactive
    assert NEMO_RL.attach_command(tracking) == "bash ~/vertex-oss-training/nemo_rl/26/attach.sh"
    with pytest.raises(ValueError, match="nemo has no interactive jobs"):
        LaunchSpec(profile=profile, launch_id="L-1", framework="nemo", nodes=1, interactive=True)


def test_nemo_rl_retry_resumes_from_the_earlier_checkpoints(profile: ClusterProfile) -> None:
    first = NEMO_RL.found(spec_for(profile, "dpo"), "26")
    overrides = NEMO_RL.retry_overrides((("a.b", "1"),), first, profile)
    assert overrides == (("a.b", "1"), ("checkpointing.checkpoint_dir", "26/checkpoints"))
    retry = NEMO_RL.found(spec_for(profile, "dpo", overrides=overrides), "27")
    assert retry.checkpoint_dir == first.checkpoint_dir
    assert retry.log_dir == "~/vertex-oss-training/nemo_rl/27"
    # NeMo keeps its checkpoints under the experiment name: nothing to change.
    nemo_first = NEMO.found(spec_for(profile, "sft"), "5")
    assert NEMO.retry_overrides((), nemo_first, profile) == ()


@pytest.mark.parametrize(
    ("workload", "image", "line"),
    [
        ("sft", None, 'export NEMORUN_HOME="$HOME"/vertex-oss-training/nemo'),
        (
            "dpo",
            None,
            'export CONTAINER="$HOME"/vertex-oss-training/nemo_rl/nemo_rl-h20260302.sqsh',
        ),
        ("dpo", "~/img/x.sqsh", 'export CONTAINER="$HOME"/img/x.sqsh'),
    ],
)
def test_script_exports_what_the_launcher_reads(
    profile: ClusterProfile, workload: str, image: str | None, line: str
) -> None:
    script = plan_launch(spec_for(profile, workload, image=image)).script()
    assert line in script.splitlines()
    assert script.splitlines().index(line) < len(script.splitlines()) - 1  # before the launcher


def test_checkpoint_rules(tmp_path: Path, profile: ClusterProfile) -> None:
    """Only complete checkpoints count, by each framework's own rule."""
    nemo_dir, rl_dir = tmp_path / "nemo", tmp_path / "rl"
    for name in (
        "model_name=0--val_loss=0.00-step=9-consumed_samples=320.0",
        "model_name=0--val_loss=0.00-step=19-consumed_samples=640.0",
        "model_name=0--val_loss=0.00-step=29-consumed_samples=960.0-last",
    ):
        (nemo_dir / name).mkdir(parents=True)
    (nemo_dir / "model_name=0--val_loss=0.00-step=19-consumed_samples=640.0-unfinished").touch()
    for name in ("step_3", "step_6", "tmp_step_9"):
        (rl_dir / name).mkdir(parents=True)
    nemo = NEMO.tracking(spec_for(profile, "sft"), status_block("1", tmp_path)).model_copy(
        update={"checkpoint_dir": str(nemo_dir)}
    )
    rl = NEMO_RL.found(spec_for(profile, "dpo"), "2").model_copy(
        update={"checkpoint_dir": str(rl_dir)}
    )
    nemo_found = collect_remote.collect_job(nemo.payload(), 4096, 10)["checkpoints"]
    rl_found = collect_remote.collect_job(rl.payload(), 4096, 10)["checkpoints"]
    assert [c["step"] for c in nemo_found] == [9, 29]
    assert [c["name"] for c in rl_found] == ["step_3", "step_6"]
    assert os.path.isdir(nemo_dir)


def test_nemo_rl_jobs_carry_who_launched_them(profile: ClusterProfile) -> None:
    spec = spec_for(profile, "dpo", comment="trainbot L-7f3a9c by U0ALICE")
    argv = [str(a) for a in plan_launch(spec).argv]
    assert argv[argv.index("--comment") + 1] == "trainbot L-7f3a9c by U0ALICE"
    assert argv.index("--comment") < argv.index("launch.sh")  # an sbatch option
    with pytest.raises(ValueError, match="invalid comment"):
        spec_for(profile, "dpo", comment="x; rm -rf ~")


def test_tensorboard_dirs_as_each_framework_prints_them(profile: ClusterProfile) -> None:
    """NeMo names its logger's save_dir (shared by every experiment logged there); NeMo-RL
    names its writer's directory, relative to the submit directory where the job runs."""
    nemo = NEMO.tracking(spec_for(profile, "sft"), "- Job id: 7\n- Local Directory: /e/x_1/x\n")
    assert NEMO.tensorboard_dir("/logs/tb_logs", nemo, "/e/x_1/x") == "/logs/tb_logs/x"
    found = NEMO.found(spec_for(profile, "sft"), "7")  # its directory not yet known
    assert NEMO.tensorboard_dir("/l/tb_logs", found, "") == "/l/tb_logs/llama3p1_8b_sft-L-7f3a9c"
    rl = NEMO_RL.tracking(spec_for(profile, "dpo"), "26\n")
    job_dir = "/home/trainer/vertex-oss-training/nemo_rl/26"
    assert (
        NEMO_RL.tensorboard_dir("logs/exp_001/tensorboard", rl, job_dir)
        == "/home/trainer/vertex-oss-training/nemo_rl/logs/exp_001/tensorboard"
    )
    assert NEMO_RL.tensorboard_dir("/scratch/tb", rl, job_dir) == "/scratch/tb"


STANDINS = Path(__file__).parents[2] / "devcluster/login/vertex-oss-training/_devcluster"


def test_the_nemo_rl_stand_in_names_the_directory_it_writes_events_to(
    profile: ClusterProfile, tmp_path: Path
) -> None:
    """The dev cluster's stand-in (this checkout's copy, run here) with TensorBoard on, as
    NeMo-RL takes it: the directory its log names, resolved as the bot does, holds an event
    file. Run twice in one submit directory, the second run gets its own exp_NNN."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DEVCLUSTER_STEP_TIME_S": "0"}
    env.update(DEVCLUSTER_STEPS="1", DEVCLUSTER_SAVE_TIME_S="0")
    argv = [sys.executable, str(STANDINS / "run_nemo_rl.py"), "dpo"]
    argv.append("logger.tensorboard_enabled=True")
    rl = NEMO_RL.tracking(spec_for(profile, "dpo"), "26\n")
    dirs = []
    for _ in range(2):
        out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        (printed,) = tensorboard_dirs(out.stdout)
        dirs.append(NEMO_RL.tensorboard_dir(printed, rl, str(tmp_path / "26")))
    assert dirs == [str(tmp_path / f"logs/exp_00{n}/tensorboard") for n in (1, 2)]
    for directory in dirs:
        assert [p.name.startswith("events.out.tfevents.") for p in Path(directory).iterdir()] == [
            True
        ]
    quiet = subprocess.run(argv[:-1], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert quiet.returncode == 0 and tensorboard_dirs(quiet.stdout) == []


@pytest.mark.parametrize("workload", ["sft", "grpo"])
def test_launches_export_pythonunbuffered_to_the_job(
    profile: ClusterProfile, workload: str
) -> None:
    """NeMo-RL's drivers and NeMo's ranks print into a file: without PYTHONUNBUFFERED Python
    writes it in 8 KiB blocks, minutes apart. sbatch exports it to the job's processes."""
    spec = spec_for(profile, workload)
    assert spec.fw.script_env(spec)["PYTHONUNBUFFERED"] == "1"


def test_ray_sub_logs_are_looked_for_under_its_base_log_dir(profile: ClusterProfile) -> None:
    """ray.sub writes <BASE_LOG_DIR>/<job id>-logs/ray-driver.log (default: the submit
    directory); a relative or odd BASE_LOG_DIR is not searched."""
    spec = spec_for(profile, "grpo", env={"BASE_LOG_DIR": "/lustre/logs/rl/"})
    globs = NEMO_RL.tracking(spec, "42\n").log_globs
    assert "/lustre/logs/rl/42-logs/ray-driver.log" in globs
    assert "/lustre/logs/rl/42-[0-9]*-logs/ray-driver.log" in globs
    odd = spec_for(profile, "grpo", env={"BASE_LOG_DIR": "logs; rm -rf ~"})
    assert all(g.startswith(spec.work_dir) for g in NEMO_RL.tracking(odd, "42\n").log_globs)
