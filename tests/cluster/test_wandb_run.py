"""The W&B variables of a launch: one run id for every attempt, group, tags and notes."""

from __future__ import annotations

import pytest

from cluster.launching.wandb_run import run_env, run_id, safe_tag


@pytest.mark.parametrize(
    ("launch_id", "expected"),
    [
        ("L-7f3a9c", "trainbot-l-7f3a9c"),
        ("L-ABC_1", "trainbot-l-abc_1"),
        ("L-a.b/c", "trainbot-l-a-b-c"),  # only letters, digits, - and _ reach W&B
    ],
)
def test_run_id_is_the_launch_id_made_safe(launch_id: str, expected: str) -> None:
    assert run_id(launch_id) == expected


def test_every_attempt_and_cluster_of_a_launch_gets_the_same_run() -> None:
    first = run_env("L-7f3a9c", cluster="a4", owner="alice", notes="/train sft llama3p1_8b")
    reroute = run_env("L-7f3a9c", cluster="a3m", owner="alice", notes="/train sft llama3p1_8b")
    assert first["WANDB_RUN_ID"] == reroute["WANDB_RUN_ID"] == "trainbot-l-7f3a9c"
    assert first["WANDB_RESUME"] == "allow"
    assert first["WANDB_TAGS"] == "launch:L-7f3a9c,cluster:a4,owner:alice"
    assert reroute["WANDB_TAGS"] == "launch:L-7f3a9c,cluster:a3m,owner:alice"
    assert first["WANDB_RUN_GROUP"] == "L-7f3a9c"  # no sweep: the launch is its own group
    assert first["WANDB_NOTES"] == "/train sft llama3p1_8b"


def test_a_sweep_member_is_grouped_by_its_sweep_and_keeps_its_own_run() -> None:
    one = run_env("L-000001", cluster="a4", owner="bob", sweep="S-41c2")
    two = run_env("L-000002", cluster="a4", owner="bob", sweep="S-41c2")
    assert one["WANDB_RUN_GROUP"] == two["WANDB_RUN_GROUP"] == "S-41c2"
    assert one["WANDB_RUN_ID"] != two["WANDB_RUN_ID"]
    assert "WANDB_NOTES" not in one  # no line, no notes


def test_tags_and_notes_cannot_break_the_list_or_the_line() -> None:
    notes = "/train sft m\nlr=1e-5,3e-5  x=" + "y" * 2000
    env = run_env("L-1", cluster="a4", owner="Ann Lee, ops", notes=notes)
    assert env["WANDB_TAGS"].split(",") == ["launch:L-1", "cluster:a4", "owner:Ann_Lee__ops"]
    assert "\n" not in env["WANDB_NOTES"] and len(env["WANDB_NOTES"]) == 1000
    assert len(safe_tag("x" * 100)) == 64
    assert "WANDB_API_KEY" not in env  # the key stays a job secret, never a plain variable
