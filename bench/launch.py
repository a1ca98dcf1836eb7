"""P4: from the /train ack to the Slurm job id in the launch's thread, against the
same launch typed by hand.

trainbot: a signed ``/train sft llama3p1_8b nodes=1 cluster=<c> name=<tag>-p4b<i>``
to the running bot; the clock starts when the ack arrives and stops when the
stand-in receives the thread message naming the Slurm job (``Submitted: Slurm job
N ...``): queue, pre-flight (one round trip), the submit, the thread message.

By hand: the same recipe, nodes and cluster, the very script the launch path
builds (``cd`` to the recipes, ``python3 run.py ...``: nemo-run submitting with
its ``LocalTunnel``), sent over a fresh ``ssh login bash -l -s``, as a person
pasting the command into a new terminal; the clock stops when it prints the job.
Each job is cancelled as soon as its id is known. The two alternate.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import time

from bench.common import LOGIN_SSH, Row, ms, scancel
from bench.fleet import FLEET_USER, clusters_for
from bot.lifecycle.launch import Launch
from bot.settings.config import Config
from bot.store.store import Store
from cluster.launching.launch import plan_launch
from commands.context import User
from commands.dispatch import parse_command
from support.slack_requests import post_signed, slash_command_body
from support.slack_standin import SlackStandin

GOAL = "overhead ≤ 0.5 s over by hand"
LAUNCH_RE = re.compile(r"L-[0-9a-f]{4,12}")


def by_hand(config: Config, pool: object, cluster: str, name: str) -> tuple[float, str]:
    clusters = clusters_for(config, pool)
    request = parse_command(
        "/train",
        f"sft llama3p1_8b nodes=1 cluster={cluster} name={name}",
        user=User(id=FLEET_USER),
        context=config.command_context(),
    )
    launch = Launch(request=request, user_id=FLEET_USER, channel="C0BENCH")
    spec = clusters.spec_for(launch).spec
    script = plan_launch(spec).script(redact=False)
    started = time.perf_counter()
    done = subprocess.run(
        [*LOGIN_SSH, "bash -l -s"], input=script, capture_output=True, text=True, timeout=300
    )
    elapsed = time.perf_counter() - started
    job_id = spec.fw.tracking(spec, done.stdout).job_id
    return elapsed, job_id


async def through_bot(
    standin: SlackStandin, events_url: str, store: Store, cluster: str, name: str, user: str
) -> tuple[float, str]:
    body = slash_command_body(
        "/train", f"sft llama3p1_8b nodes=1 cluster={cluster} name={name}", user_id=user
    )
    answer = await post_signed(events_url, body)
    acked = time.monotonic()
    found = LAUNCH_RE.search(answer.body)
    if answer.status != 200 or not found:
        raise RuntimeError(f"/train was not queued: {answer.status} {answer.body[:200]}")
    launch_id = found.group(0)
    deadline = acked + 300
    while time.monotonic() < deadline:
        launch = await store.launches.get(launch_id)
        job_id = launch.job_id if launch else ""
        if job_id and launch is not None and launch.parent_ts:
            for call in standin.calls_to("chat.postMessage"):
                text = str(call.params.get("text", ""))
                if (
                    call.params.get("thread_ts") == launch.parent_ts
                    and f"Slurm job {job_id}" in text
                ):
                    return call.at - acked, job_id
        if launch is not None and launch.outcome and not job_id:
            raise RuntimeError(f"launch {launch_id} ended without a job: {launch.detail}")
        await asyncio.sleep(0.02)
    raise RuntimeError(f"no job id in the thread of {launch_id} within 300 s")


async def measure(
    standin: SlackStandin,
    events_url: str,
    store: Store,
    config: Config,
    pool: object,
    *,
    cluster: str,
    repeat: int,
    tag: str,
) -> Row:
    hand: list[float] = []
    bot: list[float] = []
    jobs: list[str] = []
    try:
        for i in range(repeat):
            elapsed, job_id = await asyncio.to_thread(
                by_hand, config, pool, cluster, f"{tag}-p4h{i}"
            )
            jobs.append(job_id)
            scancel([job_id])
            hand.append(elapsed)
            elapsed, job_id = await through_bot(
                standin, events_url, store, cluster, f"{tag}-p4b{i}", f"U{tag.upper()}P4{i}"
            )
            jobs.append(job_id)
            scancel([job_id])
            bot.append(elapsed)
    finally:
        scancel(jobs)
    overhead = statistics.median(bot) - statistics.median(hand)
    ok = overhead <= 0.5
    notes = [
        f"each run: bot {', '.join(ms(b) for b in bot)}; by hand {', '.join(ms(h) for h in hand)}"
    ]
    return Row(
        "P4",
        f"/train ack → job id in thread ({repeat} launch{'es' if repeat > 1 else ''}, median)",
        f"median {ms(statistics.median(bot))}",
        f"by hand (fresh ssh, run.py) median {ms(statistics.median(hand))}",
        f"overhead {overhead:+.2f} s ({statistics.median(bot) / statistics.median(hand):.2f}x)",
        GOAL,
        "pass" if ok else "short",
        notes,
    )
