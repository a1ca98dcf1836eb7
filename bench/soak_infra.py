"""What the soak starts and breaks, outside trainbot: its own Redis, the ``trainbot
serve`` processes, the login node's sshd, dev cluster nodes and knob files. Slurm's
own record of the soak's jobs is :mod:`bench.soak_slurm`'s.

Every helper is bounded in time. Nothing here touches the shared Redis on 6379.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

PROJECT = Path(__file__).resolve().parents[1]
SSHD_PID = Path("/run/trainbot-devcluster-sshd.pid")
SSHD_CONFIG = Path("/var/lib/trainbot-devcluster/sshd_config")
LOGIN_PORT = 2222
LOGIN_USER = "trainer"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def run(argv: list[str], *, timeout_s: float = 60, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def wait_until(what: str, check: object, timeout_s: float, every_s: float = 0.3) -> None:
    """Until ``check()`` is true, or raise after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(every_s)
    raise TimeoutError(f"{what} not within {timeout_s:.0f} s")


# -- the soak's own Redis ------------------------------------------------------


@dataclass
class OwnRedis:
    """A redis-server with append-only persistence in a temp dir, on a free port."""

    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    appendfsync: str = "always"  # docker-compose.yml's Redis: everysec

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _ping(self) -> bool:
        try:
            out = subprocess.run(
                ["redis-cli", "-p", str(self.port), "ping"],
                capture_output=True, text=True, timeout=5, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
        return out.stdout.strip() == "PONG"

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.workdir), "--appendonly", "yes", "--appendfsync", self.appendfsync,
            "--save", "", "--daemonize", "no", "--logfile", str(self.workdir / "redis.log"),
        ]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await wait_until("the soak's redis", self._ping, 15)

    async def stop(self) -> None:
        """A clean restart's first half: SIGTERM (Redis writes and closes its AOF), then wait."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.proc.wait, 20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait, 10)


# -- Redis through Sentinel (devcluster/sentinel) -----------------------------

SENTINEL_SCRIPT = PROJECT / "devcluster" / "sentinel"
SENTINELS = (("127.0.0.1", 26379), ("127.0.0.1", 26380), ("127.0.0.1", 26381))
SENTINELS_ENV = ",".join(f"{host}:{port}" for host, port in SENTINELS)


def sentinel(command: str, timeout_s: float = 60) -> str:
    """``devcluster/sentinel <command>`` (up, down, primary, kill, revive); its output."""
    return subprocess.run(
        [str(SENTINEL_SCRIPT), command],
        check=True, capture_output=True, text=True, timeout=timeout_s,
    ).stdout.strip()  # fmt: skip


# -- trainbot serve processes --------------------------------------------------


@dataclass
class ServeProcess:
    """``trainbot serve`` in HTTP mode, as an operator runs it."""

    name: str
    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    async def start(self, timeout_s: float = 60) -> None:
        env = {**self.env, "TRAINBOT_HTTP_PORT": str(self.port)}
        with self.log_path.open("ab") as log:
            log.write(f"\n===== soak: start {self.starts + 1} at {time.ctime()} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bot", "serve"],
                cwd=PROJECT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.starts += 1
        await self.wait_healthy(timeout_s)

    async def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session:
            while time.monotonic() < deadline:
                if not self.alive:
                    raise RuntimeError(f"{self.name} exited; see {self.log_path}")
                try:
                    async with session.get(f"{self.base_url}/healthz") as response:
                        if response.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.5)
        raise TimeoutError(f"{self.name} not healthy within {timeout_s:.0f} s")

    def sigkill(self) -> None:
        if self.alive and self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    async def stop(self, timeout_s: float = 60) -> None:
        if not self.alive or self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.proc.wait, timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait, 10)


# -- the login node's sshd -----------------------------------------------------


def sshd_pid() -> int:
    try:
        pid = int(SSHD_PID.read_text().strip())
    except (OSError, ValueError):
        return 0
    return pid if pid_alive(pid) else 0


def sessions_of(client_pids: set[int]) -> set[int]:
    """The sshd processes serving TCP connections that ``client_pids`` opened to the login
    node (so that stopping the login node cuts this soak's bots, not everyone's)."""
    out = run(["ss", "-tnpH"], timeout_s=10)
    client_ports: set[str] = set()
    servers: list[tuple[str, set[int]]] = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        local, peer, users = parts[3], parts[4], " ".join(parts[5:])
        pids = {int(p) for p in re.findall(r"pid=(\d+)", users)}
        if peer.endswith(f":{LOGIN_PORT}") and pids & client_pids:
            client_ports.add(local.rsplit(":", 1)[1])
        elif local.endswith(f":{LOGIN_PORT}"):
            servers.append((peer.rsplit(":", 1)[1], pids))
    return {pid for port, pids in servers if port in client_ports for pid in pids}


async def stop_sshd(client_pids: set[int]) -> None:
    """Stop the login node's sshd (its listener) and cut the soak's bots' sessions."""
    pid = sshd_pid()
    if pid:
        os.kill(pid, signal.SIGTERM)
        await wait_until("the login node's sshd to stop", lambda: not pid_alive(pid), 15)
    for session in sessions_of(client_pids):
        try:
            os.kill(session, signal.SIGTERM)
        except ProcessLookupError:
            pass


async def start_sshd() -> None:
    """Start it again the way devcluster/up does (it writes its own pid file)."""
    if sshd_pid():
        return
    run(["/usr/sbin/sshd", "-f", str(SSHD_CONFIG)], timeout_s=30)
    await wait_until("the login node's sshd", lambda: port_open(LOGIN_PORT), 20)


# -- dev cluster nodes -----------------------------------------------------------


def node_fail(node: str) -> None:
    run([str(PROJECT / "devcluster" / "node"), "fail", node], timeout_s=60)


def node_restore(node: str) -> None:
    run([str(PROJECT / "devcluster" / "node"), "restore", node], timeout_s=60)


def expand_nodes(nodelist: str) -> list[str]:
    """``dev[1-2]`` -> ``[dev1, dev2]``; ``dev0`` -> ``[dev0]`` (the dev cluster's names)."""
    match = re.fullmatch(r"([a-z]+)\[([0-9,-]+)\]", nodelist)
    if not match:
        return [n for n in nodelist.split(",") if n and n not in ("None", "(null)")]
    names = []
    for part in match.group(2).split(","):
        low, _, high = part.partition("-")
        names += [f"{match.group(1)}{i}" for i in range(int(low), int(high or low) + 1)]
    return names


# -- stand-in knobs and the trainer's home ---------------------------------------


def trainer_home() -> Path:
    return Path(pwd.getpwnam(LOGIN_USER).pw_dir)


def chown_trainer(path: Path) -> None:
    entry = pwd.getpwnam(LOGIN_USER)
    os.chown(path, entry.pw_uid, entry.pw_gid)


def write_knobs(tag: str, values: dict[str, object]) -> Path:
    """``~trainer/devcluster-control/<tag>.env``: knobs for jobs whose name contains ``tag``."""
    control = trainer_home() / "devcluster-control"
    control.mkdir(exist_ok=True)
    path = control / f"{tag}.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    chown_trainer(path)
    return path


def remove_knobs(tag: str) -> None:
    control = trainer_home() / "devcluster-control"
    (control / f"{tag}.env").unlink(missing_ok=True)
    for spent in (control / "spent").glob(f"{tag}-*"):
        spent.unlink(missing_ok=True)


def make_trainer_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for part in [path, *path.parents]:
        if part == trainer_home():
            break
        chown_trainer(part)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def remove_if_empty(path: Path) -> None:
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()
