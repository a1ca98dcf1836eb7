"""The recipe catalog: the default entries, checks on entries, merging."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cluster.launching.recipes import DEFAULT_CATALOG, RecipeCatalog, RecipeEntry


def test_default_catalog_matches_the_recipes_tree() -> None:
    paths = {e.key: e.script_path for e in DEFAULT_CATALOG.entries}
    assert paths[("pretrain", "llama3p1_2b", "nemo")] == "nemo/pretrain/llama3p1_2b_pt.py"
    assert paths[("cpt", "llama3p1_8b", "nemo")] == "nemo/cpt/llama3p1_8b_cpt.py"
    assert paths[("sft", "llama3p1_70b", "nemo")] == "nemo/sft/llama3p1_70b_sft.py"
    for workload in ("sft", "dpo", "grpo", "rm"):
        for model in ("llama3p1_8b", "llama3p1_70b"):
            assert paths[(workload, model, "nemo-rl")] == f"nemo_rl/algorithms/{workload}.sh"
    for workload in ("pretrain", "cpt", "sft", "peft"):
        for model in ("llama3p1_8b", "llama3p1_70b"):
            assert paths[(workload, model, "megatron-bridge")] == "megatron_bridge/run_recipe.py"
    assert len(DEFAULT_CATALOG.entries) == 9 + 8 + 8


def test_default_catalog_lookups() -> None:
    assert DEFAULT_CATALOG.frameworks("sft", "llama3p1_8b") == [
        "nemo",
        "nemo-rl",
        "megatron-bridge",
    ]
    assert DEFAULT_CATALOG.models("dpo") == ["llama3p1_8b", "llama3p1_70b"]
    entry = DEFAULT_CATALOG.find("dpo", "llama3p1_70b", "nemo-rl")
    assert entry is not None
    assert entry.args == ("policy.model_name=meta-llama/Llama-3.1-70B-Instruct",)
    assert DEFAULT_CATALOG.find("dpo", "llama3p1_2b", "nemo-rl") is None


def test_every_default_entry_has_pattern_checked_overrides() -> None:
    for entry in DEFAULT_CATALOG.entries:
        assert entry.overrides
    grpo = DEFAULT_CATALOG.find("grpo", "llama3p1_8b", "nemo-rl")
    assert grpo is not None
    assert grpo.check_override("grpo.num_prompts_per_step", "64")
    assert not grpo.check_override("grpo.num_prompts_per_step", "64;id")
    assert not grpo.check_override("grpo.num_prompts_per_step", "")
    assert not grpo.check_override("trainer.max_steps", "10")
    assert grpo.check_override("logger.wandb_enabled", "False")
    assert grpo.check_override("logger.tensorboard_enabled", "True")  # NeMo-RL: off by default


def test_override_values_need_safe_characters_whatever_the_pattern() -> None:
    entry = RecipeEntry(
        workload="sft", model="m", framework="nemo", script="s.py", overrides={"a.b": ".*"}
    )
    assert entry.check_override("a.b", "x-1")
    assert not entry.check_override("a.b", "x 1")
    assert not entry.check_override("a.b", "$(id)")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"framework": "nemo"}, "a nemo recipe needs 'script'"),
        ({"framework": "nemo-rl", "script": "a.py"}, "a nemo-rl recipe needs 'job_script'"),
        ({"framework": "nemo", "script": "../a.py"}, "must be a relative path"),
        ({"framework": "nemo", "script": "/abs/a.py"}, "must be a relative path"),
        ({"framework": "nemo", "script": "a b.py"}, "must be a relative path"),
        ({"framework": "nemo", "script": "a.py", "args": ["x;y"]}, "must be one word"),
        ({"framework": "nemo", "script": "a.py", "overrides": {"a": "[0-"}}, "regular expression"),
        ({"framework": "nemo", "script": "a.py", "overrides": {"A B": "x"}}, "String should match"),
        ({"framework": "nemo", "script": "a.py", "model": "Llama"}, "String should match"),
        (
            {"framework": "jax", "script": "a.py"},
            "unknown framework 'jax'; known: nemo, nemo-rl, megatron-bridge",
        ),
        (
            {"framework": "nemo", "workload": "ppo", "script": "a.py"},
            "unknown workload 'ppo'; known: pretrain, cpt, sft, dpo, grpo, rm, peft",
        ),
        (
            {"framework": "nemo", "workload": "rm", "script": "a.py"},
            "nemo does not run rm; it runs pretrain, cpt, sft",
        ),
    ],
)
def test_bad_entries(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RecipeEntry.model_validate({"workload": "sft", "model": "m", **fields})
    assert message in str(caught.value)


def test_merge_replaces_and_adds() -> None:
    replacement = RecipeEntry(
        workload="sft", model="llama3p1_8b", framework="nemo", script="sft/mine.py"
    )
    extra = RecipeEntry(workload="sft", model="mistral_7b", framework="nemo", script="sft/m.py")
    merged = DEFAULT_CATALOG.merged([replacement, extra])
    assert merged.find("sft", "llama3p1_8b", "nemo") == replacement
    assert merged.entries[-1] == extra
    assert len(merged.entries) == len(DEFAULT_CATALOG.entries) + 1


def test_duplicates_are_refused() -> None:
    entry = RecipeEntry(workload="sft", model="m", framework="nemo", script="a.py")
    with pytest.raises(ValidationError, match="duplicate recipe sft m"):
        RecipeCatalog(entries=(entry, entry))
