"""The collector's remote half: run on the login node as ``python3 -`` (stdlib only).

It is sent as text on stdin with its input appended (see ``cluster.ssh.remote``);
``main(payload)`` returns a JSON-able dict. It knows no framework: each job comes
as its tracking record (``cluster.frameworks.Tracking``), which says where the
job's directory is, which file names are its log, how a complete checkpoint is
named and which files are evidence.

``mode: poll`` (the status poll) reports for every tracked job, in one go: the raw
Slurm rows (one ``squeue`` for all, one ``sacct -D`` for those that left the queue or
were requeued since the last poll),
new log bytes since the stored offset, completed checkpoints not yet known, and
whether an interactive job's attach file exists. ``mode: evidence`` (a failed
job) reads the end of every file the job left and, in the part before that end,
the first error lines (:func:`first_errors`), and its ``sacct`` record. Output is
bounded either way.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import subprocess
import threading
import time
from typing import Any

MAX_EVIDENCE_FILES = 24
# The first error lines of a file (before its tail): per catalog pattern, the first
# lines of this many ranks; any other error lines, this many (at most two per rank).
FIRST_PER_PATTERN = 2
FIRST_GENERIC = 10
FIRST_PER_RANK = 2
FIRST_MAX_LINES = 200
FIRST_LINE_CHARS = 1000
SCAN_LINE_BYTES = 65536
# How far above a file's tail the search goes: the whole file up to this size (a
# failure's first error is printed shortly before the flood that fills the tail).
MAX_SCAN_BYTES = 512 << 20
# A rank's prefix on an interleaved line: PyTorch's "[rank3]:", torchrun's
# "[default3]:", srun --label's "3: ".
RANK_PREFIX_RE = re.compile(r"^\s*(?:\[(?:rank|default)\s?(\d+)\]:|(\d+): )")
GENERIC_ERROR_RE = r"\w(?:Error|Exception)\b|\berror\b|\bfatal\b|segmentation fault|\bkilled\b"


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


MAX_SIZE_FILES = 20000  # a checkpoint's files counted for its size, at most (then: a floor)


def dir_bytes(path: str) -> int:
    """The bytes of the files under ``path`` (links not followed; at most
    :data:`MAX_SIZE_FILES` files counted); 0 when it cannot be read."""
    total = counted = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            counted += 1
            if counted >= MAX_SIZE_FILES:
                return total
    return total


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


def inside(path: str, roots: list[str]) -> bool:
    """Whether ``path``, every link resolved, lies in one of ``roots`` (none: anywhere).
    The roots are the cluster's directories from the bot's config; the paths come from
    a launch's record, which is only a claim."""
    if not roots:
        return True
    real = os.path.realpath(os.path.expanduser(path))
    return any(
        real.startswith(os.path.realpath(os.path.expanduser(root)).rstrip(os.sep) + os.sep)
        for root in roots
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
    text = data.decode("utf-8", "replace")
    return {"path": path, "text": text, "size": size, "cut": cut, "start": size - len(data)}


def _compiled(patterns: list[str]) -> list[re.Pattern[str]]:
    found = []
    for pattern in patterns:
        try:
            found.append(re.compile(pattern, re.IGNORECASE))
        except re.error:
            continue  # checked where the catalog is built; never fail the evidence for it
    return found


class _Keeper:
    """Which error lines to keep, in file order: for each catalog pattern, the first lines
    that match it from up to ``FIRST_PER_PATTERN`` different ranks; of lines that only look
    like errors, the first ``FIRST_GENERIC`` (``FIRST_PER_RANK`` per rank)."""

    def __init__(self, patterns: list[str]) -> None:
        self.specific = _compiled(patterns)
        self.generic = re.compile(GENERIC_ERROR_RE, re.IGNORECASE)
        self.kept: list[list[Any]] = []
        self.ranks_of: dict[int, set[str]] = {}
        self.per_rank: dict[str, int] = {}
        self.generic_kept = 0

    @property
    def full(self) -> bool:
        return len(self.kept) >= FIRST_MAX_LINES

    def offer(self, number: int, line: str) -> None:
        prefix = RANK_PREFIX_RE.match(line)
        rank = (prefix.group(1) or prefix.group(2)) if prefix else ""
        keep = False
        for index, pattern in enumerate(self.specific):
            seen = self.ranks_of.setdefault(index, set())
            if len(seen) < FIRST_PER_PATTERN and rank not in seen and pattern.search(line):
                seen.add(rank)
                keep = True
        room = self.generic_kept < FIRST_GENERIC and self.per_rank.get(rank, 0) < FIRST_PER_RANK
        if not keep and room and self.generic.search(line):
            self.generic_kept += 1
            self.per_rank[rank] = self.per_rank.get(rank, 0) + 1
            keep = True
        if keep:
            self.kept.append([number, line[:FIRST_LINE_CHARS]])


def _line(raw: bytes) -> str:
    return raw[:4000].decode("utf-8", "replace").rstrip("\r\n")


def _grep_scan(
    path: str, span: tuple[int, int], keywords: list[str], keeper: _Keeper, deadline: float
) -> bool:
    """Offer ``keeper`` the lines of ``path`` between the byte offsets ``span`` that hold
    one of ``keywords`` (``head -c | grep -F -i``: fixed strings at disk speed). Returns
    whether the deadline stopped it; raises OSError when the tools cannot run."""
    begin, end = span
    argv = ["grep", "-a", "-n", "-F", "-i"] + [arg for k in keywords for arg in ("-e", k)]
    env = {**os.environ, "LC_ALL": "C"}
    with open(path, "rb") as handle:
        handle.seek(begin)
        head = subprocess.Popen(
            ["head", "-c", str(end - begin)], stdin=handle, stdout=subprocess.PIPE
        )
        grep = subprocess.Popen(argv, stdin=head.stdout, stdout=subprocess.PIPE, env=env)
    assert head.stdout is not None and grep.stdout is not None
    head.stdout.close()  # grep holds it now
    timer = threading.Timer(max(deadline - time.monotonic(), 0.0), grep.kill)
    timer.start()
    try:
        for raw in grep.stdout:
            number, _, text = raw.partition(b":")
            if begin and number == b"1":
                continue  # the rest of a line cut at ``begin``
            keeper.offer(int(number) if number.isdigit() else 0, _line(text))
            if keeper.full or time.monotonic() > deadline:
                break
    finally:
        timer.cancel()
        for proc in (grep, head):
            proc.kill()
            proc.wait()
        grep.stdout.close()
    return time.monotonic() > deadline


def _python_scan(
    path: str, span: tuple[int, int], keeper: _Keeper, deadline: float
) -> tuple[int, bool]:
    """The same in Python, every line tried against every pattern (slow: when a pattern
    has no fixed string, or grep cannot run). Returns (bytes read, deadline hit)."""
    try:
        either: re.Pattern[str] | None = re.compile(
            "|".join(f"(?:{p.pattern})" for p in [*keeper.specific, keeper.generic]),
            re.IGNORECASE,
        )
    except re.error:  # e.g. the same group name in two patterns: try them one by one
        either = None
    pos, end = span
    number = 0
    with open(path, "rb") as handle:
        handle.seek(pos)
        if pos:
            pos += len(handle.readline(SCAN_LINE_BYTES))  # the rest of a line cut there
        while pos < end and not keeper.full:
            raw = handle.readline(SCAN_LINE_BYTES)
            if not raw:
                break
            pos, number = pos + len(raw), number + 1
            if number % 2048 == 0 and time.monotonic() > deadline:
                return pos, True
            line = _line(raw)
            if either is None or either.search(line):
                keeper.offer(number, line)
    return pos, False


def first_errors(
    path: str, end: int, patterns: list[str], keywords: list[str] | None, deadline: float
) -> dict[str, Any]:
    """The first error lines among the first ``end`` bytes of ``path`` (its last
    ``MAX_SCAN_BYTES`` of them, in a larger file), rank-aware (see
    :class:`_Keeper`): one cause printed by one rank of 64 is found however many lines the
    other ranks print after it. ``keywords`` (fixed strings every match of ``patterns``
    holds, see ``cluster.watching.keywords``) make it fast; without them every line is tried in
    Python. Stops at ``deadline`` (``time.monotonic()``). Returns ``lines`` ([line
    number, text]; numbered from ``begin``), ``begin`` (the offset searched from), ``how``
    (grep or python) and ``cut`` (the deadline stopped it)."""
    keeper = _Keeper(patterns)
    span = (max(0, end - MAX_SCAN_BYTES), end)

    def result(how: str, cut: bool) -> dict[str, Any]:
        return {"lines": keeper.kept, "begin": span[0], "how": how, "cut": cut}

    if keywords:
        try:
            return result("grep", _grep_scan(path, span, keywords, keeper, deadline))
        except OSError:  # no grep or head here: the slow way, unless it got somewhere
            if keeper.kept:
                return result("grep", True)
    try:
        return result("python", _python_scan(path, span, keeper, deadline)[1])
    except OSError:
        return result("python", True)


def tracked_step(ckpt_dir: str, tracker: str) -> int:
    """The step a Megatron tracker file names (``latest_checkpointed_iteration.txt``: the
    newest complete checkpoint, written after it); -1 when there is none or it reads as no
    step (the job writes it: only a plain number of at most 12 digits counts)."""
    try:
        with open(os.path.join(ckpt_dir, tracker), "rb") as handle:
            text = handle.read(64).decode("ascii", "replace").strip()
    except OSError:
        return -1
    return int(text) if re.fullmatch(r"[0-9]{1,12}", text) else -1


def completed_checkpoints(
    ckpt_dir: str, pattern: str, unfinished: str, tracker: str = ""
) -> list[tuple[int, str]]:
    names = set(_listdir(ckpt_dir))
    newest = tracked_step(ckpt_dir, tracker) if tracker else None
    found = []
    for name in names:
        if unfinished and (name.endswith(unfinished) or f"{name}{unfinished}" in names):
            continue
        match = re.search(pattern, name) if pattern else None
        if match and os.path.isdir(os.path.join(ckpt_dir, name)):
            step = int(match.group(1))
            if newest is None or step <= newest:
                found.append((step, name))
    return sorted(found)


def collect_job(
    job: dict[str, Any], budget: int, max_ckpts: int, roots: list[str] | None = None
) -> dict[str, Any]:
    directory, main_log, restart = find_log(job)
    refused = main_log if main_log and not inside(main_log, roots or []) else ""
    main_log = "" if refused else main_log
    known_path = os.path.expanduser(job.get("log_path") or "")
    offset = int(job.get("log_offset") or 0) if main_log and main_log == known_path else 0
    result: dict[str, Any] = {
        "dir": directory,
        "restart": restart,
        "log": read_chunk(main_log, offset, budget),
        "refused": [refused] if refused else [],
    }
    if job.get("checkpoint_dir"):
        known = set(job.get("known_checkpoints") or [])
        done = completed_checkpoints(
            os.path.expanduser(job["checkpoint_dir"]),
            job.get("checkpoint_pattern") or "",
            job.get("unfinished_suffix") or "",
            job.get("tracker_file") or "",
        )
        base = os.path.expanduser(job["checkpoint_dir"])
        new = [
            {"step": s, "name": n, "bytes": dir_bytes(os.path.join(base, n))}
            for s, n in done
            if n not in known
        ][:max_ckpts]
        result["checkpoints"] = new
        result["checkpoints_truncated"] = sum(n not in known for _, n in done) > max_ckpts
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
    roots = [str(r) for r in payload.get("roots") or []]
    found_paths = evidence_files(job, directory)
    paths = [p for p in found_paths if inside(p, roots)]
    if main_log and not inside(main_log, roots):
        main_log = ""
    if main_log and os.path.normpath(main_log) in paths:
        paths.remove(os.path.normpath(main_log))
        paths.insert(0, os.path.normpath(main_log))
    total = int(payload.get("max_total_bytes", 512 << 10))
    per_file = max(
        4096, min(int(payload.get("max_bytes_per_file", 32 << 10)), total // max(len(paths), 1))
    )
    out: dict[str, Any] = {"dir": directory, "refused": sorted(set(found_paths) - set(paths))}
    if payload.get("sacct_argv"):
        out["sacct"] = _run([*payload["sacct_argv"], "-j", job["job_id"]], 20.0)
    out["files"] = files = [read_tail(p, per_file) for p in paths]
    # The whole of each file, not only its end: the first error lines before the tail.
    deadline = time.monotonic() + float(payload.get("scan_s", 8.0))
    patterns = [str(p) for p in payload.get("scan_patterns") or []]
    keywords = payload.get("scan_keywords")
    for found in files:
        if found.get("cut") and found.get("start", 0) > 0:
            found["first"] = first_errors(
                found["path"], found["start"], patterns, keywords, deadline
            )
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
            job, budget, int(payload.get("max_checkpoints", 50)), list(payload.get("roots") or [])
        )
    return out


def main(payload: dict[str, Any]) -> dict[str, Any]:
    return gather_evidence(payload) if payload.get("mode") == "evidence" else poll(payload)
