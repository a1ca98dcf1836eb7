"""Measure the loss-curve renderer against the hand-written one it replaced.

    .venv/bin/python bench/plot.py [--sizes 100,10000,100000] [--repeat 5] [--out /tmp/loss.png]
    .venv/bin/python bench/plot.py --quick    # sizes 100,2000, once each: every row in seconds

Each size is a noisy falling loss (exponential decay plus Gaussian noise, a few
spikes), the shape a real run produces. For each size, in the same run: trainbot's
renderer (matplotlib, Agg) and the anchor (the earlier pure-Python bitmap renderer,
kept in bench/anchors/ only for this comparison); the best of ``--repeat`` runs each,
PNG bytes, and the ratio. The first matplotlib call also pays its import, reported
on its own line.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.anchors.bitmap_plot import render_loss_png as bitmap_png  # noqa: E402
from bot.text.plot import render_loss_png  # noqa: E402


def noisy_loss(n: int, *, seed: int = 0) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    points = []
    for step in range(n):
        loss = 9.0 * math.exp(-step * 8.0 / n) + 1.2 + rng.gauss(0, 0.08)
        if rng.random() < 1e-4:
            loss += rng.uniform(1, 4)
        points.append((float(step), loss))
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=None, help="default 100,10000,100000")
    parser.add_argument("--repeat", type=int, default=None, help="default 5")
    parser.add_argument("--out", default="", help="also write the largest image here")
    parser.add_argument("--quick", action="store_true", help="sizes 100,2000, once each")
    args = parser.parse_args()
    sizes = args.sizes or ("100,2000" if args.quick else "100,10000,100000")
    repeat = args.repeat or (1 if args.quick else 5)
    started = time.perf_counter()
    render_loss_png(noisy_loss(10), title="warm-up")  # imports matplotlib
    print(f"first call (imports matplotlib): {(time.perf_counter() - started) * 1000:.0f} ms")
    head = ("points", "matplotlib ms", "bytes", "bitmap ms", "bytes", "ratio")
    print(f"{head[0]:>8} {head[1]:>14} {head[2]:>8} {head[3]:>10} {head[4]:>8} {head[5]:>6}")
    png = b""
    for n in (int(size) for size in sizes.split(",")):
        points = noisy_loss(n)
        title = f"L-7f3a9c · sft llama3p1_8b · loss ({n:,})"
        best = {}
        sizes = {}
        for name, draw in (("mpl", render_loss_png), ("bitmap", bitmap_png)):
            best[name] = math.inf
            for _ in range(repeat):
                start = time.perf_counter()
                out = draw(points, title=title)
                best[name] = min(best[name], (time.perf_counter() - start) * 1000)
            sizes[name] = len(out)
            if name == "mpl":
                png = out
        ratio = best["mpl"] / best["bitmap"]
        print(
            f"{n:>8} {best['mpl']:>14.1f} {sizes['mpl']:>8} {best['bitmap']:>10.1f} "
            f"{sizes['bitmap']:>8} {ratio:>6.2f}"
        )
    if args.out:
        Path(args.out).write_bytes(png)


if __name__ == "__main__":
    main()
