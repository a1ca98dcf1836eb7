"""``bench/run --quick`` runs at its smallest size and prints every row of the table."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from bench.common import dev_cluster_up

PROJECT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]


@pytest.mark.timeout(400)
def test_quick_run_prints_every_row_with_its_anchor(tmp_path: Path) -> None:
    problem = dev_cluster_up()
    if problem:
        pytest.skip(problem)
    results = tmp_path / "RESULTS.md"
    # Its own session, so a run that overstays is ended with every bot it started: a bot
    # left behind would hold the bench database's poller lease for whatever runs next.
    run = subprocess.Popen(
        [str(PROJECT / "bench" / "run"), "--quick", "--results", str(results)],
        cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
        env={**os.environ, "TRAINBOT_BENCH_REDIS": os.environ.get("TRAINBOT_BENCH_REDIS", "12")},
    )  # fmt: skip
    try:
        stdout, stderr = run.communicate(timeout=380)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        stdout, stderr = run.communicate()
        pytest.fail("bench/run --quick took over 380 s:\n" + stdout[-3000:] + stderr[-3000:])
    assert run.returncode == 0, stdout[-3000:] + stderr[-3000:]
    rows = [line for line in stdout.splitlines() if line.startswith("| P")]
    assert [row.split("|")[1].strip() for row in rows] == ["P1", "P2", "P3", "P4", "P5", "P6", "P7"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 7, row
        assert cells[6] in ("pass", "short", "not measured"), row
    assert "Machine: " in stdout and " cores, " in stdout
    written = results.read_text()
    assert "| P6 |" in written and "slurm" in written.lower()
