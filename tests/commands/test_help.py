"""Help and recipe text."""

from __future__ import annotations

import pytest

from commands import CommandContext, help_text, recipes_text
from commands.request_fields import HELP_TOPICS


def test_overview_lists_every_command_and_the_clusters(context: CommandContext) -> None:
    text = help_text(context)
    for usage in ("/train <workload> <model> [key=value ...]", "/attach <job>", "/jobs [all]"):
        assert usage in text
    assert "Clusters: a3m, a3u, a4, a3h (default a3m)." in text


@pytest.mark.parametrize("topic", HELP_TOPICS)
def test_every_topic_has_help(context: CommandContext, topic: str) -> None:
    text = help_text(context, topic)  # type: ignore[arg-type]
    assert text.startswith("`/")
    assert "{" not in text.replace("{default}", "")


def test_train_help_names_every_key(context: CommandContext) -> None:
    text = help_text(context, "train")
    for key in ("cluster=", "nodes=", "partition=", "time=", "name=", "image=", "dry_run="):
        assert key in text
    assert "framework=F" in text


def test_recipes_lists_scripts_and_overrides(context: CommandContext) -> None:
    text = recipes_text(context)
    assert "  llama3p1_8b (nemo: nemo/sft/llama3p1_8b_sft.py) overrides: trainer.max_steps" in text
    assert "  llama3p1_8b (nemo-rl: nemo_rl/algorithms/dpo.sh)" in text
    assert "*grpo*" in text


def test_recipes_filtered_by_workload(context: CommandContext) -> None:
    text = recipes_text(context, "rm")
    assert "*rm*" in text and "*sft*" not in text


def test_train_help_names_at_and_after(context: CommandContext) -> None:
    text = help_text(context, "train")
    assert 'at="tomorrow 06:30"' in text and "at=2026-12-24T08:00" in text
    assert "after=J[:ok|:any]" in text
    assert "at, after" in help_text(context, "interactive")


def test_train_help_names_frameworks_images_and_the_megatron_bridge_recipes(
    context: CommandContext,
) -> None:
    text = help_text(context, "train")
    assert "  megatron-bridge  Megatron-Bridge: nvcr.io/nvidia/nemo:26.02" in text
    assert "  nemo-rl          NeMo-RL: nemo_rl-h20260302.sqsh" in text
    assert (
        "  llama3p1_8b: pretrain llama31_8b_pretrain_config, cpt llama31_8b_pretrain_config, "
        "sft llama31_8b_sft_config, peft llama31_8b_peft_config"
    ) in text
    assert "A site adds its own recipe under recipes: in trainbot.yaml" in text
    assert "registry\n                   reference (nvcr.io/nvidia/nemo:26.02" in text
    peft = recipes_text(context, "peft")
    assert "  llama3p1_70b (megatron-bridge: llama31_70b_peft_config) overrides:" in peft
