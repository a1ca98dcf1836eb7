"""Reaching the dev cluster's login node from tests the way a person would: plain
OpenSSH with the dev key and strict host key checking."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

DEV = Path(__file__).resolve().parents[1] / ".devcluster"


def ssh_argv(*extra: str) -> list[str]:
    """``ssh ... trainer@127.0.0.1``; ``extra`` options go before the destination."""
    return [
        "ssh", "-q", "-i", str(DEV / "id_ed25519"), "-p", "2222",
        "-o", f"UserKnownHostsFile={DEV / 'known_hosts'}",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
        *extra, "trainer@127.0.0.1",
    ]  # fmt: skip


def run(
    command: str, *, stdin: str = "", timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a login shell on the login node."""
    return subprocess.run(
        [*ssh_argv(), "bash -lc " + shlex.quote(command)],
        input=stdin, capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
