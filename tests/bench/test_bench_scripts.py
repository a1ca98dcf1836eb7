"""The benchmark scripts that print their own numbers, run with ``--quick``: each
prints its table, every row with its measurements."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.bot.botkit import TEST_REDIS

PROJECT = Path(__file__).resolve().parents[2]
NUMBER = r"[0-9]+(?:\.[0-9]+)?"
HISTORY_ROWS = (
    "/jobs (one user's active)",
    "/jobs all (everyone's active)",
    "history of a user (newest 20)",
    "history of a cluster, 30 days (newest 20)",
    "history of everyone (newest 50)",
    "find by Slurm job id (index)",
    "find by launch id",
    "before the index: one keyspace SCAN",
)


def run_quick(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(PROJECT / "bench" / script), "--quick", *args],
        cwd=PROJECT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_history_quick_prints_every_operation_with_its_median_and_p95() -> None:
    out = run_quick("history.py", "--redis", TEST_REDIS)  # the test database: it is flushed
    assert out.startswith("200 finished launches (+20 active), ")
    for name in HISTORY_ROWS:
        (row,) = (line for line in out.splitlines() if line.startswith(name + " "))
        median, p95 = (float(x) for x in row[len(name) :].split())
        assert 0 <= median <= p95, row
    assert re.search(rf"bytes per finished launch: record {NUMBER} .* history entry {NUMBER} ", out)


def test_plot_quick_prints_each_size_with_both_renderers() -> None:
    out = run_quick("plot.py")
    assert re.search(rf"^first call \(imports matplotlib\): {NUMBER} ms$", out, re.M)
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit():
            rows[int(cells[0])] = [float(c) for c in cells[1:]]
    assert sorted(rows) == [100, 2000]
    for points, (mpl_ms, mpl_bytes, bitmap_ms, bitmap_bytes, ratio) in rows.items():
        assert mpl_ms > 0 and bitmap_ms > 0 and mpl_bytes > 1000 and bitmap_bytes > 1000, points
        assert abs(ratio - mpl_ms / bitmap_ms) < 0.05 * ratio + 0.01, points
