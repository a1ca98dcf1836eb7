"""P6: from a Slurm state change (start, each checkpoint, end) to its message in the
launch's thread, while the bot tracks the fleet's held launches on the same cluster.

Short real jobs are launched through ``/train`` (NeMo-RL DPO, 1 node, the
stand-in paced by a control file for jobs named ``<tag>-p6``: a few 1 s steps, a
checkpoint every 2). When each event happened: the job's Start and End as Slurm
recorded them (``sacct``, whole seconds: a latency can read up to 1 s long), and
each checkpoint's completion (the ``step_N`` directory's ctime: the stand-in renames
``tmp_step_N`` to ``step_N`` when the save is complete). When the thread heard it:
the stand-in's receipt of the message ("Running on", "Checkpoint step N saved",
the final COMPLETED line).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import subprocess
import time
from datetime import datetime

from bench.common import LOGIN_SSH, Row, ms, percentile, scancel
from bot.lifecycle.launch import Launch, Phase
from bot.store.store import Store
from support.slack_requests import post_signed, slash_command_body
from support.slack_standin import SlackStandin

LAUNCH_RE = re.compile(r"L-[0-9a-f]{4,12}")
STEP_RE = re.compile(r"Checkpoint step ([\d,]+) saved")


def _slurm_times(job_id: str) -> tuple[float, float]:
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", "Start,End", "-j", job_id],
        capture_output=True, text=True, timeout=30,
    ).stdout.strip().splitlines()  # fmt: skip
    start, end = (out[0].split("|") + ["", ""])[:2] if out else ("", "")

    def wall(text: str) -> float:
        try:
            return datetime.fromisoformat(text).timestamp()
        except ValueError:
            return float("nan")

    return wall(start), wall(end)


def _home(path: str) -> str:
    return path.replace("~", pwd.getpwnam("trainer").pw_dir, 1) if path.startswith("~") else path


async def measure(
    standin: SlackStandin,
    events_url: str,
    store: Store,
    *,
    cluster: str,
    count: int,
    tag: str,
    poll_interval_s: float,
    tracking: int,
    timeout_s: float,
) -> Row:
    goal = f"p99 ≤ poll interval + 2 s = {poll_interval_s + 2:g} s, tracking 1,000 jobs"
    measure_text = f"state change → thread message ({count} jobs, tracking {tracking:,})"
    knob = f"~/devcluster-control/{tag}-p6.env"
    subprocess.run(
        [*LOGIN_SSH, f"printf 'steps=6\\nstep_time_s=1\\nckpt_every=2\\n' > {knob}"],
        check=True, timeout=30,
    )  # fmt: skip
    launch_ids: list[str] = []
    jobs: list[str] = []
    try:
        for i in range(count):
            body = slash_command_body(
                "/train",
                f"dpo llama3p1_8b nodes=1 cluster={cluster} name={tag}-p6",
                user_id=f"U{tag.upper()}P6{i}",
            )
            answer = await post_signed(events_url, body)
            found = LAUNCH_RE.search(answer.body)
            if not found:
                raise RuntimeError(f"/train was not queued: {answer.body[:200]}")
            launch_ids.append(found.group(0))
        deadline = time.monotonic() + timeout_s
        launches: dict[str, Launch | None] = {}
        while time.monotonic() < deadline:
            launches = {lid: await store.launches.get(lid) for lid in launch_ids}
            jobs = [launch.job_id for launch in launches.values() if launch and launch.job_id]
            if all(launch and launch.phase == Phase.DONE for launch in launches.values()):
                break
            await asyncio.sleep(1)
        await asyncio.sleep(poll_interval_s + 3)  # the last messages delivered
    finally:
        scancel(jobs)
        subprocess.run([*LOGIN_SSH, f"rm -f {knob}"], timeout=30)
    latencies, unfinished = _latencies(standin, launches)
    every = [v for values in latencies.values() for v in values]
    if not every:
        return Row.failed(
            "P6", measure_text, goal,
            f"no launch completed within {timeout_s:g} s ({unfinished} of {count} unfinished; "
            "the dev nodes may have been busy)",
        )  # fmt: skip
    p99 = percentile(every, 0.99)
    ok = p99 <= poll_interval_s + 2 and unfinished == 0
    notes = [
        "; ".join(
            f"{kind}: n={len(v)} p50 {ms(percentile(v, 0.5))} max {ms(max(v))}"
            for kind, v in latencies.items()
            if v
        )
    ]
    if unfinished:
        notes.append(f"{unfinished} of {count} launches did not complete in time")
    return Row(
        "P6", measure_text,
        f"p50 {ms(percentile(every, 0.5))} p99 {ms(p99)} max {ms(max(every))} (n={len(every)})",
        f"poll interval {poll_interval_s:g} s",
        f"p99 = interval + {p99 - poll_interval_s:.2f} s",
        goal, "pass" if ok else "short", notes,
    )  # fmt: skip


def _latencies(
    standin: SlackStandin, launches: dict[str, Launch | None]
) -> tuple[dict[str, list[float]], int]:
    """Seconds from each event to its thread message, by kind; and how many launches did
    not complete."""
    offset = time.time() - time.monotonic()  # the stand-in stamps calls with monotonic time
    latencies: dict[str, list[float]] = {"start": [], "checkpoint": [], "end": []}
    unfinished = 0
    for launch in launches.values():
        if launch is None or launch.phase != Phase.DONE or launch.outcome != "COMPLETED":
            unfinished += 1
            continue
        thread = [
            (str(c.params.get("text", "")), c.at + offset)
            for c in standin.calls_to("chat.postMessage")
            if c.params.get("thread_ts") == launch.parent_ts
        ]
        start, end = _slurm_times(launch.job_id)
        for text, at in thread:
            if text.startswith("Running"):
                latencies["start"].append(at - start)
            elif " COMPLETED " in f" {text} " and "attempt" in text:
                latencies["end"].append(at - end)
            elif found := STEP_RE.search(text):
                step = int(found.group(1).replace(",", ""))
                tracking_rec = launch.attempt.tracking if launch.attempt else None
                if tracking_rec is None or not tracking_rec.checkpoint_dir:
                    continue
                path = os.path.join(_home(tracking_rec.checkpoint_dir), f"step_{step}")
                try:
                    done_at = os.stat(path).st_ctime
                except OSError:
                    continue
                latencies["checkpoint"].append(at - done_at)
    return latencies, unfinished
