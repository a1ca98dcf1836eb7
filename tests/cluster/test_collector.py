"""The collector: its remote half on local files, its parser, and live polls of 50 jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster import collect_remote
from cluster.collector import TrackedJob, collect, parse_collect_output
from cluster.profiles import ClusterProfile
from cluster.ssh import SSHPool

DATA = Path(__file__).parent / "data"


def test_read_chunk_offsets_and_bounds(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(1000)))
    first = collect_remote.read_chunk(str(log), 0, 100)
    assert first["text"].endswith("\n") and len(first["text"]) <= 100
    assert first["offset"] == len(first["text"].encode())
    second = collect_remote.read_chunk(str(log), first["offset"], 1 << 20)
    assert (first["text"] + second["text"]).splitlines() == [f"line {i}" for i in range(1000)]
    log.write_text("new\n")  # truncated and rewritten: start again
    again = collect_remote.read_chunk(str(log), second["offset"], 100)
    assert again["reset"] and again["text"] == "new\n"
    assert collect_remote.read_chunk(str(tmp_path / "nope"), 0, 10)["size"] == -1


def test_completed_checkpoints_skip_unfinished(tmp_path: Path) -> None:
    for name in (
        "model_name=0--val_loss=0.00-step=1-consumed_samples=64.0",
        "model_name=0--val_loss=0.00-step=3-consumed_samples=128.0",
        "model_name=0--val_loss=0.00-step=4-consumed_samples=160.0-last",
    ):
        (tmp_path / name).mkdir()
    (tmp_path / "model_name=0--val_loss=0.00-step=4-consumed_samples=160.0-last-unfinished").touch()
    steps = [s for s, _ in collect_remote.completed_checkpoints(str(tmp_path), "nemo")]
    assert steps == [1, 3]
    rl = tmp_path / "rl"
    for name in ("step_2", "tmp_step_4", "step_10"):
        (rl / name).mkdir(parents=True)
    assert [s for s, _ in collect_remote.completed_checkpoints(str(rl), "nemo-rl")] == [2, 10]


def test_collect_job_finds_newest_restart_log(tmp_path: Path) -> None:
    (tmp_path / "log-u-u.x_7_0.out").write_text("first run\n")
    (tmp_path / "log-u-u.x_7_1.out").write_text("second run\n")
    (tmp_path / "sbatch_u-u.x_7.out").write_text("srun: error\n")
    job = {"job_id": "7", "framework": "nemo", "local_dir": str(tmp_path), "log_offset": 5}
    out = collect_remote.collect_job(job, 4096, 10)
    assert out["restart"] == 1
    assert out["log"]["text"] == "second run\n"  # a new file: the stored offset does not apply
    assert out["sbatch_log"]["text"] == "srun: error\n"


def test_parse_collect_output_uses_recorded_slurm_text() -> None:
    raw = {
        "slurm_calls": ["squeue", "sacct"],
        "squeue": {"rc": 0, "stdout": (DATA / "squeue_requeued.txt").read_text(), "stderr": ""},
        "sacct": {"rc": 0, "stdout": (DATA / "sacct_duplicates.txt").read_text(), "stderr": ""},
        "jobs": {
            "27": {"restart": 0, "log": {"path": "/x", "text": "a\n", "offset": 2, "size": 2}},
            "7": {"checkpoints": [{"step": 3, "name": "s3"}]},
            "999": {},
        },
    }
    result = parse_collect_output(raw, cluster="a4")
    assert result.jobs["27"].state == "PENDING" and result.jobs["27"].restarts == 1
    assert result.jobs["7"].state == "COMPLETED" and result.jobs["7"].new_checkpoints[0].step == 3
    assert result.jobs["999"].state is None
    job = TrackedJob(job_id="27", framework="nemo", local_dir="/d")
    moved = result.jobs["27"].advance(job)
    assert (moved.log_path, moved.log_offset) == ("/x", 2)


@pytest.mark.devcluster
async def test_fifty_jobs_one_round_trip_one_squeue_one_sacct(
    pool: SSHPool, dev_profile: ClusterProfile
) -> None:
    listed = await pool.run(dev_profile.login, "sacct -X -n -P -o JobID -S now-7days", timeout_s=30)
    known = [j for j in listed.stdout.split() if j.isdigit()][-40:]
    ids = known + [str(900000 + i) for i in range(50 - len(known))]
    jobs = [
        TrackedJob(
            job_id=j,
            framework="nemo-rl" if i % 2 else "nemo",
            job_dir=f"~/vertex-oss-training/nemo_rl/{j}",
            local_dir="~/vertex-oss-training/nemo/experiments",
            checkpoint_dir=f"~/vertex-oss-training/nemo_rl/{j}/checkpoints",
        )
        for i, j in enumerate(ids)
    ]
    await collect(pool, dev_profile.login, jobs[:1])  # connect first
    before = pool.stats.round_trips
    result = await collect(pool, dev_profile.login, jobs, cluster="a4")
    assert pool.stats.round_trips - before == 1 == result.round_trips
    assert sorted(result.slurm_calls) == ["sacct", "squeue"]
    assert len(result.jobs) == 50
    assert all(result.jobs[j].state is not None for j in known)
