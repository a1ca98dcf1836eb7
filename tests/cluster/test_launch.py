"""Launch specs, plans and the NeMo/NeMo-RL builders and parsers (pure: no cluster)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from pydantic import SecretStr

from cluster.launching.launch import plan_launch
from cluster.launching.recipes import DEFAULT_CATALOG
from cluster.launching.spec import LaunchSpec
from cluster.site.profiles import ClusterProfile
from cluster.ssh.remote import quote_path

DATA = Path(__file__).parent / "data"


@pytest.fixture
def profile() -> ClusterProfile:
    return ClusterProfile(
        name="a4",
        type="hcc-a4",
        login={"host": "127.0.0.1", "port": 2222, "user": "trainer"},
        partition="a4",
        max_nodes=4,
        time_limit="01:00:00",
        job_secrets={"HF_TOKEN": {"env": "TB_HF"}, "WANDB_API_KEY": {"file": "~/.config/wandb"}},
    )


@pytest.mark.parametrize(
    ("path", "quoted"),
    [
        ("~", '"$HOME"'),
        ("~/x", '"$HOME"/x'),
        ("~/a b/$(id)", "\"$HOME\"/'a b/$(id)'"),
        ("/abs/path", "/abs/path"),
        ("/tmp/`id`", "'/tmp/`id`'"),
        ("~root/x", "'~root/x'"),
    ],
)
def test_quote_path(path: str, quoted: str) -> None:
    assert quote_path(path) == quoted


def test_nemo_plan_command_line(profile: ClusterProfile) -> None:
    recipe = DEFAULT_CATALOG.find("sft", "llama3p1_8b", "nemo")
    assert recipe is not None
    spec = LaunchSpec.from_recipe(
        profile, recipe, launch_id="L-7f3a9c", nodes=2, name="mine",
        overrides=(("trainer.max_steps", "5"),),
    )  # fmt: skip
    plan = plan_launch(spec)
    words = shlex.split(plan.command_line)
    assert words[:4] == ["python3", "run.py", "-e", "slurm"]
    assert words[words.index("--experiment-name") + 1] == "mine-L-7f3a9c"
    assert words[words.index("-s") + 1] == "sft/llama3p1_8b_sft.py"
    assert words[words.index("--partition") + 1] == "a4"
    assert words[words.index("-t") + 1] == "01:00:00"
    assert words[-2:] == ["--", "trainer.max_steps=5"]
    assert '-d "$HOME"/vertex-oss-training/nemo' in plan.command_line
    script = plan.script()
    assert 'export NEMORUN_HOME="$HOME"/vertex-oss-training/nemo' in script
    assert 'cd "$HOME"/vertex-oss-training/nemo\n' in script


def test_nemo_rl_plan_and_secrets(profile: ClusterProfile) -> None:
    recipe = DEFAULT_CATALOG.find("dpo", "llama3p1_8b", "nemo-rl")
    assert recipe is not None
    secrets = {"HF_TOKEN": SecretStr("hf_s3cr3t'; rm -rf /")}
    spec = LaunchSpec.from_recipe(
        profile, recipe, launch_id="L-1", nodes=2, partition="a3m", secrets=secrets
    )
    plan = plan_launch(spec)
    words = shlex.split(plan.command_line)
    assert words[:6] == ["sbatch", "--parsable", "-N", "2", "-p", "a3m"]
    assert words[words.index("-J") + 1] == "dpo-L-1"
    assert words[words.index("--job_script") + 1] == "algorithms/dpo.sh"
    assert "policy.model_name=meta-llama/Llama-3.1-8B-Instruct" in words
    shown = plan.script()
    assert "hf_s3cr3t" not in shown and "HF_TOKEN='<redacted>'" in shown
    real = plan.script(redact=False)
    assert "export HF_TOKEN='hf_s3cr3t'\"'\"'; rm -rf /'" in real
    assert 'export WANDB_API_KEY="$(cat "$HOME"/.config/wandb)"' in real
    assert "hf_s3cr3t" not in plan.command_line and "hf_s3cr3t" not in repr(spec)


def test_interactive_plan(profile: ClusterProfile) -> None:
    spec = LaunchSpec(
        profile=profile, launch_id="L-2", framework="nemo-rl", nodes=1, interactive=True
    )
    words = shlex.split(plan_launch(spec).command_line)
    assert "--interactive" in words and "--job_script" not in words
    assert words[words.index("-J") + 1] == "interactive-L-2"


@pytest.mark.parametrize(
    "field",
    [
        {"launch_id": "L-1;id"},
        {"launch_id": "L 1"},
        {"name": "$(touch /tmp/x)"},
        {"name": "a\nb"},
        {"partition": "a4;touch /tmp/x"},
        {"partition": "`id`"},
        {"time_limit": "1:00:00; id"},
        {"image": "/tmp/$(id).sqsh"},
        {"script": "../etc/passwd"},
        {"overrides": (("trainer.max_steps", "$(id)"),)},
        {"overrides": (("x;y", "1"),)},
        {"args": ("--foo=`id`",)},
        {"nodes": 0},
    ],
)
def test_spec_refuses_hostile_values(profile: ClusterProfile, field: dict[str, object]) -> None:
    values: dict[str, object] = {
        "profile": profile, "launch_id": "L-1", "framework": "nemo", "nodes": 1,
        "script": "sft/llama3p1_8b_sft.py",
    }  # fmt: skip
    values.update(field)
    with pytest.raises(ValueError):
        LaunchSpec(**values)  # type: ignore[arg-type]


def test_image_name_or_path(profile: ClusterProfile) -> None:
    base = {"profile": profile, "launch_id": "L-1", "framework": "nemo", "nodes": 1}
    spec = LaunchSpec(**base, script="sft/a.py")  # type: ignore[arg-type]
    assert spec.image_path == "~/vertex-oss-training/nemo/nemo-20250721.sqsh"
    spec = LaunchSpec(**base, script="sft/a.py", image="~/img/x.sqsh")  # type: ignore[arg-type]
    assert spec.image_path == "~/img/x.sqsh"
