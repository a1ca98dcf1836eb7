"""Fixtures for the dev cluster's own tests: plain OpenSSH with strict host keys."""

from __future__ import annotations

import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import devlogin

PROJECT = Path(__file__).resolve().parents[2]
DEV = PROJECT / ".devcluster"
HOME = "/home/trainer"
RECIPES = f"{HOME}/vertex-oss-training"
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


@dataclass
class Login:
    """The dev cluster's login node, reached the way a person would."""

    def ssh_argv(self, *extra: str) -> list[str]:
        return devlogin.ssh_argv(*extra)

    def run(
        self, command: str, *, check: bool = True, timeout_s: float = 60, stdin: str = ""
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` in a login shell on the login node."""
        proc = devlogin.run(command, stdin=stdin, timeout_s=timeout_s)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{command!r} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def read(self, path: str) -> str:
        return self.run(f"cat {shlex.quote(path)}").stdout

    def exists(self, path: str) -> bool:
        return self.run(f"test -e {shlex.quote(path)}", check=False).returncode == 0

    def sacct(self, job_id: str, *, duplicates: bool = False) -> list[dict[str, str]]:
        fields = ["JobID", "JobName", "State", "ExitCode", "NNodes", "Partition", "NodeList"]
        dflag = "-D " if duplicates else ""
        out = self.run(f"sacct {dflag}-X -P -n -o {','.join(fields)} -j {job_id}").stdout
        return [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines()]

    def wait_for_state(
        self, job_id: str, states: tuple[str, ...] = TERMINAL, timeout_s: float = 120
    ) -> dict[str, str]:
        deadline = time.monotonic() + timeout_s
        last: list[dict[str, str]] = []
        while time.monotonic() < deadline:
            last = self.sacct(job_id)
            # Right after a job ends, slurmdbd may still hold a partial record
            # (no partition yet): wait for the whole row.
            if last and last[-1]["State"].split()[0] in states and last[-1]["Partition"]:
                return last[-1]
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} did not reach {states} in {timeout_s}s: {last}")

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@pytest.fixture(scope="session")
def login() -> Login:
    if not (DEV / "known_hosts").exists():
        pytest.skip("the dev cluster is not up: run devcluster/up first")
    return Login()


@pytest.fixture
def unique() -> str:
    return "t" + uuid.uuid4().hex[:8]


@pytest.fixture
def cancel_after(login: Login) -> Iterator[list[str]]:
    """Job ids appended here are cancelled when the test ends, however it ends."""
    jobs: list[str] = []
    yield jobs
    if jobs:
        login.run("scancel " + " ".join(jobs), check=False)
