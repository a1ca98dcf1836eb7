"""Reaching the dev cluster's login node from tests the way a person would: plain
OpenSSH with the dev key and strict host key checking."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

DEV = Path(__file__).resolve().parents[1] / ".devcluster"
SHARED = "trainer"  # the bot's shared account; the dev cluster's people are alice and bob


def key_of(user: str) -> Path:
    """The private key ``user`` logs in with: the bot's for the shared account, else their own."""
    return DEV / "id_ed25519" if user == SHARED else DEV / "people" / user / "id_ed25519"


def ssh_options(user: str = SHARED) -> list[str]:
    """What a person adds to the ssh command trainbot gives them: their key, the host keys."""
    return [
        "-i", str(key_of(user)), "-o", f"UserKnownHostsFile={DEV / 'known_hosts'}",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
    ]  # fmt: skip


def ssh_argv(*extra: str, user: str = SHARED) -> list[str]:
    """``ssh ... <user>@127.0.0.1``; ``extra`` options go before the destination."""
    return ["ssh", "-q", "-p", "2222", *ssh_options(user), *extra, f"{user}@127.0.0.1"]


def run(
    command: str, *, stdin: str = "", timeout_s: float = 60, user: str = SHARED
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a login shell on the login node, as ``user`` with their own key."""
    return subprocess.run(
        [*ssh_argv(user=user), "bash -lc " + shlex.quote(command)],
        input=stdin, capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


def copy_recipes_command(dest: str) -> str:
    """A shell command that copies the login node's recipes checkout (its scripts, images
    and stand-ins, none of its jobs' output) to ``dest``/vertex-oss-training, for a test
    that changes a file a site may have changed (run.py, configs/auth.sh)."""
    tree = f"{dest}/vertex-oss-training"
    return (
        f"mkdir -p {tree} && tar -C ~/vertex-oss-training --exclude=./nemo/experiments "
        "--exclude=./nemo/logs --exclude='./nemo_rl/[0-9]*' --exclude='./nemo_rl/slurm-*' "
        f"-cf - . | tar -C {tree} -xf - && mkdir -p {tree}/nemo/logs"
    )
