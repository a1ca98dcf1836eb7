"""What every part of ``bench/run`` shares: the table's rows, percentiles, the machine
line, the bot run as a separate process (``python -m bot serve``) against the Slack
stand-in, Slurm's own RPC counters, and cleaning up the jobs a run made.

Everything here runs on the dev cluster (``devcluster/up``) and a local Redis; the
bench uses its own Redis database (12 unless ``TRAINBOT_BENCH_REDIS`` names another, as a
number or a ``redis://127.0.0.1:6379/<number>`` URL)
and flushes only that one.
"""

from __future__ import annotations

import asyncio
import os
import platform
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis

from support.workspace import ASK_KEY

PROJECT = Path(__file__).resolve().parents[1]
DEV = PROJECT / ".devcluster"
DEV_CONFIG = DEV / "trainbot.yaml"


def bench_db(value: str) -> int:
    """The bench's database from ``TRAINBOT_BENCH_REDIS``: a number of the local Redis
    (``12``), or a URL naming one of its databases (``redis://127.0.0.1:6379/12``)."""
    found = re.fullmatch(r"(?:redis://(?:127\.0\.0\.1|localhost):6379/)?([0-9]+)", value.strip())
    if found is None:
        raise SystemExit(
            f"TRAINBOT_BENCH_REDIS={value!r} is not a database of the local Redis: give its "
            "number (12) or redis://127.0.0.1:6379/<number>"
        )
    return int(found[1])


BENCH_DB = bench_db(os.environ.get("TRAINBOT_BENCH_REDIS", "12"))
REDIS_URL = f"redis://127.0.0.1:6379/{BENCH_DB}"
# Where the bench's bot processes keep their store: REDIS_URL, unless bench/run
# --sentinels points them at a Sentinel set (docs/sentinel.md) instead; and the key
# the web role signs its asks with (the asks process checks it).
BOT_REDIS_ENV: dict[str, str] = {"REDIS_URL": REDIS_URL, "TRAINBOT_ASK_KEY": ASK_KEY}
NEMO_VENV_PYTHON = Path("/opt/trainbot-devcluster/nemo-run/bin/python3")
LOGIN_SSH = (
    "ssh",
    "-i",
    str(DEV / "id_ed25519"),
    "-o",
    f"UserKnownHostsFile={DEV / 'known_hosts'}",
    "-o",
    "BatchMode=yes",
    "-p",
    "2222",
    "trainer@127.0.0.1",
)


def run_tag() -> str:
    """A name prefix for this run's Slurm jobs: cleanup cancels only these."""
    return "bench" + secrets.token_hex(3)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]


def ms(seconds: float) -> str:
    if seconds != seconds:  # NaN
        return "n/a"
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def ratio(num: float, den: float) -> float:
    return num / den if den > 0 else float("inf")


@dataclass
class Row:
    """One line of the results table."""

    id: str
    measure: str
    figure: str
    anchor: str
    ratio: str
    goal: str
    verdict: str  # "pass", "short" or "not measured"
    notes: list[str] = field(default_factory=list)

    @classmethod
    def failed(cls, id: str, measure: str, goal: str, why: str) -> Row:
        return cls(id, measure, "not measured", "not measured", "-", goal, "not measured", [why])


def machine_line() -> str:
    cores = os.cpu_count() or 0
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    slurm = _output(["sinfo", "--version"]) or "Slurm unknown"
    redis_v = _output(["redis-server", "--version"]).split(" v=")[-1].split()[0:1]
    return (
        f"{cores} cores, {mem_kib / 1024 / 1024:.1f} GiB memory, {slurm.strip()}, "
        f"Python {platform.python_version()}, Redis {redis_v[0] if redis_v else 'unknown'}, "
        f"{platform.system()} {platform.release()}"
    )


def _output(argv: list[str], timeout_s: float = 30) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


# -- Redis ----------------------------------------------------------------


async def flush_bench_db() -> None:
    client = aioredis.from_url(REDIS_URL)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


async def redis_bytes() -> int:
    """The memory every key of the bench database takes (``MEMORY USAGE``, summed)."""
    client = aioredis.from_url(REDIS_URL)
    total = 0
    try:
        batch: list[bytes] = []
        async for key in client.scan_iter(count=1000):
            batch.append(key)
            if len(batch) >= 500:
                total += await _usage(client, batch)
                batch = []
        total += await _usage(client, batch)
    finally:
        await client.aclose()
    return total


async def _usage(client: aioredis.Redis, keys: list[bytes]) -> int:
    if not keys:
        return 0
    async with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.memory_usage(key, samples=0)
        return sum(int(v or 0) for v in await pipe.execute())


# -- Slurm ------------------------------------------------------------------

_RPC_LINE = re.compile(r"^\s+([A-Z_]+)\s+\(\s*\d+\)\s+count:(\d+)")


def slurm_counters() -> dict[str, int]:
    """slurmctld's RPC counts by message type (``sdiag``) and slurmdbd's
    (``sacctmgr show stats``), as ``ctld:NAME`` and ``dbd:NAME``."""
    counts: dict[str, int] = {}
    for prefix, argv in (("ctld", ["sdiag"]), ("dbd", ["sacctmgr", "-n", "show", "stats"])):
        section = False
        for line in _output(argv).splitlines():
            if line.startswith("Remote Procedure Call statistics by message type"):
                section = True
                continue
            if section and line.startswith("Remote Procedure Call statistics by"):
                break
            found = _RPC_LINE.match(line) if section else None
            if found:
                counts[f"{prefix}:{found.group(1)}"] = int(found.group(2))
    return counts


