"""The collector's remote half: run on the login node as ``python3 -`` (stdlib only).

It is sent as text on stdin with its input appended (see ``cluster.remote``);
``main(payload)`` returns a JSON-able dict. It knows no framework: each job comes
as its tracking record (``cluster.frameworks.Tracking``), which says where the
job's directory is, which file names are its log, how a complete checkpoint is
named and which files are evidence.

``mode: poll`` (the status poll) reports for every tracked job, in one go: the raw
Slurm rows (one ``squeue`` for all, one ``sacct -D`` for those that left the queue or
were requeued since the last poll),
new log bytes since the stored offset, completed checkpoints not yet known, and
whether an interactive job's attach file exists. ``mode: evidence`` (a failed
job) reads the end of every file the job left, and its ``sacct`` record. Output
is bounded either way.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import subprocess
from typing import Any

MAX_EVIDENCE_FILES = 24


def _run(argv: list[str], timeout_s: float) -> dict[str, Any]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-2000:]}


def pick_log(names: list[str], patterns: list[str], restart_pattern: str) -> tuple[str, int]:
    """(log name, restart) among a directory's names: the first pattern that matches wins,
    and among its matches the highest restart count (then the last name)."""
    for pattern in patterns:
        matches = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not matches:
            continue
        scored = []
        for name in matches:
            found = re.search(restart_pattern, name) if restart_pattern else None
            scored.append((int(found.group(1)) if found else 0, name))
        restart, name = max(scored)
        return name, restart
    return "", 0


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def find_log_by_globs(globs: list[str], restart_pattern: str) -> tuple[str, str, int]:
    """(directory, main log path, restart) among every file the patterns match: the
    highest restart in the path wins (a requeued run's new log), then the first pattern."""
    best: tuple[int, int, str] | None = None
    for rank, pattern in enumerate(globs):
        for path in glob.glob(os.path.expanduser(pattern)):
            found = re.search(restart_pattern, path) if restart_pattern else None
            key = (int(found.group(1)) if found else 0, -rank, path)
            if os.path.isfile(path) and (best is None or key > best):
                best = key
    if best is None:
        return "", "", 0
    return os.path.dirname(best[2]), best[2], best[0]


def find_log(job: dict[str, Any]) -> tuple[str, str, int]:
    """(directory, main log path, restart). A ``*`` in the directory is resolved to the
    newest match that holds the job's log."""
    if job.get("log_globs"):
        return find_log_by_globs(list(job["log_globs"]), job.get("restart_pattern") or "")
    pattern = os.path.expanduser(job.get("log_dir") or "")
    if not pattern:
        return "", "", 0
    names, restart_pattern = list(job.get("log_names") or []), job.get("restart_pattern") or ""
    candidates = sorted(glob.glob(pattern), reverse=True) if "*" in pattern else [pattern]
    for directory in candidates:
        name, restart = pick_log(_listdir(directory), names, restart_pattern)
        if name:
            return directory, os.path.join(directory, name), restart
    return ("" if "*" in pattern else pattern), "", 0


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


def read_tail(path: str, limit: int) -> dict[str, Any]:
    """The last ``limit`` bytes of a file, from a line start when cut."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - limit))
            data = handle.read(limit)
    except OSError as exc:
        return {"path": path, "text": "", "size": -1, "error": exc.strerror or str(exc)}
    cut = size > limit
    if cut and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]
    return {"path": path, "text": data.decode("utf-8", "replace"), "size": size, "cut": cut}


def completed_checkpoints(ckpt_dir: str, pattern: str, unfinished: str) -> list[tuple[int, str]]:
    names = set(_listdir(ckpt_dir))
    found = []
    for name in names:
        if unfinished and (name.endswith(unfinished) or f"{name}{unfinished}" in names):
            continue
        match = re.search(pattern, name) if pattern else None
        if match and os.path.isdir(os.path.join(ckpt_dir, name)):
            found.append((int(match.group(1)), name))
    return sorted(found)


def collect_job(job: dict[str, Any], budget: int, max_ckpts: int) -> dict[str, Any]:
    directory, main_log, restart = find_log(job)
    known_path = os.path.expanduser(job.get("log_path") or "")
    offset = int(job.get("log_offset") or 0) if main_log and main_log == known_path else 0
    result: dict[str, Any] = {
        "dir": directory,
        "restart": restart,
        "log": read_chunk(main_log, offset, budget),
    }
    if job.get("checkpoint_dir"):
        known = set(job.get("known_checkpoints") or [])
        done = completed_checkpoints(
            os.path.expanduser(job["checkpoint_dir"]),
            job.get("checkpoint_pattern") or "",
            job.get("unfinished_suffix") or "",
        )
        new = [{"step": s, "name": n} for s, n in done if n not in known]
        result["checkpoints"] = new[:max_ckpts]
        result["checkpoints_truncated"] = len(new) > max_ckpts
    if job.get("interactive") and job.get("attach_path"):
        places = [job["attach_path"], *(job.get("attach_alternatives") or [])]
        found = [p for p in places if os.path.isfile(os.path.expanduser(p))]
        result["attach_ready"] = bool(found)
        result["attach_found"] = found[0] if found else ""
    return result


def evidence_files(job: dict[str, Any], directory: str) -> list[str]:
    """Every regular file the job's evidence patterns name, main log first, no repeats."""
    paths: list[str] = []
    for pattern in job.get("evidence") or []:
        pattern = os.path.expanduser(pattern)
        if not os.path.isabs(pattern):
            if not directory:
                continue
            pattern = os.path.join(directory, pattern)
        for path in sorted(glob.glob(pattern)):
            path = os.path.normpath(path)
            if path not in paths and os.path.isfile(path):
                paths.append(path)
    return paths[:MAX_EVIDENCE_FILES]


def gather_evidence(payload: dict[str, Any]) -> dict[str, Any]:
    job = payload["job"]
    directory, main_log, _ = find_log(job)
    paths = evidence_files(job, directory)
    if main_log and os.path.normpath(main_log) in paths:
        paths.remove(os.path.normpath(main_log))
        paths.insert(0, os.path.normpath(main_log))
    total = int(payload.get("max_total_bytes", 512 << 10))
    per_file = max(
        4096, min(int(payload.get("max_bytes_per_file", 32 << 10)), total // max(len(paths), 1))
    )
    out: dict[str, Any] = {"dir": directory, "files": [read_tail(p, per_file) for p in paths]}
    if payload.get("sacct_argv"):
        out["sacct"] = _run([*payload["sacct_argv"], "-j", job["job_id"]], 20.0)
    return out


def poll(payload: dict[str, Any]) -> dict[str, Any]:
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
    # A job Slurm requeued is back in the queue: its earlier incarnations (NODE_FAIL or
    # not) are only in sacct -D, read once each time its restart count grows.
    known = {j["job_id"]: int(j.get("known_restarts") or 0) for j in jobs}
    for line in (out["squeue"] or {}).get("stdout", "").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) > 6 and parts[0] in known and parts[6].isdigit():
            if int(parts[6]) > known[parts[0]] and parts[0] not in gone:
                gone.append(parts[0])
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


def main(payload: dict[str, Any]) -> dict[str, Any]:
    return gather_evidence(payload) if payload.get("mode") == "evidence" else poll(payload)
