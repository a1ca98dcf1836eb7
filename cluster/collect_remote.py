"""The collector's remote half: run on the login node as ``python3 -`` (stdlib only).

It is sent as text on stdin with its input appended (see ``cluster.remote_python``);
``main(payload)`` returns a JSON-able dict. For every tracked job it reports, in one
go: the raw Slurm rows (one ``squeue`` for all, one ``sacct`` for those that left
the queue), new log bytes since the stored offsets, completed checkpoints not yet
known, and whether an interactive job's ``attach.sh`` exists. Output is bounded.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

NEMO_RL_STEP = re.compile(r"step_(\d+)")
NEMO_STEP = re.compile(r"-step=(\d+)-")


def _run(argv: list[str], timeout_s: float) -> dict[str, Any]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-2000:]}


def _restart_of(name: str, job_id: str) -> int:
    match = re.search(r"_" + re.escape(job_id) + r"_(\d+)\.out$", name)
    return int(match.group(1)) if match else -1


def pick_nemo_logs(names: list[str], job_id: str) -> tuple[str, str, int]:
    """(main log, sbatch log, restart) among a nemo-run task dir's file names.

    Upstream nemo-run writes ``log-<jobname>_<jobid>_<restart>.out`` (one per
    restart; the newest wins) and ``sbatch_<jobname>_<jobid>.out``; the guide's
    scheme is ``<jobid>.log``. Either may be missing ("").
    """
    runs = [(r, n) for n in names if n.startswith("log-") and (r := _restart_of(n, job_id)) >= 0]
    sbatch = sorted(n for n in names if n.startswith("sbatch_") and n.endswith(f"_{job_id}.out"))
    sbatch_name = sbatch[0] if sbatch else ""
    if runs:
        restart, name = max(runs)
        return name, sbatch_name, restart
    if f"{job_id}.log" in names:
        return f"{job_id}.log", sbatch_name, 0
    return "", sbatch_name, 0


def find_nemo_logs(local_dir: str, job_id: str) -> tuple[str, str, int]:
    """:func:`pick_nemo_logs` on a directory, as full paths."""
    try:
        names = os.listdir(local_dir)
    except OSError:
        return "", "", 0
    main, sbatch, restart = pick_nemo_logs(names, job_id)
    return (
        os.path.join(local_dir, main) if main else "",
        os.path.join(local_dir, sbatch) if sbatch else "",
        restart,
    )


def read_chunk(path: str, offset: int, limit: int) -> dict[str, Any]:
    """Bytes from ``offset`` (at most ``limit``, cut after the last full line)."""
    out: dict[str, Any] = {"path": path, "text": "", "offset": offset, "size": -1, "reset": False}
    if not path:
        return out
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < offset:
                offset, out["reset"] = 0, True
            handle.seek(offset)
            data = handle.read(limit)
    except OSError:
        return out
    if len(data) == limit and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]
    out.update(text=data.decode("utf-8", "replace"), offset=offset + len(data), size=size)
    return out


def completed_checkpoints(ckpt_dir: str, framework: str) -> list[tuple[int, str]]:
    try:
        names = set(os.listdir(ckpt_dir))
    except OSError:
        return []
    found = []
    for name in names:
        if framework == "nemo-rl":
            match = NEMO_RL_STEP.fullmatch(name)
        elif name.endswith("-unfinished") or f"{name}-unfinished" in names:
            continue
        else:
            match = NEMO_STEP.search(name + "-")
        if match and os.path.isdir(os.path.join(ckpt_dir, name)):
            found.append((int(match.group(1)), name))
    return sorted(found)


def collect_job(job: dict[str, Any], budget: int, max_ckpts: int) -> dict[str, Any]:
    job_id, framework = job["job_id"], job["framework"]
    main_log, sbatch_log, restart = job.get("log_path") or "", job.get("sbatch_log_path") or "", 0
    if framework == "nemo" and job.get("local_dir"):
        found_main, found_sbatch, restart = find_nemo_logs(
            os.path.expanduser(job["local_dir"]), job_id
        )
        main_log, sbatch_log = found_main or main_log, found_sbatch or sbatch_log
    elif framework == "nemo-rl" and job.get("job_dir"):
        job_dir = os.path.expanduser(job["job_dir"])
        main_log = main_log or os.path.join(job_dir, "nemo_rl_output.log")
        sbatch_log = sbatch_log or os.path.join(os.path.dirname(job_dir), f"slurm-{job_id}.out")
    main_log, sbatch_log = os.path.expanduser(main_log), os.path.expanduser(sbatch_log)
    main_offset = job.get("log_offset", 0) if main_log == job.get("log_path") else 0
    sbatch_offset = (
        job.get("sbatch_log_offset", 0) if sbatch_log == job.get("sbatch_log_path") else 0
    )
    result: dict[str, Any] = {
        "restart": restart,
        "log": read_chunk(main_log, main_offset, budget * 3 // 4),
        "sbatch_log": read_chunk(sbatch_log, sbatch_offset, budget // 4),
    }
    if job.get("checkpoint_dir"):
        known = set(job.get("known_checkpoints", []))
        done = completed_checkpoints(os.path.expanduser(job["checkpoint_dir"]), framework)
        new = [{"step": s, "name": n} for s, n in done if n not in known]
        result["checkpoints"] = new[:max_ckpts]
        result["checkpoints_truncated"] = len(new) > max_ckpts
    if job.get("interactive") and job.get("job_dir"):
        result["attach_ready"] = os.path.isfile(
            os.path.join(os.path.expanduser(job["job_dir"]), "attach.sh")
        )
    return result


def main(payload: dict[str, Any]) -> dict[str, Any]:
    jobs: list[dict[str, Any]] = payload["jobs"]
    timeout_s = float(payload.get("slurm_timeout_s", 20))
    ids = [j["job_id"] for j in jobs]
    calls: list[str] = []
    out: dict[str, Any] = {"slurm_calls": calls, "squeue": None, "sacct": None, "jobs": {}}
    queued: set[str] = set()
    if ids:
        calls.append("squeue")
        out["squeue"] = _run([*payload["squeue_argv"], "-j", ",".join(ids)], timeout_s)
        if out["squeue"]["rc"] == 0 or "Invalid job id" in out["squeue"]["stderr"]:
            queued = {line.split("|")[0].strip() for line in out["squeue"]["stdout"].splitlines()}
        else:
            queued = set(ids)  # squeue failed: do not treat the jobs as gone
    gone = [i for i in ids if i not in queued]
    if gone:
        calls.append("sacct")
        out["sacct"] = _run([*payload["sacct_argv"], "-j", ",".join(gone)], timeout_s)
    total = int(payload.get("max_total_bytes", 1 << 20))
    per_job = int(payload.get("max_bytes_per_job", 64 << 10))
    budget = max(4096, min(per_job, total // max(len(jobs), 1)))
    for job in jobs:
        out["jobs"][job["job_id"]] = collect_job(
            job, budget, int(payload.get("max_checkpoints", 50))
        )
    return out