def job_info_rpcs(before: dict[str, int], after: dict[str, int]) -> tuple[int, int]:
    """(slurmctld job-information RPCs, slurmdbd job queries) between two readings:
    what ``squeue`` (REQUEST_JOB_INFO and its single-job and per-user forms) and
    ``sacct`` (DBD_GET_JOBS_COND) cost."""

    def delta(name: str) -> int:
        return max(0, after.get(name, 0) - before.get(name, 0))

    ctld = sum(delta(k) for k in after if k.startswith("ctld:") and "JOB_INFO" in k)
    ctld += delta("ctld:REQUEST_JOB_USER_INFO")
    return ctld, delta("dbd:DBD_GET_JOBS_COND")


def slurm_version() -> str:
    return _output(["sinfo", "--version"]).strip()


def scancel(job_ids: Sequence[str]) -> None:
    """Cancel jobs by id (as root, on this machine), in chunks."""
    ids = [j for j in job_ids if j]
    for start in range(0, len(ids), 2000):
        subprocess.run(["scancel", *ids[start : start + 2000]], capture_output=True, timeout=120)


def jobs_named(prefix: str) -> list[str]:
    """Ids of the queued or running jobs whose name starts with ``prefix``."""
    out = _output(["squeue", "-h", "-a", "-o", "%i|%j"], timeout_s=120)
    return [
        line.split("|", 1)[0]
        for line in out.splitlines()
        if "|" in line and line.split("|", 1)[1].startswith(prefix)
    ]


def cancel_named(prefix: str) -> int:
    ids = jobs_named(prefix)
    scancel(ids)
    return len(ids)


def dev_cluster_up() -> str:
    """Empty when the dev cluster is usable, else why not."""
    if not DEV_CONFIG.exists():
        return f"{DEV_CONFIG} is missing: run devcluster/up (or link .devcluster)"
    if not _output(["sinfo", "-h", "-o", "%P"]):
        return "Slurm does not answer (sinfo)"
    done = subprocess.run([*LOGIN_SSH, "true"], capture_output=True, timeout=30)
    if done.returncode != 0:
        return f"the login node does not answer: {done.stderr.decode(errors='replace')[-200:]}"
    return ""


# -- the bot as a process ---------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_config(directory: Path, *, poll_interval_s: float = 2.0) -> Path:
    """The dev cluster's config with the bench's limits (anyone may run many launches, the
    given poll interval)."""
    import yaml

    data = yaml.safe_load(DEV_CONFIG.read_text())
    for body in data["clusters"].values():
        body["poll_interval_s"] = poll_interval_s
    for rule in data.get("policy", {}).get("rules", []):
        rule["max_concurrent"] = 100000
    path = directory / "trainbot.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class BotProcess:
    """``python -m bot serve`` in HTTP mode against the stand-in and the bench's Redis."""

    def __init__(self, api_url: str, config: Path, log_path: Path, *, role: str = "all") -> None:
        self.api_url, self.config, self.log_path, self.role = api_url, config, log_path, role
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def events_url(self) -> str:
        return f"{self.base}/slack/events"

    async def start(self, timeout_s: float = 60) -> None:
        from support.workspace import BOT_TOKEN, SIGNING_SECRET

        env = {k: v for k, v in os.environ.items() if k != "SLACK_APP_TOKEN"}
        env.update(
            TRAINBOT_CONFIG=str(self.config),
            **BOT_REDIS_ENV,
            SLACK_BOT_TOKEN=BOT_TOKEN,
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=self.api_url,
            TRAINBOT_HTTP_PORT=str(self.port),
            TRAINBOT_HF_TOKEN="hf_bench_placeholder_value",
            TRAINBOT_LOG_LEVEL=os.environ.get("TRAINBOT_BENCH_LOG_LEVEL", "WARNING"),
        )
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve", "--role", self.role],
            cwd=PROJECT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"the bot exited ({self.proc.returncode}); see {self.log_path}"
                    )
                try:
                    async with session.get(f"{self.base}/healthz") as r:
                        # a web-only process reports no poller as unhealthy, yet serves
                        if r.status == 200 or (self.role != "all" and r.status == 503):
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)
        raise RuntimeError(f"the bot never became healthy; see {self.log_path}")

    def rss_bytes(self) -> int:
        if self.proc is None:
            return 0
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    async def metrics(self) -> dict[str, float]:
        """``/metrics`` as ``{name{labels}: value}``."""
        async with aiohttp.ClientSession() as session, session.get(f"{self.base}/metrics") as r:
            text = await r.text()
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    values[name] = float(value)
                except ValueError:
                    continue
        return values

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def metric(values: dict[str, float], name: str, **labels: str) -> float:
    """The value of one series (0 when absent); labels in any order."""
    want = {f'{k}="{v}"' for k, v in labels.items()}
    total = 0.0
    for key, value in values.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        have = set(rest.rstrip("}").split(",")) if rest else set()
        if want <= have:
            total += value
    return total
