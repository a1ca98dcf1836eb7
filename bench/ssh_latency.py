"""P3: one remote command's latency (``true`` on the login node), one at a time and 40
at once: trainbot's SSHPool (asyncssh, one kept connection) against nemo-run 0.11.1's
own ``SSHTunnel`` (fabric/paramiko) on a kept connection, and a fresh ``ssh`` per
command.

The SSHTunnel side runs in the dev cluster's nemo-run environment (the login node's
venv, on this machine): ``connect()`` once, then ``run("true")``; 40 at once are 40
threads sharing that one tunnel, as nemo-run's per-job wait threads share it. The
script is sent to that interpreter on stdin and prints its timings as JSON.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

from bench.common import LOGIN_SSH, NEMO_VENV_PYTHON, Row, ms, percentile, ratio
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool

GOAL = "≥ 8x faster than SSHTunnel sequential, ≥ 15x at 40 concurrent"
CONCURRENCY = 40

TUNNEL_SCRIPT = """
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
from nemo_run.core.tunnel.client import SSHTunnel

host, port, user, key, seq, rounds, conc = sys.argv[1:8]
tunnel = SSHTunnel(host=host, user=user, port=int(port), identity=key, job_dir="/tmp")
tunnel.connect()
tunnel.run("true")
sequential = []
for _ in range(int(seq)):
    started = time.perf_counter()
    tunnel.run("true")
    sequential.append(time.perf_counter() - started)

def one(_):
    started = time.perf_counter()
    tunnel.run("true")
    return time.perf_counter() - started

concurrent = []
with ThreadPoolExecutor(int(conc)) as pool:
    for _ in range(int(rounds)):
        concurrent += list(pool.map(one, range(int(conc))))
tunnel.cleanup()
print(json.dumps({"sequential": sequential, "concurrent": concurrent}))
"""


async def pool_latency(
    profile: ClusterProfile, seq: int, rounds: int
) -> tuple[list[float], list[float]]:
    async with SSHPool(max_channels=CONCURRENCY) as pool:
        login = profile.login
        await pool.run(login, "true", timeout_s=30)  # connect
        sequential = []
        for _ in range(seq):
            started = time.perf_counter()
            await pool.run(login, "true", timeout_s=30)
            sequential.append(time.perf_counter() - started)

        async def one() -> float:
            started = time.perf_counter()
            await pool.run(login, "true", timeout_s=60)
            return time.perf_counter() - started

        concurrent: list[float] = []
        for _ in range(rounds):
            concurrent += await asyncio.gather(*(one() for _ in range(CONCURRENCY)))
    return sequential, concurrent


def tunnel_latency(
    profile: ClusterProfile, seq: int, rounds: int
) -> tuple[list[float], list[float]]:
    login = profile.login
    argv = [
        str(NEMO_VENV_PYTHON),
        "-",
        login.host,
        str(login.port),
        login.user,
        str(login.key_file),
        str(seq),
        str(rounds),
        str(CONCURRENCY),
    ]
    done = subprocess.run(
        argv, input=TUNNEL_SCRIPT, capture_output=True, text=True, timeout=600, check=True
    )
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return list(data["sequential"]), list(data["concurrent"])


async def fresh_ssh(seq: int) -> tuple[list[float], list[float]]:
    async def one() -> float:
        started = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *LOGIN_SSH, "true", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        await proc.wait()
        return time.perf_counter() - started

    sequential = [await one() for _ in range(seq)]
    concurrent = list(await asyncio.gather(*(one() for _ in range(CONCURRENCY))))
    return sequential, concurrent


async def process_floor() -> float:
    """The same 40 commands as local processes (``bash -c true``, no SSH at all): what
    starting 40 processes costs this machine, the floor under any remote command."""
    started = time.perf_counter()
    procs = [await asyncio.create_subprocess_exec("bash", "-c", "true") for _ in range(CONCURRENCY)]
    await asyncio.gather(*(p.wait() for p in procs))
    return time.perf_counter() - started


async def measure(profile: ClusterProfile, *, seq: int, rounds: int) -> Row:
    measure_text = f"`true` on the login node: {seq} one at a time, {rounds}x{CONCURRENCY} at once"
    ours_seq, ours_conc = await pool_latency(profile, seq, rounds)
    fresh_seq, fresh_conc = await fresh_ssh(max(3, seq // 5))
    floor = await process_floor()
    notes = [
        f"fresh ssh: p50 {ms(percentile(fresh_seq, 0.5))} one at a time, "
        f"p50 {ms(percentile(fresh_conc, 0.5))} 40 at once",
        f"40 local `bash -c true` processes at once, no SSH: {ms(floor)} wall",
    ]
    figure = (
        f"p50 {ms(percentile(ours_seq, 0.5))} seq; p50 {ms(percentile(ours_conc, 0.5))} "
        f"p99 {ms(percentile(ours_conc, 0.99))} at {CONCURRENCY}"
    )
    if not NEMO_VENV_PYTHON.exists():
        return Row(
            "P3", measure_text, figure, "not measured", "-", GOAL, "not measured",
            [f"nemo-run's environment {NEMO_VENV_PYTHON} is missing", *notes],
        )  # fmt: skip
    tun_seq, tun_conc = await asyncio.to_thread(tunnel_latency, profile, seq, rounds)
    r_seq = ratio(percentile(tun_seq, 0.5), percentile(ours_seq, 0.5))
    r_conc = ratio(percentile(tun_conc, 0.5), percentile(ours_conc, 0.5))
    anchor = (
        f"SSHTunnel p50 {ms(percentile(tun_seq, 0.5))} seq; p50 {ms(percentile(tun_conc, 0.5))} "
        f"at {CONCURRENCY}"
    )
    ok = r_seq >= 8 and r_conc >= 15
    if r_conc < 15:
        notes.append(
            f"at {CONCURRENCY} at once both clients wait for the login node to start "
            f"{CONCURRENCY} sessions (sshd session, shell, `true`) on 2 cores; "
            f"trainbot's p50 {ms(percentile(ours_conc, 0.5))} vs {ms(floor)} for the bare processes"
        )
    return Row(
        "P3", measure_text, figure, anchor, f"{r_seq:.1f}x seq, {r_conc:.1f}x at {CONCURRENCY}",
        GOAL, "pass" if ok else "short", notes,
    )  # fmt: skip
