"""Shared fixtures: the local dev cluster (skipped with a reason when it is not up),
an SSH pool to its login node, cluster profiles from its generated config, unique names."""

from __future__ import annotations

import shlex
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import yaml

from bench.soak_infra import sentinel
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import Result, SSHPool
from tests import devlogin

# hypothesis is imported here, at collection, and not first by its pytest plugin at the
# end of a session that ran no property test: that late import, deep in pluggy's stack,
# can meet a CPython 3.11 bug in ast's recursion-depth tracking ("SystemError: AST
# constructor recursion depth mismatch", as in pytest-dev/pytest#10763) and turn a
# green run of a few modules into a crash.
# No per-example deadline: on a loaded CI machine a 200 ms example is a slow machine,
# not a failed property (each property test still bounds its examples).
hypothesis.settings.register_profile("trainbot", deadline=None)
hypothesis.settings.load_profile("trainbot")

PROJECT = Path(__file__).resolve().parents[1]
DEV_CONFIG = PROJECT / ".devcluster" / "trainbot.yaml"
BASTION_CONFIG = PROJECT / ".devcluster" / "trainbot-bastion.yaml"
SSHD_PID = Path("/run/trainbot-devcluster-sshd.pid")
SSHD_CONFIG = Path("/var/lib/trainbot-devcluster/sshd_config")


def _dev_clusters() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(DEV_CONFIG.read_text())
    clusters: dict[str, dict[str, Any]] = data["clusters"]
    return clusters


@pytest.fixture(scope="session")
def dev_profiles() -> dict[str, ClusterProfile]:
    """Every cluster of .devcluster/trainbot.yaml as a profile; skips when it is missing."""
    if not DEV_CONFIG.is_file():
        pytest.skip(f"dev cluster not up: {DEV_CONFIG} missing (run devcluster/up as root)")
    return {name: ClusterProfile(name=name, **body) for name, body in _dev_clusters().items()}


@pytest.fixture(scope="session")
def dev_profile(dev_profiles: dict[str, ClusterProfile]) -> ClusterProfile:
    """The dev cluster's "a4" profile (all four point at the same login node)."""
    return dev_profiles["a4"]


@pytest.fixture(scope="session")
def bastion_profile() -> ClusterProfile:
    """The dev cluster as .devcluster/trainbot-bastion.yaml describes it: a generic Slurm
    GPU cluster ("hpc") whose login node only the bastion on 127.0.0.1:2200 reaches."""
    if not BASTION_CONFIG.is_file():
        pytest.skip(f"no {BASTION_CONFIG} (run devcluster/up as root)")
    body = yaml.safe_load(BASTION_CONFIG.read_text())["clusters"]["hpc"]
    return ClusterProfile(name="hpc", **body)


@pytest.fixture
async def pool() -> AsyncIterator[SSHPool]:
    async with SSHPool() as ssh_pool:
        yield ssh_pool


class LoginShell:
    """Runs plain commands on the dev login node as trainer, over the pool."""

    def __init__(self, pool: SSHPool, profile: ClusterProfile) -> None:
        self.pool, self.profile = pool, profile

    async def run(self, command: str, *, check: bool = True, timeout_s: float = 30) -> Result:
        return await self.pool.run(
            self.profile.login, command, timeout_s=timeout_s, check=check, cluster="dev"
        )

    async def exists(self, path: str) -> bool:
        result = await self.run(f"test -e {shlex.quote(path)}", check=False)
        return result.returncode == 0


@pytest.fixture
def login(pool: SSHPool, dev_profile: ClusterProfile) -> LoginShell:
    return LoginShell(pool, dev_profile)


@pytest.fixture
def unique() -> str:
    """A fresh name for experiments and markers."""
    return "t" + uuid.uuid4().hex[:8]


@pytest.fixture
def launch_id() -> str:
    return "L-" + uuid.uuid4().hex[:6]


@pytest.fixture
def jobs_to_cancel(dev_profile: ClusterProfile) -> Iterator[list[str]]:
    """Slurm job ids appended here are cancelled when the test ends, however it ends."""
    jobs: list[str] = []
    yield jobs
    if jobs:
        devlogin.run("scancel " + " ".join(jobs), timeout_s=30)


@pytest.fixture
def sentinel_set() -> Iterator[None]:
    """devcluster/sentinel's primary, replica and three sentinels, fresh for the test;
    skipped when redis-server or redis-cli is absent."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("redis-server and redis-cli are needed for a primary, a replica and sentinels")
    sentinel("down")
    sentinel("up")
    try:
        yield
    finally:
        sentinel("down")
