"""What a site's run.py accepts (read from its --help), and the NeMo plan fitted to it;
the auth-file scan of the pre-flight probe (pure: no cluster)."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.launching.launch import plan_launch
from cluster.launching.spec import LaunchSpec
from cluster.preflight.checks import evaluate_preflight, preflight_payload
from cluster.preflight.probe_remote import main as probe
from cluster.site.launcher_options import LauncherOptions, parse_help
from cluster.site.profiles import ClusterProfile

PROJECT = Path(__file__).resolve().parents[2]
STANDIN_RUN_PY = PROJECT / "devcluster/login/vertex-oss-training/nemo/run.py"
GUIDE = ("-e", "--slurm-type", "--partition", "-d", "-i", "-s", "-n", "--experiment-name")


@pytest.fixture
def profile() -> ClusterProfile:
    return ClusterProfile(
        name="a4", type="hcc-a4", login={"host": "127.0.0.1", "user": "trainer"},
        partition="a4", max_nodes=4, time_limit="01:00:00", account="research",
    )  # fmt: skip


def site_help(*flags: str, overrides: bool = True) -> str:
    """The help argparse itself prints for a run.py with the guide's flags and ``flags``."""
    parser = argparse.ArgumentParser(prog="run.py")
    for flag in (*GUIDE, *flags):
        parser.add_argument(flag)
    if overrides:
        parser.add_argument("overrides", nargs="*")
    return parser.format_help()


def test_the_dev_clusters_run_py_help_lists_every_flag_and_the_overrides() -> None:
    done = subprocess.run(
        [sys.executable, str(STANDIN_RUN_PY), "--help"], capture_output=True, text=True, check=True
    )
    options = parse_help(done.stdout)
    assert options is not None and options.positionals
    for flag in (*GUIDE, "--log-dir", "--cache-dir", "--data-dir", "-t", "--account", "--exclude"):
        assert flag in options.flags, flag
    assert "--time" in options.flags and "-h" in options.flags
    assert not any(f.startswith("-a3") for f in options.flags)  # {hcc-a3h,...} are no flags


def test_a_run_py_without_some_flags_and_no_overrides() -> None:
    options = parse_help(site_help("--log-dir", overrides=False))
    assert options == LauncherOptions(frozenset({"-h", "--help", *GUIDE, "--log-dir"}), False)
    pre_310 = site_help().replace("\noptions:\n", "\noptional arguments:\n")
    assert parse_help(pre_310) == parse_help(site_help())  # the heading before Python 3.10
    assert parse_help("Traceback (most recent call last):\nImportError: nemo_run") is None
    assert LauncherOptions.decode(options.encode()) == options
    assert LauncherOptions.decode("not json") is None


def test_the_plan_leaves_out_what_run_py_lacks_and_says_how_it_does_without(
    profile: ClusterProfile,
) -> None:
    options = parse_help(site_help("--log-dir", "--cache-dir"))
    spec = LaunchSpec(
        profile=profile, launch_id="L-fit1", framework="nemo", nodes=2,
        script="sft/llama3p1_8b_sft.py", exclude="dev3", launcher=options,
    )  # fmt: skip
    plan = plan_launch(spec)
    words = plan.command_line.split()
    for flag in ("-t", "--account", "--exclude", "--data-dir"):
        assert flag not in words, flag
    assert "--log-dir" in words and "--cache-dir" in words and "--experiment-name" in words
    script = plan.script()
    assert "export SBATCH_TIMELIMIT=01:00:00" in script
    assert "export SBATCH_ACCOUNT=research" in script
    assert spec.fw.slurm_updates(spec) == {"ExcNodeList": "dev3"}
    notes = spec.fw.launcher_notes(spec)
    assert notes[0] == "run.py on a4 has no --data-dir: the job runs without ~/data mounted"
    assert [n.split(":")[0] for n in notes[1:]] == [
        "run.py on a4 has no -t",
        "run.py on a4 has no --account",
        "run.py on a4 has no --exclude",
    ]
    assert spec.fw.launcher_problems(spec) == []
    assert "mount data_dir" not in spec.fw.preflight_mounts(spec)  # not mounted: not needed
    # With every flag (or nothing known of run.py) everything goes, as before.
    every = ("-t", "--account", "--exclude", "--log-dir", "--cache-dir", "--data-dir")
    full = dataclasses.replace(spec, launcher=parse_help(site_help(*every)))
    unknown = dataclasses.replace(spec, launcher=None)
    assert plan_launch(full).command_line == plan_launch(unknown).command_line
    assert "SBATCH_" not in plan_launch(full).script()
    assert full.fw.launcher_notes(full) == [] and full.fw.slurm_updates(full) == {}


