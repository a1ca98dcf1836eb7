"""Everything a failed job left, gathered in one SSH round trip, for the diagnosis.

Not only the main log: a rank's stderr can be missing from it (streams and nodes that
share one output file can overwrite each other where Slurm truncates instead of
appending), so the evidence is every file the framework says the job writes (main log,
sbatch log, per-rank and stderr files) and Slurm's own record of the job (State,
ExitCode, DerivedExitCode, Reason, and the incarnations before a requeue). Of a file too
long to read whole, the end (``MAX_BYTES_PER_FILE``) is read, and the whole part before
it is searched on the login node for its first error lines, rank-aware (a 64-rank
failure's first error can be far from the end: every rank prints after it); the failure
catalog's patterns say what to look for. :func:`gather` is the one way evidence is made,
in production and in tests; :func:`cluster.watching.diagnosis.diagnose` reads it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from cluster.slurm.base import expand_hostlist
from cluster.slurm.sacct import NO_NODES, AcctRecord, build_sacct, merge_acct, parse_sacct
from cluster.ssh.connect import LoginLike
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import run_remote_python
from cluster.watching.collect_remote import GENERIC_ERROR_RE
from cluster.watching.failures import FailureKind, builtin_catalog
from cluster.watching.keywords import keywords
from cluster.watching.tracking import Tracking

EVIDENCE_TIMEOUT_S = 45.0
MAX_BYTES_PER_FILE = 32 * 1024
MAX_TOTAL_BYTES = 512 * 1024
SCAN_S = 10.0  # the login node's time for the first error lines of every file together


@dataclass(frozen=True)
class EvidenceFile:
    path: str
    text: str
    size: int  # -1: could not be read
    cut: bool = False  # only the end of the file was read
    first: tuple[str, ...] = ()  # the first error lines before that end, in file order
    scan_cut: bool = False  # the search for them ran out of time before the end


@dataclass(frozen=True)
class Evidence:
    """What one job left. ``state`` is Slurm's final word (from ``record`` when known)."""

    job_id: str
    files: tuple[EvidenceFile, ...] = ()
    record: AcctRecord | None = None
    state: str = ""

    @property
    def read(self) -> tuple[str, ...]:
        """The files that were read, by path."""
        return tuple(f.path for f in self.files if f.size >= 0)

    @property
    def text(self) -> str:
        """Every file's text (its first error lines, then its end), main log first, each
        ending in a newline."""
        return "".join(
            "".join(f"{line}\n" for line in f.first)
            + (f.text if f.text.endswith("\n") else f.text + "\n")
            for f in self.files
        )

    @property
    def raw_state(self) -> str:
        return self.record.latest.raw_state if self.record else self.state

    @property
    def exit_code(self) -> str:
        return self.record.latest.exit_code if self.record else ""

    @property
    def derived_exit_code(self) -> str:
        return self.record.latest.derived_exit_code if self.record else ""

    @property
    def reason(self) -> str:
        return self.record.latest.reason if self.record else ""

    @property
    def node_list(self) -> str:
        """The nodes of the incarnation that failed: the newest that ran anywhere."""
        if self.record is None:
            return ""
        rows = (*self.record.earlier, self.record.latest)
        ran = (r.nodelist for r in reversed(rows) if r.nodelist != NO_NODES)  # sacct's word
        return next((nodes for nodes in ran if expand_hostlist(nodes)), "")

    @property
    def earlier_states(self) -> tuple[str, ...]:
        return tuple(row.state for row in self.record.earlier) if self.record else ()

    def describe_read(self) -> str:
        """``log-x_5_0.out, sbatch_x_5.out in <dir>; Slurm's record`` for messages."""
        names: dict[str, list[str]] = {}
        for path in self.read:
            names.setdefault(os.path.dirname(path), []).append(os.path.basename(path))
        parts = [f"{', '.join(files)} in {folder}" for folder, files in names.items()]
        parts += ["Slurm's record of the job"] if self.record else []
        return "; ".join(parts) or "nothing (no file of the job was found)"


def scan_patterns(catalog: Sequence[FailureKind]) -> list[str]:
    """What the login node looks for in the whole of a job's files: every pattern of the
    catalog, once."""
    return list(dict.fromkeys(p.pattern for kind in catalog for p in kind.patterns))


def evidence_payload(
    tracking: Tracking,
    *,
    with_sacct: bool = True,
    catalog: Sequence[FailureKind] = (),
    roots: Sequence[str] = (),
) -> dict[str, Any]:
    """The remote half's input for one job (``catalog``: the built-in one when empty;
    ``roots``: only files inside these directories, links resolved, are read)."""
    patterns = scan_patterns(catalog or builtin_catalog())
    payload: dict[str, Any] = {
        "mode": "evidence",
        "job": tracking.payload(),
        "max_bytes_per_file": MAX_BYTES_PER_FILE,
        "max_total_bytes": MAX_TOTAL_BYTES,
        "scan_s": SCAN_S,
        "scan_patterns": patterns,
        "scan_keywords": keywords([*patterns, GENERIC_ERROR_RE]),
        "roots": list(roots),
    }
    if with_sacct:
        payload["sacct_argv"] = shlex.split(build_sacct(duplicates=True))
    return payload


def parse_evidence(raw: dict[str, Any], tracking: Tracking, *, state: str = "") -> Evidence:
    """The remote half's answer as :class:`Evidence` (pure). ``state`` is used when the
    answer holds no Slurm record (sacct lagging behind squeue)."""
    files = tuple(
        EvidenceFile(
            path=str(f.get("path", "")),
            text=str(f.get("text", "")),
            size=int(f.get("size", -1)),
            cut=bool(f.get("cut", False)),
            first=tuple(str(line[1]) for line in (f.get("first") or {}).get("lines", [])),
            scan_cut=bool((f.get("first") or {}).get("cut", False)),
        )
        for f in raw.get("files", [])
    )
    sacct = raw.get("sacct") or {}
    record = merge_acct(parse_sacct(sacct.get("stdout", ""))).get(tracking.job_id)
    return Evidence(
        job_id=tracking.job_id,
        files=files,
        record=record,
        state=record.latest.state if record else state,
    )


async def gather(
    pool: SSHPool,
    login: LoginLike,
    tracking: Tracking,
    *,
    state: str = "",
    record: AcctRecord | None = None,
    cluster: str = "",
    catalog: Sequence[FailureKind] = (),
    roots: Sequence[str] = (),
) -> Evidence:
    """Every file the job left and its Slurm record, in one round trip. ``state`` and
    ``record`` (what the poll saw) stand in when sacct has no record yet; ``catalog``
    (the site's, else the built-in one) says which lines to look for in whole files."""
    raw = await run_remote_python(
        pool,
        login,
        "watching/collect_remote.py",
        evidence_payload(tracking, catalog=catalog, roots=roots),
        timeout_s=EVIDENCE_TIMEOUT_S,
        cluster=cluster,
    )
    evidence = parse_evidence(raw, tracking, state=state)
    if evidence.record is None and record is not None:
        evidence = replace(evidence, record=record, state=record.latest.state)
    return evidence
