"""The loss-curve PNG, read back as pixels (Pillow, which matplotlib brings): the
smoothed line falls, the validation loss, retries and checkpoints are drawn, odd
inputs are handled, and long runs are reduced without losing spikes."""

from __future__ import annotations

import io
import math
from typing import cast

import pytest
from PIL import Image

from bot.lifecycle.launch import Attempt, Launch
from bot.text.plot import (
    CHECKPOINT,
    RETRY,
    SMOOTH,
    VALIDATION,
    AxisMarks,
    reduce_per_column,
    render_loss_png,
)
from bot.wording import render
from cluster.frameworks.nemo import NEMO
from cluster.launching.spec import LaunchSpec
from cluster.site.profiles import ClusterProfile
from commands.requests import TrainRequest

TITLE = "L-7f3a9c · sft llama3p1_8b · loss"


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def pixels(png: bytes, colour: str, tolerance: int = 12) -> list[tuple[int, int]]:
    image = Image.open(io.BytesIO(png)).convert("RGB")
    want = rgb(colour)
    width, height = image.size
    data = image.load()  # RGB: each pixel is a (red, green, blue) tuple
    assert data is not None
    return [
        (x, y)
        for y in range(height)
        for x in range(width)
        if all(
            abs(a - b) <= tolerance
            for a, b in zip(cast("tuple[int, int, int]", data[x, y]), want, strict=True)
        )
    ]


def falling(n: int) -> list[tuple[float, float]]:
    return [(float(s), 3.0 * math.exp(-s / (n / 4)) + 1.0) for s in range(1, n + 1)]


def test_a_png_of_the_asked_size_whose_smoothed_loss_falls() -> None:
    png = render_loss_png(falling(300), title=TITLE)
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.size == (900, 450)
    line = pixels(png, SMOOTH)
    assert len(line) > 300
    xs = sorted({x for x, _ in line})
    left = [y for x, y in line if x < xs[len(xs) // 5]]
    right = [y for x, y in line if x > xs[-len(xs) // 5]]
    assert sum(left) / len(left) < sum(right) / len(right)  # high loss is up (small y)


def test_validation_retries_and_checkpoints_are_drawn() -> None:
    plain = render_loss_png(falling(300), title=TITLE)
    full = render_loss_png(
        falling(300),
        title=TITLE,
        validation=[(100.0, 2.0), (200.0, 1.5), (300.0, 1.2)],
        marks=AxisMarks(retries=[150], checkpoints=[100, 200, 300]),
    )
    for colour in (VALIDATION, RETRY, CHECKPOINT):
        assert not pixels(plain, colour), colour
        assert len(pixels(full, colour)) > 20, colour


@pytest.mark.parametrize(
    "points",
    [
        [(1, 2.0), (2, math.nan), (3, 1.5), (4, math.inf), (5, 1.4)],
        [(1, 2.0), (1, 2.0), (2, 2.0)],  # flat, repeated step
        [(5, 1e-9), (6, 2e-9)],
        [(3, 1.0), (1, 2.0), (2, 1.5)],  # out of order
    ],
)
def test_odd_inputs_still_give_a_curve(points: list[tuple[float, float]]) -> None:
    assert pixels(render_loss_png(points, title=TITLE), SMOOTH)


@pytest.mark.parametrize("points", [[], [(1, 2.0)], [(1, math.nan), (2, math.inf)]])
def test_too_few_points_is_a_clear_error(points: list[tuple[float, float]]) -> None:
    with pytest.raises(ValueError, match="fewer than two loss values"):
        render_loss_png(points, title=TITLE)


def test_long_runs_are_reduced_per_column_and_keep_their_spikes() -> None:
    points = falling(100_000)
    points[54_321] = (points[54_321][0], 50.0)
    kept = reduce_per_column(points, 900)
    assert len(kept) <= 2 * 900
    assert (points[54_321]) in kept and kept[0] == points[0] and kept[-1] == points[-1]
    assert [s for s, _ in kept] == sorted(s for s, _ in kept)


def test_the_launch_curve_marks_its_retries_and_checkpoints() -> None:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    launch = Launch(request=request, user_id="U1", channel="C1")
    profile = ClusterProfile(
        name="a4", type="hcc-a4", login={"host": "h", "user": "u"}, partition="a4", max_nodes=1
    )
    spec = LaunchSpec(
        profile=profile, launch_id=launch.id, framework="nemo", nodes=1, script="s.py"
    )
    tracking = NEMO.found(spec, "1")  # its checkpoint rule names the step in a checkpoint
    launch.attempts = [
        Attempt(number=1, job_id="1", tracking=tracking),
        Attempt(number=2, from_step=120),
    ]
    launch.progress_history = [(int(s), v) for s, v in falling(300)]
    launch.checkpoints = ["model_name=0--val_loss=0.00-step=99-consumed_samples=3200.0"]
    png = render.loss_curve(launch)
    assert len(pixels(png, RETRY)) > 20 and len(pixels(png, CHECKPOINT)) > 20
