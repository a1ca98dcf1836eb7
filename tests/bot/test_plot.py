"""The loss-curve PNG: structure, pixels (decoded here with zlib), odd inputs."""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass

import pytest

from bot.bitmap_font import text_pixels, text_width
from bot.plot import BACKGROUND, CURVE, render_loss_png

TITLE = "L-7f3a9c · sft llama3p1_8b · loss"


@dataclass
class Image:
    width: int
    height: int
    rows: list[bytes]  # RGB, 3 bytes per pixel

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        r, g, b = self.rows[y][3 * x : 3 * x + 3]
        return r, g, b

    def where(self, colour: tuple[int, int, int]) -> list[tuple[int, int]]:
        return [
            (x, y)
            for y in range(self.height)
            for x in range(self.width)
            if self.pixel(x, y) == colour
        ]


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def decode_png(data: bytes) -> Image:
    """Enough of PNG for 8-bit RGB, non-interlaced: chunks, CRCs, IDAT, the five filters."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, kind
        chunks.append((kind, body))
        at += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b"")
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour_type, interlace) == (8, 2, 0)
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    stride = 3 * width
    assert len(raw) == height * (stride + 1)
    rows: list[bytes] = []
    previous = bytes(stride)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b, c = previous[i], previous[i - 3] if i >= 3 else 0
            predictor = (0, a, b, (a + b) // 2, _paeth(a, b, c))[kind]
            line[i] = (line[i] + predictor) & 0xFF
        rows.append(bytes(line))
        previous = rows[-1]
    return Image(width, height, rows)


def falling(n: int = 500) -> list[tuple[float, float]]:
    return [(float(step), 3.0 * math.exp(-step / 150) + 0.5) for step in range(n)]


def curve_rows_by_column(image: Image) -> dict[int, float]:
    """Mean row of the curve's colour in each column that has it."""
    found: dict[int, list[int]] = {}
    for x, y in image.where(CURVE):
        found.setdefault(x, []).append(y)
    return {x: sum(ys) / len(ys) for x, ys in found.items()}


def test_png_structure_and_size() -> None:
    data = render_loss_png(falling(), title=TITLE, width=640, height=320)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (640, 320)
    image = decode_png(data)
    assert (image.width, image.height) == (640, 320)
    assert image.pixel(image.width - 1, image.height - 1) == BACKGROUND


def test_falling_loss_falls_left_to_right() -> None:
    image = decode_png(render_loss_png(falling(), title=TITLE))
    rows = curve_rows_by_column(image)
    assert len(rows) > 600  # the curve spans the plot's width
    columns = sorted(rows)
    quarter = len(columns) // 4
    left = sum(rows[x] for x in columns[:quarter]) / quarter
    right = sum(rows[x] for x in columns[-quarter:]) / quarter
    assert left < right - 100  # rows grow downwards
    assert rows[columns[0]] < rows[columns[-1]]


def test_curve_is_at_least_two_pixels_thick() -> None:
    flat = [(float(step), 1.0 + step * 1e-9) for step in range(100)]
    image = decode_png(render_loss_png(flat, title="flat"))
    x = sorted(curve_rows_by_column(image))[200]
    curve = [y for y in range(image.height) if image.pixel(x, y) == CURVE]
    assert len(curve) >= 2


def test_title_is_drawn() -> None:
    image = decode_png(render_loss_png(falling(), title="LOSS"))
    ink = {(x + 12, y + 12) for x, y in text_pixels("LOSS", 2)}
    assert all(image.pixel(x, y) != BACKGROUND for x, y in ink)
    assert text_width("LOSS", 2) < 100


@pytest.mark.parametrize(
    "points",
    [
        [(0, 1.0), (1, float("nan")), (2, float("inf")), (3, 0.5), (4, -float("inf")), (5, 0.2)],
        [(float(step), -step * 2.5) for step in range(50)],  # negative losses
        [(float(step), 2.0) for step in range(50)],  # identical values
        [(7.0, 1.0), (7.0, 2.0), (7.0, 1.5)],  # identical steps
        [(0, 1e-7), (1, 5e-8), (2, 1e-8)],
        [(0, 3e12), (1, 1e12)],
        [(3, 1.0), (1, 3.0), (2, 2.0)],  # out of order
        [(0, 2.0), (1, 1.0)],
    ],
)
def test_odd_inputs_still_give_a_curve(points: list[tuple[float, float]]) -> None:
    image = decode_png(render_loss_png(points, title="odd <!channel> ☃", width=300, height=160))
    assert image.where(CURVE)


@pytest.mark.parametrize(
    "points",
    [
        [],
        [(1.0, 2.0)],
        [(1.0, float("nan")), (2.0, float("nan"))],
        [(float("nan"), 1.0), (2.0, 1.0)],
    ],
)
def test_too_few_points_is_a_clear_error(points: list[tuple[float, float]]) -> None:
    with pytest.raises(ValueError, match="not enough loss values to plot yet"):
        render_loss_png(points, title=TITLE)


def test_too_small_image_is_an_error() -> None:
    with pytest.raises(ValueError, match="image too small"):
        render_loss_png(falling(), title=TITLE, width=100, height=50)


def test_large_input_is_decimated_without_losing_spikes() -> None:
    points = [(float(step), 1.0) for step in range(100_000)]
    points[50_000] = (50_000.0, 9.0)  # one spike must survive the decimation
    image = decode_png(render_loss_png(points, title=TITLE))
    curve = image.where(CURVE)
    spike = [(x, y) for x, y in curve if y < 100]
    assert spike, "the spike was lost"
    assert max(x for x, _ in spike) - min(x for x, _ in spike) <= 3  # one narrow spike
    assert sorted(y for _, y in curve)[len(curve) // 2] > 250  # the rest stays low
