"""cluster.launching.after_training: where an export goes, the job that runs it (and the site's
evaluation), and what the tools printed, read back."""

from __future__ import annotations

import shlex

import pytest
from pydantic import SecretStr, ValidationError

from cluster.launching.after_training import (
    EvalRow,
    eval_line,
    parse_exported,
    parse_results_table,
    plan_step,
    read_outcome,
    step_script,
)
from cluster.launching.recipes import DEFAULT_CATALOG
from cluster.launching.spec import LaunchSpec
from tests.cluster.test_megatron_bridge import profile, spec

CKPTS = "~/vertex-oss-training/megatron_bridge/experiments/run-L-7f3a9c/checkpoints"

# lm-evaluation-harness 0.4's make_table, as lm_eval prints it at the end
LM_EVAL = """\
2026-12-05:11:20:01 INFO [evaluator.py:305] arc_easy: Using gen_kwargs: None
hf (pretrained=/runs/hf/iter_0000010), gen_kwargs: (None), limit: None, num_fewshot: None, batch_size: auto
|  Tasks  |Version|Filter|n-shot| Metric |   |Value |   |Stderr|
|---------|------:|------|-----:|--------|---|-----:|---|-----:|
|arc_easy |      1|none  |     0|acc     |↑  |0.7660|±  |0.0087|
|         |       |none  |     0|acc_norm|↑  |0.7416|±  |0.0090|
| - anatomy|      1|none  |     0|acc     |↑  |0.5000|±  |   N/A|
|hellaswag|      1|none  |     0|acc     |↑  |0.6012|±  |0.0049|

| Groups |Version|Filter|n-shot|Metric|   |Value |   |Stderr|
|--------|------:|------|------|------|---|-----:|---|-----:|
|mmlu    |      2|none  |      |acc   |↑  |0.6000|±  |0.0039|
"""  # noqa: E501


def test_the_export_goes_beside_the_checkpoints() -> None:
    plan = plan_step(CKPTS, "iter_0000010", ("arc_easy",))
    run = CKPTS.rsplit("/", 1)[0]
    assert plan.checkpoint == f"{CKPTS}/iter_0000010"
    assert plan.hf_dir == f"{run}/hf/iter_0000010"
    assert plan.log_path("4187") == f"{run}/hf/after-4187.out"
    assert plan.eval_dir == f"{run}/hf/eval-iter_0000010"
    assert plan_step(CKPTS, "iter_0000010").eval_dir == ""


def test_the_step_is_one_node_in_the_launchs_container_with_the_frameworks_converter() -> None:
    site = profile(eval_command="lm_eval --model_args pretrained={model} --tasks {tasks}")
    plan = plan_step(CKPTS, "iter_0000010", ("arc_easy", "hellaswag"))
    script = step_script(spec(profile=site), plan, model="llama3p1_8b", job_name="run-eval")
    assert script.startswith("set -euo pipefail\n")
    submit = script[script.index("sbatch ") :]
    assert submit.startswith("sbatch --parsable --job-name=run-eval -N 1 -p a4 -t 02:00:00 ")
    assert '--output="$HOME"/vertex-oss-training/megatron_bridge/experiments/' in submit
    assert "--comment=" not in submit  # the spec has none here
    # the converter: the site's copy of Megatron-Bridge's convert_checkpoints.py, in the container
    assert '--container-image="$CONTAINER_IMAGE"' in submit
    wrap = next(w for w in shlex.split(submit) if w.startswith("--wrap="))
    assert "export CONTAINER_IMAGE='nvcr.io#nvidia/nemo:26.02'\n" in wrap  # as pyxis takes it
    assert (
        "megatron_bridge/convert_checkpoints.py export --hf-model meta-llama/Llama-3.1-8B "
        "--megatron-path " in submit
    )
    assert "lm_eval --model_args pretrained=" in submit and "--tasks arc_easy,hellaswag" in submit


def test_export_only_runs_no_evaluation() -> None:
    plan = plan_step(CKPTS, "iter_0000010")
    script = step_script(spec(), plan, model="llama3p1_8b", job_name="run-export")
    assert "convert_checkpoints.py export" in script and "evaluate" not in script