def test_overrides_run_py_cannot_take_are_refused(profile: ClusterProfile) -> None:
    spec = LaunchSpec(
        profile=profile, launch_id="L-fit2", framework="nemo", nodes=1,
        script="sft/llama3p1_8b_sft.py", overrides=(("trainer.max_steps", "5"),),
        launcher=parse_help(site_help("-t", overrides=False)),
    )  # fmt: skip
    [problem] = spec.fw.launcher_problems(spec)
    assert problem.startswith("run.py on a4 takes no recipe overrides")
    assert "trainer.max_steps=5 cannot be applied" in problem
    bare = dataclasses.replace(spec, launcher=LauncherOptions(frozenset({"-e"}), True))
    [problem] = bare.fw.launcher_problems(bare)
    assert "has no --slurm-type, --partition, -d, -i, -s, -n, --experiment-name" in problem


def test_preflight_reads_the_help_in_its_round_trip_only_while_it_is_unknown(
    profile: ClusterProfile,
) -> None:
    spec = LaunchSpec(
        profile=profile, launch_id="L-fit3", framework="nemo", nodes=1,
        script="sft/llama3p1_8b_sft.py",
    )  # fmt: skip
    assert preflight_payload(spec)["help"] == {
        "cwd": "~/vertex-oss-training/nemo",
        "argv": ["python3", "run.py", "--help"],
        "timeout_s": 15.0,
    }
    raw = {"help": {"rc": 0, "stdout": site_help("--log-dir", "--cache-dir")}, "dirs": {}}
    result = evaluate_preflight(spec, raw)
    assert result.launcher is not None and "--data-dir" not in result.launcher.flags
    assert "run.py on a4 has no --data-dir: the job runs without ~/data mounted" in result.notes
    known = dataclasses.replace(spec, launcher=result.launcher)
    assert "help" not in preflight_payload(known)
    assert set(preflight_payload(known)["dirs"]) == {"mount log_dir", "mount cache_dir"}


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("export HF_TOKEN=hf_abc\n", [1]),
        ("# export HF_TOKEN=hf_abc\nexport HF_TOKEN=${HF_TOKEN:-hf_abc}\n", []),
        ('export HF_TOKEN="${HF_TOKEN:-hf abc}"\nHF_TOKEN=$HF_TOKEN\n', []),
        ('HF_TOKEN="hf_abc"; export HF_TOKEN\n', [1]),
        ("export A=1 HF_TOKEN=hf_abc\n", [1]),
        ("unset HF_TOKEN\n", [1]),
        ("export HF_TOKENS=x\nexport MY_HF_TOKEN=x\n", []),
        ("export HF_TOKEN=${OTHER:-x}\n", [1]),
    ],
)
def test_the_probe_finds_lines_that_replace_an_exported_secret(
    tmp_path: Path, text: str, lines: list[int]
) -> None:
    auth = tmp_path / "auth.sh"
    auth.write_text(text)
    out = probe({"assigns": {"path": str(auth), "names": ["HF_TOKEN"]}})
    assert out["assigns"] == {
        "exists": True,
        "lines": [{"name": "HF_TOKEN", "line": n} for n in lines],
    }
    assert "hf_abc" not in str(out) and "hf abc" not in str(out)  # numbers only, no value


def test_the_newer_nemo_rl_image_name_is_accepted(profile: ClusterProfile) -> None:
    newer = "~/vertex-oss-training/nemo_rl/nemo_rl-h20260302.sqsh"
    body = profile.model_dump()
    body["images"] = {"nemo-rl": newer}
    configured = ClusterProfile(**body)
    assert configured.image_for("nemo-rl") == newer
    assert configured.image_for("nemo").endswith("/nemo/nemo-20250721.sqsh")
    spec = LaunchSpec(
        profile=profile, launch_id="L-img1", framework="nemo-rl", nodes=1,
        script="algorithms/dpo.sh", image=newer,
    )  # fmt: skip
    assert f'export CONTAINER="$HOME"/{newer[2:]}' in plan_launch(spec).script()


def test_a_missing_default_image_names_the_release_that_is_there(profile: ClusterProfile) -> None:
    spec = LaunchSpec(
        profile=profile, launch_id="L-img2", framework="nemo-rl", nodes=1,
        script="algorithms/dpo.sh",
    )  # fmt: skip
    raw = {
        "files": {"launcher": True, "recipe": True},
        "images": ["nemo_rl/nemo_rl-h20250923.sqsh"],
    }
    [failed] = [c for c in evaluate_preflight(spec, raw).failures if c.name == "image"]
    newer = "~/vertex-oss-training/nemo_rl/nemo_rl-h20250923.sqsh"
    assert failed.message == (
        "Image ~/vertex-oss-training/nemo_rl/nemo_rl-h20260302.sqsh does not exist on a4. "
        "Images in the recipes dir: nemo_rl/nemo_rl-h20250923.sqsh. "
        f"Use one with image={newer}, or name it in the cluster's config "
        f"(images: {{nemo-rl: {newer}}})."
    )
