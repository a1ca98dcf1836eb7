"""The collector: its remote half on local files, its parser, and live polls of 50 jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.frameworks.nemo import NEMO
from cluster.frameworks.nemo_rl import NEMO_RL
from cluster.launching.spec import LaunchSpec
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.watching import collect_remote
from cluster.watching.collector import collect, parse_collect_output
from cluster.watching.tracking import Tracking

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


def nemo_job(local_dir: Path, job_id: str = "7", **changes: object) -> Tracking:
    """The record NeMo's framework object makes from run.py's status block."""
    profile = ClusterProfile(
        name="a4", type="hcc-a4", login={"host": "h", "user": "u"}, partition="a4", max_nodes=4
    )
    spec = LaunchSpec(profile=profile, launch_id="L-1", framework="nemo", nodes=1, script="s.py")
    status = f"Task 0: x\n- Job id: {job_id}\n- Local Directory: {local_dir}\n"
    return NEMO.tracking(spec, status).model_copy(update=changes)


def test_collect_job_reads_the_newest_restart_log_from_its_offset(tmp_path: Path) -> None:
    (tmp_path / "log-u-u.x_7_0.out").write_text("first run\n")
    (tmp_path / "log-u-u.x_7_1.out").write_text("second run\nmore\n")
    (tmp_path / "sbatch_u-u.x_7.out").write_text("srun: error\n")
    job = nemo_job(tmp_path, log_path=str(tmp_path / "log-u-u.x_7_0.out"), log_offset=5)
    out = collect_remote.collect_job(job.payload(), 4096, 10)
    assert out["restart"] == 1
    assert out["log"]["text"] == "second run\nmore\n"  # a new file: the old offset does not apply
    assert "sbatch_log" not in out  # read only as evidence when the job fails
    job = job.model_copy(update={"log_path": out["log"]["path"], "log_offset": 11})
    assert collect_remote.collect_job(job.payload(), 4096, 10)["log"]["text"] == "more\n"


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
    job = nemo_job(Path("/d"), "27")
    moved = result.jobs["27"].advance(job)
    assert (moved.log_path, moved.log_offset) == ("/x", 2)
    assert result.jobs["27"].advance(job, consumed=1).log_offset == 1  # a cut line: read again
    assert result.jobs["999"].advance(job) == job  # nothing read: nothing moves


@pytest.mark.devcluster
async def test_fifty_jobs_one_round_trip_one_squeue_one_sacct(
    pool: SSHPool, dev_profile: ClusterProfile
) -> None:
    listed = await pool.run(dev_profile.login, "sacct -X -n -P -o JobID -S now-7days", timeout_s=30)
    known = [j for j in listed.stdout.split() if j.isdigit()][-40:]
    ids = known + [str(900000 + i) for i in range(50 - len(known))]
    rl_spec = LaunchSpec(
        profile=dev_profile,
        launch_id="L-1",
        framework="nemo-rl",
        nodes=1,
        script="algorithms/sft.sh",
    )
    nemo_spec = LaunchSpec(
        profile=dev_profile, launch_id="L-1", framework="nemo", nodes=1, script="sft/x.py"
    )
    jobs = [
        NEMO_RL.found(rl_spec, j) if i % 2 else NEMO.found(nemo_spec, j) for i, j in enumerate(ids)
    ]
    await collect(pool, dev_profile.login, jobs[:1])  # connect first
    before = pool.stats.round_trips
    result = await collect(pool, dev_profile.login, jobs, cluster="a4")
    assert pool.stats.round_trips - before == 1 == result.round_trips
    assert sorted(result.slurm_calls) == ["sacct", "squeue"]
    assert len(result.jobs) == 50
    assert all(result.jobs[j].state is not None for j in known)


@pytest.mark.parametrize(
    ("files", "found", "restart"),
    [
        (("26/nemo_rl_output.log",), "26/nemo_rl_output.log", 0),  # the seed's launch.sh
        (("26-logs/ray-driver.log", "26-logs/ray-head.log"), "26-logs/ray-driver.log", 0),
        (("26-logs/ray-driver.log", "26-1-logs/ray-driver.log"), "26-1-logs/ray-driver.log", 1),
        (("26-1-logs/ray-driver.log", "26-2-logs/ray-driver.log"), "26-2-logs/ray-driver.log", 2),
        (("260-logs/ray-driver.log", "2-logs/ray-driver.log"), "", 0),  # other jobs' logs
    ],
)
def test_a_nemo_rl_jobs_log_is_found_in_either_layout(
    tmp_path: Path, files: tuple[str, ...], found: str, restart: int
) -> None:
    """NeMo-RL's ray.sub (NVIDIA-NeMo/RL 7ea279abfbeb698b092856d0dab61e7cf39bc909) writes
    <job id>-logs/ray-driver.log, <job id>-<restart>-logs/ after a requeue."""
    profile = ClusterProfile(
        name="a4", type="hcc-a4", login={"host": "h", "user": "u"}, partition="a4",
        max_nodes=4, recipes_dir=str(tmp_path),
    )  # fmt: skip
    spec = LaunchSpec(profile=profile, launch_id="L-1", framework="nemo-rl", nodes=1, script="s")
    tracking = NEMO_RL.found(spec, "26")
    for name in files:
        path = tmp_path / "nemo_rl" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{name}\n")
    directory, log, seen = collect_remote.find_log(tracking.payload())
    assert (log, seen) == ((str(tmp_path / "nemo_rl" / found), restart) if found else ("", 0))
    if found:
        assert directory == str((tmp_path / "nemo_rl" / found).parent)
        assert collect_remote.collect_job(tracking.payload(), 4096, 10)["log"]["text"] == (
            f"{found}\n"
        )
