"""Measure the loss-curve renderer: points, ms per image and PNG bytes.

    .venv/bin/python bench/plot.py [--sizes 100,10000,100000] [--repeat 5] [--out /tmp/loss.png]

Each size is a noisy falling loss (exponential decay plus Gaussian noise, a few
spikes), the shape a real run produces. Prints the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.plot import render_loss_png  # noqa: E402


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
    parser.add_argument("--sizes", default="100,10000,100000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="", help="also write the largest image here")
    args = parser.parse_args()
    print(f"{'points':>8} {'ms':>8} {'bytes':>8}")
    png = b""
    for n in (int(size) for size in args.sizes.split(",")):
        points = noisy_loss(n)
        best_ms = math.inf
        for _ in range(args.repeat):
            start = time.perf_counter()
            png = render_loss_png(points, title=f"L-7f3a9c · sft llama3p1_8b · loss ({n:,})")
            best_ms = min(best_ms, (time.perf_counter() - start) * 1000)
        print(f"{n:>8} {best_ms:>8.1f} {len(png):>8}")
    if args.out:
        Path(args.out).write_bytes(png)


if __name__ == "__main__":
    main()