def test_the_eval_command_is_filled_in_quoted() -> None:
    plan = plan_step("/runs/x/checkpoints", "iter_1", ("a", "b"))
    line = eval_line("lm_eval pretrained={model} --tasks {tasks} --output_path {output}", plan)
    assert (
        line
        == "lm_eval pretrained=/runs/x/hf/iter_1 --tasks a,b --output_path /runs/x/hf/eval-iter_1"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lm_eval --tasks {tasks}", "must name {model}"),
        ("lm_eval {model} {secret}", "unknown placeholder {secret}"),
        ("lm_eval {model}\nrm -rf /", "must be one line"),
        ("lm_eval {model", "not a template"),
    ],
)
def test_a_bad_eval_command_is_refused_with_what_is_right(value: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        profile(eval_command=value)
    assert message in str(caught.value)


def test_the_results_table_is_read_row_by_row_without_the_groups() -> None:
    rows = parse_results_table(LM_EVAL)
    assert rows == (
        EvalRow("arc_easy", "acc", 0.766, 0.0087),
        EvalRow("arc_easy", "acc_norm", 0.7416, 0.009),
        EvalRow("anatomy", "acc", 0.5, None),
        EvalRow("hellaswag", "acc", 0.6012, 0.0049),
    )


def test_what_the_converter_said() -> None:
    out = (
        "💾 Saving HuggingFace model to: /r/hf/iter_1\n"
        "✅ Successfully exported model to: /r/hf/iter_1\n"
    )
    assert parse_exported(out) == "/r/hf/iter_1"
    assert parse_exported("Traceback ...\nRuntimeError: CUDA out of memory") == ""
    assert read_outcome(out + LM_EVAL).exported_to == "/r/hf/iter_1"
    assert read_outcome("nothing").results == ()


def test_what_nemo_and_nemo_rl_said() -> None:
    # NeMo 2's export_ckpt prints through rich, which folds a long path at 80 columns in a
    # log file: the path moves to the next line and goes on over the lines after it
    path = "/home/alice/vertex-oss-training/nemo/logs/sft-L-7f3a9c/default/hf/" + (
        "model_name=0--val_loss=0.00-step=9-consumed_samples=80.0"
    )
    folded = "\n".join([path[:80], path[80:]])
    nemo = f"Launching export...\n✓ Checkpoint exported to \n{folded}\ntrainbot: evaluate a\n"
    assert parse_exported(nemo) == path
    assert parse_exported("✓ Checkpoint exported to /r/hf/x\n/another\n") == "/r/hf/x"
    assert parse_exported("✓ Checkpoint exported to \n\n") == ""
    rl = "HF_TOKEN is not set\nSaved HF checkpoint to: /r/hf/step_4\n"
    assert parse_exported(rl) == "/r/hf/step_4"


def framework_spec(framework: str, **fields: object) -> LaunchSpec:
    recipe = DEFAULT_CATALOG.find("sft", "llama3p1_8b", framework)
    assert recipe is not None
    return LaunchSpec.from_recipe(profile(), recipe, launch_id="L-7f3a9c", nodes=1, **fields)  # type: ignore[arg-type]


def test_nemo_exports_with_nemo_llm_export() -> None:
    ckpts = "~/vertex-oss-training/nemo/logs/sft-L-7f3a9c/default/checkpoints"
    plan = plan_step(ckpts, "model_name=0--val_loss=0.00-step=9-consumed_samples=80.0")
    script = step_script(framework_spec("nemo"), plan, model="llama3p1_8b", job_name="x")
    wrap = next(
        w for w in shlex.split(script[script.index("sbatch ") :]) if w.startswith("--wrap=")
    )
    home = '"$HOME"/vertex-oss-training/nemo/logs/sft-L-7f3a9c/default'
    name = "model_name=0--val_loss=0.00-step=9-consumed_samples=80.0"
    assert wrap.endswith(
        f'\nsrun --ntasks=1 "$@" nemo llm export -y path={home}/checkpoints/{name} target=hf '
        f"output_path={home}/hf/{name}"
    )


def test_nemo_rl_exports_with_its_dcp_converter_and_sources_its_auth_file() -> None:
    ckpts = "/home/bob/vertex-oss-training/nemo_rl/4187/checkpoints"
    plan = plan_step(ckpts, "step_40")
    script = step_script(framework_spec("nemo-rl"), plan, model="llama3p1_8b", job_name="x")
    wrap = next(
        w for w in shlex.split(script[script.index("sbatch ") :]) if w.startswith("--wrap=")
    )
    assert (
        'srun --ntasks=1 "$@" python3 "$HOME"/vertex-oss-training/nemo_rl/examples/converters/'
        f"convert_dcp_to_hf.py --config {ckpts}/step_40/config.yaml --dcp-ckpt-path "
        f"{ckpts}/step_40/policy/weights --hf-ckpt-path /home/bob/vertex-oss-training/nemo_rl/"
        "4187/hf/step_40"
    ) in wrap
    auth = '"$HOME"/vertex-oss-training/nemo_rl/configs/auth.sh'
    assert f"if [ -f {auth} ]; then . {auth}; fi" in wrap  # as launch.sh does, in the job


def test_the_jobs_secrets_are_exported_before_sbatch_never_in_its_arguments() -> None:
    secret = SecretStr("hf_value_not_to_be_seen")
    spec = framework_spec("nemo", secrets={"HF_TOKEN": secret})
    spec = LaunchSpec(**{**spec.__dict__, "profile": profile(job_secrets={
        "HF_TOKEN": {"env": "TRAINBOT_HF_TOKEN"},
        "WANDB_API_KEY": {"file": "~/.config/trainbot/wandb"},
    })})  # fmt: skip
    plan = plan_step("/runs/x/checkpoints", "model_name=0--step=1")
    shown = step_script(spec, plan, model="llama3p1_8b", job_name="x")
    sent = step_script(spec, plan, model="llama3p1_8b", job_name="x", redact=False)
    assert "hf_value_not_to_be_seen" not in shown and "export HF_TOKEN='<redacted>'" in shown
    lines = sent.splitlines()
    assert "export HF_TOKEN=hf_value_not_to_be_seen" in lines
    assert 'export WANDB_API_KEY="$(cat "$HOME"/.config/trainbot/wandb)"' in lines
    assert lines.index("export HF_TOKEN=hf_value_not_to_be_seen") < len(lines) - 1
    assert "hf_value_not_to_be_seen" not in lines[-1]  # the sbatch line and its --wrap
