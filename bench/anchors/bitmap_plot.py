"""The loss curve posted in a launch's thread: PNG bytes from (step, loss) points.

Pure Python (zlib and struct). Points that are not finite are dropped; large
inputs are reduced to one min/max/first/last bucket per pixel column, so 100k
points render in a few tens of milliseconds. The curve is about 2 px thick with
anti-aliased edges. Fewer than two usable points is a ValueError whose text can
be shown to the person who asked.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterable

from bench.anchors.bitmap_font import ASCENT, text_pixels, text_width

RGB = tuple[int, int, int]

BACKGROUND: RGB = (255, 255, 255)
GRID: RGB = (233, 233, 233)
AXIS: RGB = (110, 110, 110)
TEXT: RGB = (45, 45, 45)
CURVE: RGB = (31, 119, 180)

SCALE = 2  # font scale: 10x14 px glyphs, readable in Slack's preview
_HALF_THICKNESS = 1.0
_TICKS = 5


def render_loss_png(
    points: Iterable[tuple[float, float]],
    *,
    title: str,
    width: int = 800,
    height: int = 400,
) -> bytes:
    """A PNG line chart of loss against step, with grid, ticks and ``title``."""
    if width < 200 or height < 120:
        raise ValueError(f"image too small ({width}x{height}); at least 200x120")
    clean = sorted((float(s), float(v)) for s, v in points if _finite(s) and _finite(v))
    if len(clean) < 2:
        raise ValueError(f"not enough loss values to plot yet ({len(clean)} usable; need 2)")
    x_lo, x_hi = _padded(clean[0][0], clean[-1][0], 0.0)
    values = [v for _, v in clean]
    y_lo, y_hi = _padded(min(values), max(values), 0.05)
    x_ticks, y_ticks = _nice_ticks(x_lo, x_hi), _nice_ticks(y_lo, y_hi)
    y_labels = _labels(y_ticks)

    canvas = _Canvas(width, height)
    glyph_h = ASCENT * SCALE
    left = max(text_width(label, SCALE) for label in y_labels) + 18
    top, right, bottom = 66, width - 24, height - 30 - 2 * glyph_h
    plot = _Area(left, top, right, bottom, x_lo, x_hi, y_lo, y_hi)

    for tick, label in zip(y_ticks, y_labels, strict=True):
        row = plot.row(tick)
        canvas.hline(left, right, row, GRID)
        canvas.text(label, left - 8 - text_width(label, SCALE), row - glyph_h // 2, TEXT)
    for tick, label in zip(x_ticks, _labels(x_ticks), strict=True):
        col = plot.col(tick)
        canvas.vline(col, top, bottom, GRID)
        canvas.vline(col, bottom, bottom + 5, AXIS)
        label_x = min(max(col - text_width(label, SCALE) // 2, 0), width - text_width(label, SCALE))
        canvas.text(label, label_x, bottom + 10, TEXT)
    canvas.hline(left, right, bottom, AXIS)
    canvas.vline(left, top, bottom + 1, AXIS)
    _draw_curve(canvas, plot, clean)
    middle = (left + right - text_width("step", SCALE)) // 2
    canvas.text("step", middle, height - 10 - glyph_h, TEXT)
    loss_x = max(left - 8 - text_width("loss", SCALE) // 2, 4)
    canvas.text("loss", loss_x, top - 12 - glyph_h, TEXT)
    title = _fit(title, width - 24)
    canvas.text(title, 12, 12, TEXT)
    canvas.text(title, 13, 12, TEXT)  # drawn twice, one pixel apart: bold
    return canvas.png()


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except TypeError:
        return False


def _padded(lo: float, hi: float, fraction: float) -> tuple[float, float]:
    span = hi - lo
    if not math.isfinite(span):
        raise ValueError("loss values too large to plot")
    if span == 0:
        pad = abs(lo) * 0.1 or 1.0
        return lo - pad, hi + pad
    return lo - span * fraction, hi + span * fraction


def _nice_ticks(lo: float, hi: float) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten) with at most 7 intervals."""
    magnitude = 10.0 ** math.floor(math.log10((hi - lo) / _TICKS))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if (hi - lo) / (m * magnitude) <= 7)
    first = math.ceil(lo / step)
    ticks = [(first + i) * step for i in range(int((hi - lo) / step) + 2)]
    return [round(t, 12) for t in ticks if lo - step * 1e-9 <= t <= hi + step * 1e-9]


