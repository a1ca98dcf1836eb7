"""/train: every accepted form, and every class of error with its text."""

from __future__ import annotations

import pytest

from commands import (
    CommandContext,
    CommandError,
    HelpRequest,
    InteractiveRequest,
    RecipesRequest,
    TrainRequest,
    User,
)
from commands.parse import parse_args
from tests.commands.lines import parse_line

ACCEPTED = [
    (
        "/train sft llama3p1_8b nodes=2 cluster=a4",
        TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4", nodes=2),
    ),
    (
        "/train pretrain llama3p1_2b",
        TrainRequest(workload="pretrain", model="llama3p1_2b", framework="nemo", cluster="a3m"),
    ),
    (
        "/train cpt llama3p1_70b cluster=A3H time=90",
        TrainRequest(
            workload="cpt", model="llama3p1_70b", framework="nemo", cluster="a3h", time="90"
        ),
    ),
    (
        "/train sft llama3p1_8b framework=nemo-rl",
        TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo-rl", cluster="a3m"),
    ),
    (
        "/train sft llama3p1_8b framework=nemo_rl",
        TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo-rl", cluster="a3m"),
    ),
    (
        "/train dpo llama3p1_8b policy.max_total_sequence_length=4096 dry_run=yes",
        TrainRequest(
            workload="dpo",
            model="llama3p1_8b",
            framework="nemo-rl",
            cluster="a3m",
            dry_run=True,
            overrides=(("policy.max_total_sequence_length", "4096"),),
        ),
    ),
    (
        "/train grpo llama3p1_70b grpo.num_prompts_per_step=64 logger.wandb_enabled=False "
        "nodes=4 dry_run=0",
        TrainRequest(
            workload="grpo",
            model="llama3p1_70b",
            framework="nemo-rl",
            cluster="a3m",
            nodes=4,
            overrides=(("grpo.num_prompts_per_step", "64"), ("logger.wandb_enabled", "False")),
        ),
    ),
    (
        "/train rm llama3p1_8b partition=a4 time=1-02:00:00 name=rm-try_2 image=nemo-rl",
        TrainRequest(
            workload="rm",
            model="llama3p1_8b",
            framework="nemo-rl",
            cluster="a3m",
            partition="a4",
            time="1-02:00:00",
            name="rm-try_2",
            image="nemo-rl",
        ),
    ),
    (
        "/train sft llama3p1_8b image=/gcs/vmds-containers-us/nemo-20250721.sqsh",
        TrainRequest(
            workload="sft",
            model="llama3p1_8b",
            framework="nemo",
            cluster="a3m",
            image="/gcs/vmds-containers-us/nemo-20250721.sqsh",
        ),
    ),
    (
        '/train SFT Llama3p1_8B Nodes=2 name="run-1" trainer.max_steps=100',
        TrainRequest(
            workload="sft",
            model="llama3p1_8b",
            framework="nemo",
            cluster="a3m",
            nodes=2,
            name="run-1",
            overrides=(("trainer.max_steps", "100"),),
        ),
    ),
    (
        "/train sft llama3p1_8b nodes=2 cluster=a4 time=04:00:00",
        TrainRequest(
            workload="sft",
            model="llama3p1_8b",
            framework="nemo",
            cluster="a4",
            nodes=2,
            time="04:00:00",
        ),
    ),
    ("/train interactive", InteractiveRequest(cluster="a3m")),
    (
        "/train interactive nodes=2 cluster=a4 time=30",
        InteractiveRequest(cluster="a4", nodes=2, time="30"),
    ),
    ("/train", HelpRequest()),
    ("/train help", HelpRequest()),
    ("/train help logs", HelpRequest(topic="logs")),
    ("/train help /attach", HelpRequest(topic="attach")),
    ("/train recipes", RecipesRequest()),
    ("/train recipes grpo", RecipesRequest(workload="grpo")),
    # Unicode look-alikes are read as plain text (NFKC), smart quotes as quotes.
    (
        "/train ｓｆｔ llama3p1_8b ｎｏｄｅｓ＝２",
        TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a3m", nodes=2),
    ),
    (
        "/train sft llama3p1_8b name=“run-2”",
        TrainRequest(
            workload="sft", model="llama3p1_8b", framework="nemo", cluster="a3m", name="run-2"
        ),
    ),
]


