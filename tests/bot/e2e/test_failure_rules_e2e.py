"""A site's own failure rules (``failures:`` in the config) change what the poller does
with a failed job on the dev cluster: the stand-in prints a real GPU OOM, the poller
reads the job's files on the login node, and the site's reaction and cap apply."""

from __future__ import annotations

import pytest

from tests.bot.botkit import knobs, slurm_jobs_named, wait_delivered, wait_for_launch
from tests.bot.e2e.test_babysit_e2e import QUICK, console_bot, thread, train

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]


async def test_a_site_rule_retries_a_gpu_oom_once_then_stops(unique: str) -> None:
    """Built in, a GPU OOM is not retried; this site retries it once as is (max_retries: 1)."""
    rule = "[{key: gpu_oom, reaction: retry, max_retries: 1}]"
    async with (
        knobs(unique, **QUICK, fault="oom", fault_at_step=1),
        console_bot(retry_backoff_s=0, failures=rule) as (bot, front),
    ):
        launch_id = await train(bot, front, f"dpo llama3p1_8b cluster=a3u name={unique}")
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    text = thread(front)
    assert launch.outcome == "FAILED", text
    assert [a.cause_key for a in launch.attempts] == ["gpu_oom", "gpu_oom"], text
    assert "the GPU ran out of memory (rank 0)" in text
    assert "This is transient. Retrying as is (attempt 2 of 3)..." in text
    assert "Not retrying: this cause is retried at most once per launch." in text
    assert slurm_jobs_named(launch_id) == sorted(a.job_id for a in launch.attempts)


async def test_a_site_entry_names_its_own_cause_and_pages(unique: str) -> None:
    """A new entry is checked before the built-in ones: its cause, hint and page."""
    rule = (
        "[{key: site_gpu_memory, cause: 'GPU memory ran out on a shared node', "
        "reaction: page, page: first, hint: 'On-call: check the node for stray processes.', "
        "no_retry: 'the node needs a look first', patterns: ['CUDA out of memory']}]"
    )
    async with (
        knobs(unique, **QUICK, fault="oom", fault_at_step=1),
        console_bot(failures=rule) as (bot, front),
    ):
        launch_id = await train(bot, front, f"dpo llama3p1_8b cluster=a3u name={unique}")
        launch = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
    text = thread(front)
    assert launch.outcome == "FAILED", text
    assert [a.cause_key for a in launch.attempts] == ["site_gpu_memory"], text
    assert "GPU memory ran out on a shared node (rank 0)" in text
    assert "Not retrying: the node needs a look first." in text
    assert "site_gpu_memory" in launch.open_alerts[0], launch.open_alerts
