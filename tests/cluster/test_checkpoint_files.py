"""The delete command for chosen checkpoints: plain names under the run's directory only."""

from __future__ import annotations

import pytest

from cluster.watching.checkpoint_files import delete_command

NEMO = r"-step=([0-9]+)(?:-|$)"
NAME = "model_name=0--val_loss=1.20-step=3-consumed_samples=128.0"


def test_the_command_removes_each_name_under_the_directory_quoted() -> None:
    line = delete_command(
        "~/ckpts/default/checkpoints/", [NAME, "step_4-last"], r"step[=_]([0-9]+)"
    )
    assert line == (
        f'rm -rf -- "$HOME"/ckpts/default/checkpoints/{NAME} '
        '"$HOME"/ckpts/default/checkpoints/step_4-last'
    )


@pytest.mark.parametrize(
    ("directory", "names"),
    [
        ("~/ckpts", ["../step=3-x"]),
        ("~/ckpts", ["a/step=3-"]),
        ("~/ckpts", ["-rf step=3-"]),
        ("~/ckpts", ["*step=3-"]),
        ("~/ckpts", ["weights"]),  # no step by the framework's rule
        ("~/ckpts", []),
        ("~/../etc", [NAME]),
        ("", [NAME]),
        ("~/$(id)", [NAME]),
    ],
)
def test_anything_but_a_plain_checkpoint_name_is_refused(directory: str, names: list[str]) -> None:
    with pytest.raises(ValueError):
        delete_command(directory, names, NEMO)