@pytest.mark.parametrize(("line", "expected"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted(parse, line: str, expected: object) -> None:  # type: ignore[no-untyped-def]
    assert parse(line) == expected


REJECTED = [
    # unknown names, with the closest valid one
    (
        "/train sft llama3p1_8b cluster=a5",
        "Unknown cluster 'a5'. Known clusters: a3m, a3u, a4, a3h. Did you mean a4?",
    ),
    (
        "/train sfft llama3p1_8b",
        "Unknown workload 'sfft'. Workloads: pretrain, cpt, sft, dpo, grpo, rm, peft; "
        "or /train interactive | help | recipes. Did you mean sft?",
    ),
    (
        "/train sft llama3p1_9b",
        "Unknown model 'llama3p1_9b' for sft. Models for sft: llama3p1_2b, llama3p1_8b, "
        "llama3p1_70b. Did you mean llama3p1_8b?",
    ),
    (
        "/train sft",
        "Which model? Usage: /train sft <model> [key=value ...]. Models for sft: "
        "llama3p1_2b, llama3p1_8b, llama3p1_70b.",
    ),
    (
        "/train sft llama3p1_8b nodez=2",
        "Unknown key 'nodez' for sft llama3p1_8b. Keys: cluster, nodes, partition, time, "
        "name, image, dry_run, over_budget, at, after, framework, from, from_running, seeds, then; "
        "recipe overrides: trainer.max_steps, trainer.val_check_interval, data.global_batch_size, "
        "data.micro_batch_size, optim.config.lr. Did you mean nodes?",
    ),
    ("/train sft llama3p1_8b trainer.max_stpes=3", "Did you mean trainer.max_steps?"),
    (
        "/train sft llama3p1_2b framework=nemo-rl",
        "sft llama3p1_2b has no nemo-rl recipe (it runs on nemo). "
        "nemo-rl sft models: llama3p1_8b, llama3p1_70b.",
    ),
    (
        "/train sft llama3p1_8b framework=jax",
        "framework='jax' is not known. Frameworks: nemo, nemo-rl, megatron-bridge.",
    ),
    # nodes out of range
    (
        "/train sft llama3p1_8b nodes=40 cluster=a4",
        "nodes=40 is more than a4 allows (max 4). Give nodes=1 to nodes=4.",
    ),
    ("/train sft llama3p1_8b nodes=0", "nodes=0 is not valid: at least 1 node."),
    (
        "/train sft llama3p1_8b nodes=two",
        "nodes=two is not a whole number. Give a number from 1 to 4, for example nodes=1.",
    ),
    ("/train sft llama3p1_8b nodes=-1", "nodes=-1 is not a whole number."),
    ("/train interactive nodes=5", "nodes=5 is more than a3m allows (max 4)."),
    # duplicate keys and malformed pairs
    (
        "/train sft llama3p1_8b nodes=2 NODES=3",
        "nodes is given twice (nodes=2 and nodes=3). Give each key once.",
    ),
    (
        "/train sft llama3p1_8b =2",
        "'=2' has no key before '='. Write key=value, for example nodes=2.",
    ),
    (
        "/train sft llama3p1_8b nodes=",
        "nodes= has no value. Write nodes=<value> with no space after '='.",
    ),
    ("/train sft llama3p1_8b no$des=2", "'no$des' is not a valid key"),
    (
        "/train sft llama3p1_8b --nodes 2",
        "'--nodes' looks like a command-line option. Write nodes=<value> instead "
        "(no dashes, no space).",
    ),
    ("/train sft llama3p1_8b --nodes=2", "Write keys without dashes: nodes=2"),
    (
        "/train sft llama3p1_8b extra",
        "Unexpected 'extra'. Usage: /train <workload> <model> [key=value ...] "
        "(options are key=value, for example nodes=2).",
    ),
    (
        "/train nodes=2",
        "Say what to train first: /train <workload> <model> [key=value ...], for example "
        "/train sft llama3p1_8b nodes=2. /train help lists everything.",
    ),
    ("/train interactive llama", "Unexpected 'llama'. Usage: /train interactive"),
    ("/train interactive trainer.max_steps=3", "Unknown key 'trainer.max_steps' for /train"),
    ("/train help nodes", "No help on 'nodes'. Topics: train, interactive"),
    ("/train help logs nodes=2", "Unknown key 'nodes' for /train help."),
    ("/train recipes sftt", "Unknown workload 'sftt'."),
    # values
    (
        '/train sft llama3p1_8b name="my run"',
        "name='my run' is not a valid job name: use letters, digits, '-' and '_', "
        "starting with a letter or digit, at most 48 characters. For example name=my-run.",
    ),
    ("/train sft llama3p1_8b name=-x", "name='-x' is not a valid job name"),
    ("/train sft llama3p1_8b name=" + "a" * 49, "at most 48 characters"),
    (
        "/train sft llama3p1_8b time=25:61:00",
        "time='25:61:00' is not a valid time limit: minutes must be 0 to 59. Use MM, MM:SS, "
        "HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, for example time=04:00:00.",
    ),
    ("/train sft llama3p1_8b time=1-24", "hours after 'D-' must be 0 to 23"),
    ("/train sft llama3p1_8b time=0", "zero means no limit; give a positive time"),
    ("/train sft llama3p1_8b time=UNLIMITED", "not a Slurm time"),
    ("/train sft llama3p1_8b time=400-00", "more than 365 days"),
    (
        "/train sft llama3p1_8b partition=a4;ls",
        "partition='a4;ls' is not a valid partition name: use letters, digits, '-' and '_', "
        "starting with a letter or digit.",
    ),
    (
        "/train sft llama3p1_8b dry_run=maybe",
        "dry_run='maybe' is not valid: use dry_run=true or dry_run=false "
        "(yes/no and 1/0 work too).",
    ),
    ("/train sft llama3p1_8b image=docker://NVCR.io/Nemo", "image='docker://NVCR.io/Nemo' is"),
    ("/train sft llama3p1_8b image=/a/../b.sqsh", "is not valid: give an image name"),
    (
        "/train sft llama3p1_8b image=relative.sqsh",
        "image='relative.sqsh' is a relative path: start it with / or ~/, for example "
        "image=~/relative.sqsh.",
    ),
    ("/train sft llama3p1_8b image=/x/y.img", "is not valid: give an image name"),
    (
        "/train sft llama3p1_8b trainer.max_steps=1e9",
        "trainer.max_steps='1e9' is not allowed for sft llama3p1_8b: the value must match "
        "[0-9]{1,7}.",
    ),
    ("/train dpo llama3p1_8b logger.wandb_enabled=false", "must match True|False"),
    # quoting, length and odd unicode
    (
        '/train sft llama3p1_8b name="my-run',
        """Unbalanced quote: the " in 'name="my-run' is never closed. Close it, or leave """
        "the quotes out (no value needs them).",
    ),
    ("/train sft llama3p1_8b name='x", "Unbalanced quote: the ' in 'name='x' is never closed."),
    (
        "/train sft llama3p1_8b\u200bnodes=2",
        "Your text has an invisible character (U+200B ZERO WIDTH SPACE) right after "
        "'llama3p1_8b', "
        "often left by copy and paste. Retype the command without it.",
    ),
    (
        "/train sft llama3p1_8b name=abc\u202edef",
        "Your text has a hidden text-direction character (U+202E RIGHT-TO-LEFT OVERRIDE) "
        "right after 'name=abc'; it makes text read differently than it runs. Retype the "
        "command without it.",
    ),
    (
        "/train sft llama3p1_8b\x07",
        "Your text has a control character (U+0007) right after 'llama3p1_8b'. Retype the "
        "command without it.",
    ),
    ("/train sft llama3p1_8b name=\ue000", "a character trainbot cannot read (U+E000"),
    (
        "/train sft llama3p1_8b " + "x" * 1000,
        "That command is too long (1023 characters; the limit is 1000).",
    ),
    ("/train sft llama3p1_8b " + "x=1 " * 41, "Too many words (43; at most 40)."),
    ("/train sft llama3p1_8b name=" + "a" * 300, "is too long (305 characters; at most 256)."),
]


@pytest.mark.parametrize(("line", "message"), REJECTED, ids=[r[0][:60] for r in REJECTED])
def test_rejected(parse, line: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError) as caught:
        parse(line)
    assert message in str(caught.value)


def test_policy_limit_shapes_the_nodes_message(parse) -> None:  # type: ignore[no-untyped-def]
    small = User(id="U0SMALL")
    with pytest.raises(CommandError) as caught:
        parse("/train sft llama3p1_8b nodes=3 cluster=a4", small)
    assert str(caught.value) == (
        "nodes=3 is more than a4 allows (max 2 for you; the cluster allows 4). "
        "Give nodes=1 to nodes=2."
    )
    assert caught.value.field == "nodes"
    assert caught.value.suggestion == "2"


def test_admins_get_the_cluster_limit(parse) -> None:  # type: ignore[no-untyped-def]
    admin = User(id="U0ADMIN")
    request = parse("/train sft llama3p1_8b nodes=4 cluster=a4", admin)
    assert isinstance(request, TrainRequest)
    assert request.nodes == 4


def test_default_cluster_is_configurable(make_context, user: User) -> None:  # type: ignore[no-untyped-def]
    context = make_context(default_cluster="a4")
    request = parse_line("/train interactive", user=user, context=context)
    assert request == InteractiveRequest(cluster="a4")


def test_errors_carry_the_field(parse) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError) as caught:
        parse("/train sft llama3p1_8b cluster=a5")
    assert caught.value.field == "cluster"


def test_custom_images_can_be_switched_off(make_context, make_profile, user: User) -> None:  # type: ignore[no-untyped-def]
    context = make_context(clusters={"a4": make_profile("a4", allow_custom_images=False)})
    with pytest.raises(CommandError) as caught:
        parse_line("/train sft llama3p1_8b image=/x/y.sqsh", user=user, context=context)
    assert str(caught.value) == (
        "image='/x/y.sqsh' is not an image of a4. Images there: nemo, nemo-rl, megatron-bridge."
    )


@pytest.mark.parametrize(
    "text",
    ['nodes=2 nodes="a\nb"', '--nodes="a\tb"'],
)
def test_a_quoted_value_with_a_newline_or_tab_is_echoed_on_one_line(text: str) -> None:
    """An error that echoes what was typed shows a newline or tab as its escape, so the
    message stays one line (found by the parser's property test)."""
    with pytest.raises(CommandError) as caught:
        parse_args(text)
    message = str(caught.value)
    assert "\n" not in message and "\t" not in message, message
    assert "\\n" in message or "\\t" in message, message


@pytest.mark.parametrize(
    ("line", "framework", "image"),
    [
        (
            "/train pretrain llama3p1_8b framework=megatron-bridge nodes=2 cluster=a4",
            "megatron-bridge",
            None,
        ),
        ("/train sft llama3p1_8b framework=mbridge", "megatron-bridge", None),
        ("/train peft llama3p1_70b", "megatron-bridge", None),  # only Megatron-Bridge runs PEFT
        (
            "/train sft llama3p1_8b image=nvcr.io/nvidia/nemo:26.02",
            "nemo",
            "nvcr.io/nvidia/nemo:26.02",
        ),
        (
            "/train dpo llama3p1_8b image=nvcr.io#nvidia/nemo-rl:v0.5.0",
            "nemo-rl",
            "nvcr.io#nvidia/nemo-rl:v0.5.0",
        ),
        (
            "/train sft llama3p1_8b image=docker://nvcr.io#nvidia/nemo:26.02",
            "nemo",
            "docker://nvcr.io#nvidia/nemo:26.02",
        ),
    ],
)
def test_megatron_bridge_and_registry_images_are_accepted(
    line: str, framework: str, image: str | None, context: CommandContext, user: User
) -> None:
    request = parse_line(line, user=user, context=context)
    assert isinstance(request, TrainRequest)
    assert (request.framework, request.image) == (framework, image)