def _labels(ticks: list[float]) -> list[str]:
    """Short labels: fixed-point to the ticks' precision, or ``1.5e-5`` for extreme values."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else abs(ticks[0]) or 1.0
    step = float(f"{step:.6g}")  # 0.0999999 -> 0.1
    biggest = max(abs(t) for t in ticks)
    if biggest >= 1e6 or step < 1e-3:
        return [_exponent(t) for t in ticks]
    decimals = max(0, -math.floor(math.log10(step)))
    while decimals < 12 and abs(round(step, decimals) - step) > step * 1e-6:
        decimals += 1
    return [f"{t + 0.0:,.{decimals}f}" for t in ticks]


def _exponent(value: float) -> str:
    if value == 0:
        return "0"
    mantissa, exponent = f"{value:.2e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def _fit(text: str, max_px: int) -> str:
    if text_width(text, SCALE) <= max_px:
        return text
    while text and text_width(text + "…", SCALE) > max_px:
        text = text[:-1]
    return text + "…"


class _Area:
    """The plot rectangle and the value-to-pixel mapping."""

    def __init__(
        self,
        left: int,
        top: int,
        right: int,
        bottom: int,
        x_lo: float,
        x_hi: float,
        y_lo: float,
        y_hi: float,
    ) -> None:
        self.left, self.top, self.right, self.bottom = left, top, right, bottom
        self.x_lo, self.y_hi = x_lo, y_hi
        self.x_scale = (right - left) / (x_hi - x_lo)
        self.y_scale = (bottom - top) / (y_hi - y_lo)

    def col(self, x: float) -> int:
        return self.left + round((x - self.x_lo) * self.x_scale)

    def row(self, y: float) -> int:
        return self.top + round((self.y_hi - y) * self.y_scale)


def _draw_curve(canvas: _Canvas, plot: _Area, points: list[tuple[float, float]]) -> None:
    """Find the rows the curve covers in each pixel column, then paint them with soft ends."""
    columns = plot.right - plot.left
    lows = [math.inf] * columns
    highs = [-math.inf] * columns
    buckets = _buckets(plot, points)
    for (col, bucket), (next_col, next_bucket) in zip(buckets, buckets[1:], strict=False):
        _cover_segment(lows, highs, col + 0.5, bucket[1], next_col + 0.5, next_bucket[0])
    for col, (_, _, low, high) in buckets:
        lows[col], highs[col] = min(lows[col], low), max(highs[col], high)
    previous_low, previous_high = math.inf, -math.inf
    for col in range(columns):
        low, high = lows[col], highs[col]
        if low > high:
            previous_low, previous_high = math.inf, -math.inf
            continue
        # Union with the left neighbour: steep parts get 2 px of width too.
        canvas.cover_column(
            plot.left + col,
            min(low, previous_low) - _HALF_THICKNESS,
            max(high, previous_high) + _HALF_THICKNESS,
            plot.top,
            plot.bottom,
            CURVE,
        )
        previous_low, previous_high = low, high


def _buckets(plot: _Area, points: list[tuple[float, float]]) -> list[tuple[int, list[float]]]:
    """One bucket per pixel column with points: [first, last, min, max] row (y downwards)."""
    columns = plot.right - plot.left
    x_lo, x_scale, y_hi, y_scale, top = plot.x_lo, plot.x_scale, plot.y_hi, plot.y_scale, plot.top
    buckets: list[tuple[int, list[float]]] = []
    bucket: list[float] = []
    current = -1
    for step, loss in points:
        col = min(int((step - x_lo) * x_scale), columns - 1)
        row = top + (y_hi - loss) * y_scale
        if col != current:
            current, bucket = col, [row, row, row, row]
            buckets.append((col, bucket))
        else:
            bucket[1] = row
            if row < bucket[2]:
                bucket[2] = row
            elif row > bucket[3]:
                bucket[3] = row
    return buckets


def _cover_segment(
    lows: list[float], highs: list[float], x0: float, y0: float, x1: float, y1: float
) -> None:
    """Widen each column's row range by the part of segment (x0, y0)-(x1, y1) above it."""
    slope = (y1 - y0) / (x1 - x0)
    for col in range(int(x0), int(x1) + 1):
        a, b = max(x0, col), min(x1, col + 1)
        ya, yb = y0 + (a - x0) * slope, y0 + (b - x0) * slope
        lows[col] = min(lows[col], ya, yb)
        highs[col] = max(highs[col], ya, yb)


class _Canvas:
    """An RGB image kept as PNG scanlines (filter byte 0 then pixels)."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.stride = 1 + 3 * width
        row = b"\x00" + bytes(BACKGROUND) * width
        self.data = bytearray(row * height)

    def _put(self, x: int, y: int, colour: RGB) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            at = y * self.stride + 1 + 3 * x
            self.data[at : at + 3] = bytes(colour)

    def blend(self, x: int, y: int, colour: RGB, alpha: float) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            at = y * self.stride + 1 + 3 * x
            old = self.data[at : at + 3]
            self.data[at : at + 3] = bytes(
                round(o + (c - o) * alpha) for o, c in zip(old, colour, strict=True)
            )

    def hline(self, x0: int, x1: int, y: int, colour: RGB) -> None:
        x0, x1 = max(x0, 0), min(x1, self.width - 1)
        if 0 <= y < self.height and x0 <= x1:
            at = y * self.stride + 1 + 3 * x0
            self.data[at : at + 3 * (x1 - x0 + 1)] = bytes(colour) * (x1 - x0 + 1)

    def vline(self, x: int, y0: int, y1: int, colour: RGB) -> None:
        for y in range(y0, y1 + 1):
            self._put(x, y, colour)

    def text(self, text: str, x: int, y: int, colour: RGB) -> None:
        for dx, dy in text_pixels(text, SCALE):
            self._put(x + dx, y + dy, colour)

    def cover_column(
        self, x: int, low: float, high: float, clip_top: int, clip_bottom: int, colour: RGB
    ) -> None:
        """Paint rows low..high of column x; partly covered end rows are blended."""
        first, last = max(math.floor(low), clip_top), min(math.ceil(high) - 1, clip_bottom)
        solid = bytes(colour)
        for y in range(first, last + 1):
            coverage = min(high, y + 1) - max(low, y)
            if coverage >= 0.999:
                at = y * self.stride + 1 + 3 * x
                self.data[at : at + 3] = solid
            elif coverage > 0.02:
                self.blend(x, y, colour, coverage)

    def png(self) -> bytes:
        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return b"".join(
            [
                b"\x89PNG\r\n\x1a\n",
                _chunk(b"IHDR", header),
                _chunk(b"IDAT", zlib.compress(bytes(self.data), 6)),
                _chunk(b"IEND", b""),
            ]
        )


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)
