"""The loss curve of a launch as a PNG, drawn with matplotlib (Agg, no display).

The whole run is drawn: the raw training loss (thin), a smoothed line over it,
the validation loss when the run reports one, and marks on the step axis where
a retry started and where checkpoints were saved. Long histories are reduced per
pixel column (the lowest and highest value of each), so spikes stay visible and
the cost does not grow with the number of steps.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

WIDTH_PX, HEIGHT_PX, DPI = 900, 450, 100
RAW = "#9ecae1"
SMOOTH = "#08519c"
VALIDATION = "#e6550d"
RETRY = "#cb181d"
CHECKPOINT = "#74c476"
MAX_MARKS = 60  # checkpoint marks beyond this are thinned
P = TypeVar("P", bound=tuple[float, float])  # (step, loss); steps may be int


@dataclass(frozen=True)
class AxisMarks:
    """Steps to mark on the axis."""

    retries: Sequence[int] = field(default_factory=tuple)
    checkpoints: Sequence[int] = field(default_factory=tuple)


def render_loss_png(
    history: Sequence[tuple[float, float]],
    *,
    title: str,
    validation: Sequence[tuple[float, float]] = (),
    marks: AxisMarks | None = None,
    width_px: int = WIDTH_PX,
    height_px: int = HEIGHT_PX,
    metric: str = "loss",
    validation_label: str = "validation loss",
) -> bytes:
    """The PNG of ``metric`` per step (the run's primary metric: its loss, or an RL run's
    reward); ValueError when fewer than two finite points are known."""
    points = sorted((float(s), float(v)) for s, v in history if _finite(s) and _finite(v))
    if len(points) < 2:
        raise ValueError(f"fewer than two {metric} values so far")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    steps, raw = zip(*reduce_per_column(points, width_px), strict=True)
    axes.plot(steps, raw, color=RAW, linewidth=0.8, label=metric)
    smooth = smoothed(points)
    axes.plot([s for s, _ in smooth], [v for _, v in smooth], color=SMOOTH, linewidth=2.0,
              label=f"{metric} (smoothed)")  # fmt: skip
    checked = [(float(s), float(v)) for s, v in validation if _finite(s) and _finite(v)]
    if checked:
        axes.plot(*zip(*sorted(checked), strict=True), color=VALIDATION, marker="o",
                  markersize=4, linewidth=1.2, label=validation_label)  # fmt: skip
    _mark(axes, marks or AxisMarks())
    low, high = _limits([v for _, v in points] + [v for _, v in checked])
    axes.set_ylim(low, high)
    axes.set_xlim(points[0][0], points[-1][0])
    axes.set_title(title, fontsize=10)
    axes.set_xlabel("step")
    axes.set_ylabel(metric)
    axes.grid(True, color="#e0e0e0", linewidth=0.6)
    axes.legend(loc="upper right", fontsize=8, frameon=False)
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()


def reduce_per_column(points: Sequence[P], columns: int) -> list[P]:
    """At most two points per column of the step axis (its lowest and highest), in step
    order. Also how a launch's stored history is halved when it grows too long."""
    if len(points) <= 2 * columns:
        return list(points)
    first, last = points[0][0], points[-1][0]
    span = (last - first) or 1.0
    kept: list[P] = []
    bucket: list[P] = []
    current = 0
    for point in points:
        column = min(columns - 1, int((point[0] - first) / span * columns))
        if column != current and bucket:
            kept += _extremes(bucket)
            bucket = []
        current = column
        bucket.append(point)
    kept += _extremes(bucket)
    return kept


def smoothed(
    points: Sequence[tuple[float, float]], weight: float = 0.9
) -> list[tuple[float, float]]:
    """A debiased exponential moving average (TensorBoard's smoothing), at most one
    point per 1/1000 of the run."""
    stride = max(1, len(points) // 1000)
    average, out = 0.0, []
    for i, (step, value) in enumerate(points):
        average = weight * average + (1 - weight) * value
        if i % stride == 0 or i == len(points) - 1:
            out.append((step, average / (1 - weight ** (i + 1))))
    return out


def _extremes(bucket: list[P]) -> list[P]:
    low = min(bucket, key=lambda p: p[1])
    high = max(bucket, key=lambda p: p[1])
    return sorted({low, high})


def _mark(axes: object, marks: AxisMarks) -> None:
    ckpts = sorted(set(marks.checkpoints))
    if len(ckpts) > MAX_MARKS:
        ckpts = ckpts[:: math.ceil(len(ckpts) / MAX_MARKS)]
    for i, step in enumerate(ckpts):
        axes.axvline(step, color=CHECKPOINT, linewidth=0.8, linestyle=":",  # type: ignore[attr-defined]
                     label="checkpoint" if i == 0 else None)  # fmt: skip
    for i, step in enumerate(sorted(set(marks.retries))):
        axes.axvline(step, color=RETRY, linewidth=2.0, linestyle="--",  # type: ignore[attr-defined]
                     label="retry" if i == 0 else None)  # fmt: skip


def _limits(values: list[float]) -> tuple[float, float]:
    """The y range: the bulk of the run, not a single early spike."""
    ordered = sorted(values)
    low = ordered[0]
    high = ordered[min(len(ordered) - 1, int(len(ordered) * 0.995))]
    high = max(high, ordered[-1] if len(ordered) < 200 else high)
    pad = (high - low) * 0.05 or abs(high) * 0.05 or 1.0
    return low - pad, high + pad


def _finite(value: float) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def render_overlay_png(
    curves: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    title: str,
    width_px: int = WIDTH_PX,
    height_px: int = HEIGHT_PX + 100,
) -> bytes:
    """Several loss curves on one chart, each smoothed and labelled (a sweep's members);
    ValueError when no curve has two finite points."""
    kept = []
    for label, history in curves:
        points = sorted((float(s), float(v)) for s, v in history if _finite(s) and _finite(v))
        if len(points) >= 2:
            kept.append((label, points))
    if not kept:
        raise ValueError("no member has two loss values")
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    palette = colormaps["tab10" if len(kept) <= 10 else "tab20"]
    values: list[float] = []
    # Members whose curves coincide (the same recipe, a value that did not change the
    # loss) stay visible: each one a line style and a marker of its own too.
    styles = ("-", "--", ":", "-.")
    markers = ("o", "s", "^", "D", "v", "P", "X", "*")
    for number, (label, points) in enumerate(kept):
        line = smoothed(points) if len(points) > 20 else points
        axes.plot([s for s, _ in line], [v for _, v in line], linewidth=1.6,
                  color=palette(number % palette.N), label=label,
                  linestyle=styles[number % len(styles)],
                  marker=markers[number % len(markers)], markersize=4,
                  markevery=max(1, len(line) // 12))  # fmt: skip
        values += [v for _, v in points]
    low, high = _limits(values)
    axes.set_ylim(low, high)
    axes.set_title(title, fontsize=10)
    axes.set_xlabel("step")
    axes.set_ylabel("loss (smoothed)")
    axes.grid(True, color="#e0e0e0", linewidth=0.6)
    shown = min(len(kept), 20)
    handles, labels = axes.get_legend_handles_labels()
    axes.legend(handles[:shown], labels[:shown], loc="upper right", frameon=False,
                fontsize=8 if shown <= 8 else 6, ncol=1 if shown <= 10 else 2)  # fmt: skip
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()
