"""Babysitting on the dev cluster: automatic retries of known transient failures,
no retry for the ones that would fail again, hang detection, on-call pages, the
loss curve, and interactive jobs, with the stand-in's injected faults."""

from __future__ import annotations

import asyncio
import io
import re
import shlex
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.launch import Launch, Phase
from bot.runtime.assembly import Bot, running
from bot.text.front import Incoming
from cluster.launching.wandb_run import run_id as run_id_of
from tests import devlogin
from tests.bot.botkit import (
    PROJECT,
    Knobs,
    bot_settings,
    dev_config,
    knobs,
    launch_id_in,
    login_run,
    match_in,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

QUICK: Knobs = {"steps": 3, "step_time_s": 0.3, "save_time_s": 0.1}
ROUTING_KEY = "R0UTINGKEY0123456789abcdef0123456"


@asynccontextmanager
async def console_bot(**config: object) -> AsyncIterator[tuple[Bot, ConsoleFront]]:
    front = ConsoleFront(io.StringIO(), color=False)
    settings = bot_settings(TRAINBOT_PAGERDUTY_KEY=ROUTING_KEY)
    if config.get("cache_dir"):  # made as a person would: pre-flight checks mounts exist
        await asyncio.to_thread(login_run, f"mkdir -p {config['cache_dir']}")
    async with running(settings, dev_config(**config), front) as bot:  # type: ignore[arg-type]
        yield bot, front


async def train(bot: Bot, front: ConsoleFront, text: str, user: str = "alice") -> str:
    reply = await handle_line(f"/train {text}", bot.core, front, user=user)
    assert reply is not None and not reply.error, reply
    return launch_id_in(reply.text)


def thread(front: ConsoleFront) -> str:
    return "\n".join(front.lines)


async def test_tokenizer_race_is_retried_once_and_completes(unique: str) -> None:
    cache = f"~/.cache/tests/{unique}"  # cold: the race strikes the first attempt
    async with (
        knobs(unique, **QUICK, tokenizer_race="cold"),
        console_bot(cache_dir=cache, retry_backoff_s=0) as (bot, front),
    ):
        launch_id = await train(bot, front, f"cpt llama3p1_2b cluster=a3m name={unique}")
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    assert launch.outcome == "COMPLETED", thread(front)
    assert len(launch.attempts) == 2
    first, second = launch.attempts
    assert first.cause_key == "tokenizer_race" and not second.cause_key
    assert slurm_jobs_named(launch_id) == sorted([first.job_id, second.job_id])
    text = thread(front)
    assert re.search(
        rf"Job {first.job_id} failed \(FAILED\) after .*: the GPT-2 tokenizer download raced", text
    )
    assert "Invalid cross-device link: 'gpt2-vocab.json'" in text  # the evidence, quoted
    assert "Retrying with the same cache dir (attempt 2 of 3)" in text
    assert re.search(rf"Submitted: Slurm job {second.job_id} on a3m.*\(attempt 2\)", text)
    assert "✅ COMPLETED" in text and "2 attempts" in text
    login_run(f"rm -rf {cache}", check=False)


async def until_said(front: ConsoleFront, text: str, timeout_s: float = 30) -> str:
    """The console's whole conversation, once ``text`` is in it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while text not in thread(front):
        assert loop.time() < deadline, f"{text!r} never said:\n{thread(front)}"
        await asyncio.sleep(0.2)
    return thread(front)


async def test_cold_two_node_launches_meet_the_race_and_the_thread_names_it(unique: str) -> None:
    """The first run on a fresh machine, several times: 2 nodes, a cold cache each time.
    The race's traceback reaches the job's log and the thread, and the retry completes."""
    for run in range(3):
        cache = f"~/.cache/tests/{unique}-{run}"
        login_run(f"rm -rf {cache}", check=False)
        async with (
            knobs(unique, **QUICK, tokenizer_race="cold"),
            console_bot(cache_dir=cache, retry_backoff_s=0) as (bot, front),
        ):
            name = f"{unique}r{run}"
            launch_id = await train(bot, front, f"sft llama3p1_8b nodes=2 cluster=a4 name={name}")
            launch = await wait_for_launch(bot.store, launch_id)
            text = await until_said(front, "✅ COMPLETED")
        first = launch.attempts[0]
        assert launch.outcome == "COMPLETED" and len(launch.attempts) == 2, text
        assert first.cause_key == "tokenizer_race", text
        assert re.search(
            rf"Job {first.job_id} failed \(FAILED\) after .*: the GPT-2 tokenizer download raced",
            text,
        )
        assert "Invalid cross-device link: 'gpt2-vocab.json'" in text
        assert first.tracking is not None and first.tracking.log_path
        log = login_run(f"cat {shlex.quote(first.tracking.log_path)}")
        assert "OSError: [Errno 18] Invalid cross-device link: 'gpt2-vocab.json'" in log, log
        login_run(f"rm -rf {cache}", check=False)


async def test_the_first_run_completes_even_when_srun_cuts_the_traceback(unique: str) -> None:
    """Rank 0 exits the moment it has printed (``teardown_s=0``), so srun often drops the
    race's traceback (docs/devcluster.md says why). Named or not, the
    cold first run on 2 nodes is retried and completes."""
    causes = []
    for run in range(2):
        cache = f"~/.cache/tests/{unique}-{run}"
        login_run(f"rm -rf {cache}", check=False)
        async with (
            knobs(unique, **QUICK, tokenizer_race="cold", teardown_s=0),
            console_bot(cache_dir=cache, retry_backoff_s=0) as (bot, front),
        ):
            name = f"{unique}t{run}"
            launch_id = await train(bot, front, f"sft llama3p1_8b nodes=2 cluster=a4 name={name}")
            launch = await wait_for_launch(bot.store, launch_id)
            text = await until_said(front, "✅ COMPLETED")
        login_run(f"rm -rf {cache}", check=False)
        first = launch.attempts[0]
        assert launch.outcome == "COMPLETED" and len(launch.attempts) == 2, text
        assert first.cause_key in ("tokenizer_race", "unknown"), text
        if first.cause_key == "unknown":  # the traceback was cut: said, and retried once
            assert "srun force-terminated" in text and "retrying once as is" in text, text
        causes.append(first.cause_key)
    print("first-attempt causes with teardown_s=0:", causes)


async def test_tokenizer_race_twice_seeds_the_cache_then_completes(unique: str) -> None:
    cache = f"~/.cache/tests/{unique}"
    async with (
        knobs(unique, **QUICK, tokenizer_race="until_seeded"),
        console_bot(cache_dir=cache, retry_backoff_s=0) as (bot, front),
    ):
        launch_id = await train(bot, front, f"sft llama3p1_2b cluster=a3m name={unique}")
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    assert launch.outcome == "COMPLETED", thread(front)
    assert [a.cause_key for a in launch.attempts] == ["tokenizer_race", "tokenizer_race", ""]
    text = thread(front)
    assert "Seeding the tokenizer cache, then retrying (attempt 3 of 3)" in text
    assert "megatron-gpt-345m_vocab" in login_run(f"ls {cache}/torch/megatron")
    login_run(f"rm -rf {cache}", check=False)
    # Two retries, one W&B run: every attempt's job was given the launch's run id, the
    # first created it and the two retries resumed it (the stand-in records each start).
    run_id = run_id_of(launch_id)
    starts = login_run(f"cat ~/.cache/devcluster-wandb/{run_id}.starts").splitlines()
    assert [line.split()[0] for line in starts] == [f"job={a.job_id}" for a in launch.attempts]
    assert all(f"tags=launch:{launch_id},cluster:a3m,owner:" in line for line in starts)
    assert launch.run_links == [f"https://wandb.ai/devcluster/nemo/runs/{run_id}"]
    logs = [
        login_run(f"cat {a.tracking.log_path}") for a in launch.attempts if a.tracking is not None
    ]
    assert len(logs) == 3 and "Syncing run" in logs[0]
    assert all(f"wandb: Resuming run {run_id}" in log for log in logs[1:])


async def test_gpu_oom_is_not_retried_and_says_what_to_change(unique: str) -> None:
    async with knobs(unique, **QUICK, fault="oom", fault_at_step=1), console_bot() as (bot, front):
        launch_id = await train(bot, front, f"dpo llama3p1_8b cluster=a3u name={unique}")
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    assert launch.outcome == "FAILED"
    assert len(launch.attempts) == 1 and launch.attempts[0].cause_key == "gpu_oom"
    text = thread(front)
    assert "the GPU ran out of memory (rank 0)" in text
    assert "torch.OutOfMemoryError: CUDA out of memory." in text
    assert "Not retrying" in text and "smaller micro-batch" in text
    assert slurm_jobs_named(launch_id) == [launch.job_id]


async def test_nccl_timeout_is_retried_from_the_checkpoint(unique: str) -> None:
    async with (
        knobs(
            unique,
            steps=4,
            step_time_s=0.3,
            ckpt_every=1,
            fault="nccl",
            fault_at_step=3,
            fault_once=1,
        ),
        console_bot(retry_backoff_s=0) as (bot, front),
    ):
        launch_id = await train(bot, front, f"grpo llama3p1_8b cluster=a3h name={unique}")
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    assert launch.outcome == "COMPLETED", thread(front)
    first, second = launch.attempts
    assert first.cause_key == "nccl_timeout"
    assert "Retrying from the newest checkpoint (attempt 2 of 3)" in thread(front)
    log = login_run(f"cat ~/vertex-oss-training/nemo_rl/{second.job_id}/nemo_rl_output.log")
    assert re.search(rf"Loading checkpoint from (\S*/)?{first.job_id}/checkpoints/step_2\n", log), (
        log
    )
    assert "Step 1/4" not in log  # resumed, not restarted


async def test_silent_hang_is_reported_and_paged_once(unique: str, cancel_jobs: list[str]) -> None:
    async with (
        knobs(unique, steps=50, step_time_s=0.3, fault="hang", fault_at_step=2),
        console_bot(hang_min_s=4, hang_step_factor=1) as (bot, front),
    ):
        launch_id = await train(bot, front, f"rm llama3p1_8b cluster=a4 name={unique}")
        running_launch = await wait_for_launch(bot.store, launch_id, done=Phase.RUNNING)
        cancel_jobs.append(running_launch.job_id)

        async def reported() -> Launch | None:
            launch = await bot.store.launches.get(launch_id)
            return launch if launch and launch.attempts[-1].hang_reported else None

        await wait_until(reported, "the hang to be reported", 30)
        await asyncio.sleep(4.0)  # more polls: still one report, one page
        launch = await bot.store.launches.get(launch_id)
        assert launch is not None
        retry = await bot.core(
            Incoming(
                user_id="alice",
                channel_id="console",
                action_id="trainbot_retry",
                action_value=launch_id,
            )
        )
        assert not retry.error, retry.text

        async def resubmitted() -> Launch | None:
            launch = await bot.store.launches.get(launch_id)
            return (
                launch
                if launch and len(launch.attempts) == 2 and launch.attempts[-1].job_id
                else None
            )

        after = await wait_until(resubmitted, "the retry's job", 60)
        cancel_jobs.extend(a.job_id for a in after.attempts if a.job_id)
        await handle_line(f"/cancel {launch_id}", bot.core, front, user="alice")
        await wait_delivered(bot.store)
    text = thread(front)
    said = [line for line in front.lines if "No progress for" in line]
    # Once in the thread, mentioning the owner, and once as her DM after it.
    assert len(said) == 2, text
    assert said[0].lstrip(" └").startswith("@alice ⚠️ No progress for"), said
    assert said[1].startswith("(to @alice) rm llama3p1_8b on a4"), said
    assert re.search(r"No progress for .* \(last seen at step 1;", text)  # it hangs in step 2
    pages = [
        line for line in front.lines if line.startswith("<!subteam^S0ONCALL>") or "S0ONCALL" in line
    ]
    assert len(pages) == 1 and "silent hang" in pages[0], front.lines
    assert "Retry asked for by" in text


async def test_node_failure_requeue_runs_elsewhere_paged_once_and_resolved(
    unique: str, cancel_jobs: list[str]
) -> None:
    """Slurm requeues the job itself (JobRequeue=1; about two minutes later it runs on
    other nodes and resumes from its checkpoint): the bot says so, pages once, never
    submits a second copy, and resolves the page when the job completes."""
    knob: Knobs = {"steps": 60, "step_time_s": 0.5, "ckpt_every": 4, "save_time_s": 0.1}
    node_script = str(PROJECT / "devcluster" / "node")
    async with knobs(unique, **knob), console_bot() as (bot, front):
        text = f"sft llama3p1_8b framework=nemo-rl nodes=2 cluster=a4 name={unique}"
        launch_id = await train(bot, front, text)
        launch = await wait_for_launch(bot.store, launch_id, done=Phase.RUNNING)
        cancel_jobs.append(launch.job_id)

        async def checkpointed() -> bool:  # a checkpoint to resume from
            launch = await bot.store.launches.get(launch_id)
            return bool(launch and launch.checkpoints)

        await wait_until(checkpointed, "a checkpoint", 30)
        node = login_run(f"squeue -h -j {launch.job_id} -o %N").strip()
        victim = login_run(f"scontrol show hostnames {shlex.quote(node)} | tail -n 1").strip()
        subprocess.run([node_script, "fail", victim], check=True, capture_output=True)
        try:
            final = await wait_for_launch(bot.store, launch_id, timeout_s=300)
            await wait_delivered(bot.store)
        finally:
            subprocess.run([node_script, "restore", victim], check=True, capture_output=True)
    assert final.outcome == "COMPLETED", thread(front)
    assert final.attempts[-1].restarts == 1 and len(final.attempts) == 1
    again = login_run(
        f"scontrol show hostnames {shlex.quote(final.attempts[-1].node_list)}"
    ).split()
    assert len(again) == 2 and victim not in again  # ran again elsewhere
    text = thread(front)
    assert text.count(f"Slurm requeued job {launch.job_id} (restart 1)") == 1
    pages = [line for line in front.lines if "S0ONCALL" in line]
    assert len(pages) == 1 and "node failure" in pages[0] and "NODE_FAIL" in pages[0]
    assert sum(line.startswith("✅ Resolved") for line in front.lines) == 1
    assert slurm_jobs_named(launch_id) == [launch.job_id]  # no second copy of the job
    log = login_run(f"cat ~/vertex-oss-training/nemo_rl/{launch.job_id}/nemo_rl_output.log")
    assert "Loading checkpoint from" in log  # the new incarnation resumed


async def test_interactive_job_attach_command_runs_in_the_allocation(
    unique: str, cancel_jobs: list[str]
) -> None:
    async with knobs(unique, attach_delay_s=1), console_bot() as (bot, front):
        launch_id = await train(bot, front, f"interactive nodes=1 cluster=a3h name={unique}")
        launch = await wait_for_launch(bot.store, launch_id, done=Phase.RUNNING)
        cancel_jobs.append(launch.job_id)

        async def attach_ready() -> bool:
            launch = await bot.store.launches.get(launch_id)
            return bool(launch and launch.attempts[-1].attach_ready)

        await wait_until(attach_ready, "attach.sh", 30)
        await wait_delivered(bot.store)
        stranger = await handle_line(f"/attach {launch_id}", bot.core, front, user="mallory")
        reply = await handle_line(f"/attach {launch.job_id}", bot.core, front, user="alice")
        await handle_line(f"/cancel {launch_id}", bot.core, front, user="alice")
    assert stranger is not None and stranger.error
    assert reply is not None and not reply.error, reply
    assert "ready to attach" in thread(front)
    command = match_in(r"```(.*)```", reply.text, 1)
    remote = f"bash ~/vertex-oss-training/nemo_rl/{launch.job_id}/attach.sh"
    assert command == f"ssh -t -p 2222 trainer@127.0.0.1 {remote}"
    # Run it as a person would (with the dev cluster's key and host keys), a command for a shell.
    argv = shlex.split(command)
    argv[1:1] = devlogin.ssh_options()
    out = subprocess.run(
        [*argv, "bash", "-c", "'echo $SLURM_JOB_ID'"], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip().splitlines()[-1] == launch.job_id, out


async def test_loss_curve_is_uploaded_at_the_end_and_on_request(unique: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    front = ConsoleFront(io.StringIO(), color=False, files_dir=tmp_path)
    async with (
        knobs(unique, steps=6, step_time_s=0.3),
        running(bot_settings(), dev_config(), front) as bot,
    ):
        launch_id = await train(
            bot, front, f"sft llama3p1_8b framework=nemo-rl cluster=a3m name={unique}"
        )
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
        reply = await handle_line(f"/logs {launch_id} plot", bot.core, front, user="alice")
    assert launch.outcome == "COMPLETED"
    png = tmp_path / f"{launch_id}-loss.png"
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert [step for step, _ in launch.progress_history] == [1, 2, 3, 4, 5, 6]
    assert reply is not None and reply.file_content.startswith(b"\x89PNG")


@asynccontextmanager
async def pagerduty_receiver() -> AsyncIterator[tuple[str, list[dict[str, object]]]]:
    """A local stand-in for the PagerDuty Events API v2 endpoint: records, answers 202."""
    events: list[dict[str, object]] = []

    async def enqueue(request: web.Request) -> web.Response:
        events.append(await request.json())
        return web.json_response({"status": "success", "dedup_key": "x"}, status=202)

    app = web.Application()
    app.router.add_post("/v2/enqueue", enqueue)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v2/enqueue", events
    finally:
        await runner.cleanup()


async def test_hang_pages_pagerduty_and_a_retry_that_completes_resolves_it(unique: str) -> None:
    spec: Knobs = {
        "steps": 6,
        "step_time_s": 0.3,
        "fault": "hang",
        "fault_at_step": 3,
        "fault_once": 1,
    }
    async with (
        pagerduty_receiver() as (url, events),
        knobs(unique, **spec),
        console_bot(webhook_url=url, hang_min_s=3, hang_step_factor=1) as (bot, front),
    ):
        launch_id = await train(bot, front, f"rm llama3p1_70b cluster=a3m name={unique}")

        async def paged() -> bool:
            return bool(events)

        await wait_until(paged, "a PagerDuty trigger", 60)
        retry = await bot.core(
            Incoming(
                user_id="alice",
                channel_id="console",
                action_id="trainbot_retry",
                action_value=launch_id,
            )
        )
        assert not retry.error, retry.text
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    assert launch.outcome == "COMPLETED", thread(front)
    assert [e["event_action"] for e in events] == ["trigger", "resolve"], events
    trigger, resolve = events
    assert trigger["routing_key"] == ROUTING_KEY and trigger["dedup_key"] == resolve["dedup_key"]
    payload = trigger["payload"]
    assert isinstance(payload, dict) and "silent hang" in str(payload["summary"])
    assert ROUTING_KEY not in thread(front)
