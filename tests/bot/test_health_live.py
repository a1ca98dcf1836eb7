"""Run health on the dev cluster: the NeMo stand-in prints a NaN loss (as NeMo's progress
printer does), a loss spike and a window of slow steps (knobs nan_at, spike_at, slow_at);
the poller reads them from the log and says each once."""

from __future__ import annotations

import asyncio
import io
import re

import pytest

from bot.config import Config, Health
from bot.console import ConsoleFront, handle_line
from bot.health import TRAINBOT
from bot.launches import Launch, Phase
from bot.service import running
from tests.bot.botkit import (
    LAUNCH_RE,
    bot_settings,
    dev_config,
    flush_test_redis,
    knobs,
    sacct_rows,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow]


def with_health(config: Config, **rules: object) -> Config:
    health = Health.model_validate(rules)
    return config.model_copy(update={"watch": config.watch.model_copy(update={"health": health})})


async def run_to_end(
    unique: str, cancel_jobs: list[str], config: Config, **values: object
) -> tuple[Launch, str]:
    front = ConsoleFront(io.StringIO(), color=False)
    async with (
        knobs(unique, tokenizer_race="off", **values),
        running(bot_settings(), config, front) as bot,
    ):
        reply = await handle_line(
            f"/train sft llama3p1_2b cluster=a3m name={unique}", bot.core, front, user="alice"
        )
        assert reply is not None and not reply.error, reply
        launch_id = LAUNCH_RE.search(reply.text).group(0)  # type: ignore[union-attr]
        try:
            final = await wait_for_launch(bot.store, launch_id, timeout_s=240)
            await asyncio.sleep(2.0)  # a retry, were one planned, would be queued by now
            await wait_delivered(bot.store)
            final = await bot.store.get(launch_id) or final
        finally:
            jobs = await asyncio.to_thread(slurm_jobs_named, launch_id)
            cancel_jobs.extend(j for j in jobs if j not in cancel_jobs)
    assert jobs == [final.job_id], jobs
    return final, "\n".join(front.lines)


async def test_a_nan_loss_stops_the_run_at_the_poll_that_reads_it_and_is_said_once(
    unique: str, cancel_jobs: list[str]
) -> None:
    await flush_test_redis()
    final, text = await run_to_end(
        unique, cancel_jobs, dev_config(retry_backoff_s=0), steps=200, step_time_s=0.5, nan_at=8
    )
    said = re.findall(r"@alice the training loss is nan at step 9\b", text)
    assert len(said) == 1, text
    assert "trainbot is stopping the run" in text, text
    assert final.outcome == "CANCELLED" and final.phase == Phase.DONE, text
    assert final.cancelled_by == TRAINBOT and final.health.nan_step == 9, final
    assert sacct_rows(final.job_id)[-1]["State"].startswith("CANCELLED"), text
    # One poll a second, 0.5 s a step: stopped within a few steps, not at step 200.
    assert final.progress.step < 30, final.progress
    assert f"ended (CANCELLED) after {TRAINBOT} (its loss went NaN) cancelled it" in text, text
    assert "Retrying" not in text and "attempt 2" not in text, text
    assert all(loss == loss for _, loss in final.progress_history), final.progress_history


async def test_a_run_that_completes_with_a_nan_loss_is_flagged_not_a_plain_success(
    unique: str, cancel_jobs: list[str]
) -> None:
    """Lightning prints ``train_loss: nan`` and exits 0: COMPLETED, with a NaN model."""
    await flush_test_redis()
    config = with_health(dev_config(), nan_action="flag")
    final, text = await run_to_end(
        unique, cancel_jobs, config, steps=12, step_time_s=0.3, nan_at=4, nan_value="inf"
    )
    assert len(re.findall(r"training loss is inf at step 5\b", text)) == 1, text
    assert "The run goes on (health policy: flag)" in text, text
    assert final.outcome == "COMPLETED" and not final.cancelled_by, text
    assert re.search(r"COMPLETED .*but its loss went NaN/inf at step 5", text), text


async def test_a_loss_spike_and_a_slow_step_window_are_each_said_once(
    unique: str, cancel_jobs: list[str]
) -> None:
    await flush_test_redis()
    final, text = await run_to_end(
        unique,
        cancel_jobs,
        dev_config(),
        steps=30,
        step_time_s=0.4,
        ckpt_every=100,
        spike_at=12,
        slow_at=18,
        slow_steps=5,
        slow_factor=4,
    )
    assert final.outcome == "COMPLETED", text
    assert len(re.findall(r"Loss spike at step 13\b", text)) == 1, text
    assert len(re.findall(r"Loss spike", text)) == 1, text
    assert len(re.findall(r"Steps are slow since step 19\b", text)) == 1, text
    assert len(re.findall(r"Steps are slow", text)) == 1, text
    assert len(re.findall(r"Step time is back to normal at step 24\b", text)) == 1, text
    assert "NaN" not in text.replace("NaN/inf", ""), text
