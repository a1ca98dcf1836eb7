"""Logging as operators get it: the level, JSON lines with a launch's fields, the
libraries kept quiet, secrets redacted on the JSON handler too, and the real
``trainbot serve`` process logging a real launch in JSON (and counting it in /metrics)."""

from __future__ import annotations

import io
import json
import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.core.redact import Redactor, install_log_filter, remove_log_filter
from bot.engine.worker import Worker
from bot.runtime.cli import build_parser, log_level
from bot.settings.env import Settings
from bot.settings.logs import configure_logging, launch_fields, log_context
from support.slack_requests import post_signed
from support.slack_requests import slash_command_body as slash
from support.slack_standin import SlackStandin
from tests.bot.botkit import (
    dev_config,
    flush_test_redis,
    knobs,
    launch_id_in,
    open_test_store,
    wait_delivered,
    wait_for_launch,
)
from tests.bot.runtime.test_serve import start_serve, wait_healthy


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in ("asyncssh", "slack_bolt")}
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


def lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


def test_json_lines_carry_the_launch_fields_and_exc_info(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    log = logging.getLogger("bot.engine.worker")
    log.debug("not shown at INFO")
    log.info("queued", extra=launch_fields("L-abc123", cluster="a4"))
    with log_context(launch_id="L-def456", cluster="a3m", job_id="4187"):
        logging.getLogger("cluster.ssh").warning("from deeper down")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    first, second, third = lines(out)
    assert set(first) == {"time", "level", "logger", "message", "launch_id", "cluster"}
    assert (first["level"], first["logger"], first["message"]) == (
        "INFO",
        "bot.engine.worker",
        "queued",
    )
    assert (first["launch_id"], first["cluster"]) == ("L-abc123", "a4")
    assert first["time"].endswith("+00:00")
    assert second["launch_id"] == "L-def456" and second["job_id"] == "4187"
    assert second["cluster"] == "a3m" and second["level"] == "WARNING"
    assert "launch_id" not in third  # outside the block: no stale fields
    assert "RuntimeError: boom" in third["exc_info"] and third["level"] == "ERROR"


def test_text_lines_keep_the_fields_readable(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging("INFO", "text", stream=out)
    with log_context(launch_id="L-abc123", cluster="a4"):
        logging.getLogger("bot.engine.poller").info(
            "job %s running", "4187", extra={"job_id": "4187"}
        )
    assert (
        out.getvalue()
        .rstrip()
        .endswith("INFO bot.engine.poller: job 4187 running launch=L-abc123 job=4187 cluster=a4")
    )


def test_libraries_stay_quiet_unless_debug_is_asked(restore_logging: None) -> None:
    configure_logging("INFO", "json", stream=io.StringIO())
    assert logging.getLogger("bot.core.core").isEnabledFor(logging.INFO)
    for name in ("asyncssh", "slack_bolt", "apscheduler"):
        assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
    configure_logging("DEBUG", "json", stream=io.StringIO())
    for name in ("bot.core.core", "asyncssh", "slack_bolt", "apscheduler"):
        assert logging.getLogger(name).isEnabledFor(logging.DEBUG), name


def test_the_level_comes_from_the_environment_and_serve_defaults_to_info() -> None:
    parser = build_parser()

    def level(argv: list[str], **env: str) -> str:
        return log_level(parser.parse_args(argv), Settings.from_environ(env))

    assert level(["serve"]) == "INFO"
    assert level(["console"]) == "WARNING"
    assert level(["serve"], TRAINBOT_LOG_LEVEL="debug") == "DEBUG"
    assert level(["-v", "serve"], TRAINBOT_LOG_LEVEL="ERROR") == "DEBUG"
    assert Settings.from_environ({"TRAINBOT_LOG_FORMAT": "JSON"}).log_format == "json"
    with pytest.raises(Exception, match="TRAINBOT_LOG_LEVEL"):
        Settings.from_environ({"TRAINBOT_LOG_LEVEL": "LOUD"})


def test_the_json_handler_is_redacted(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    secret = "hf_secret_value_123456"
    flt = install_log_filter(Redactor([secret]))
    try:
        log = logging.getLogger("bot.engine.worker")
        log.warning("token %s leaked", secret, extra=launch_fields("L-abc123"))
        try:
            raise ValueError(f"bad {secret}")
        except ValueError:
            log.exception("failed")
    finally:
        remove_log_filter(flt)
    assert secret not in out.getvalue()
    warning, error = lines(out)
    assert warning["message"] == "token [redacted] leaked" and warning["launch_id"] == "L-abc123"
    assert "bad [redacted]" in error["exc_info"]


async def test_a_worker_line_carries_its_launch(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    await flush_test_redis()
    async with open_test_store() as store:
        worker = Worker(store, None, name="test-worker")  # type: ignore[arg-type]
        await worker.handle("1-0", {"launch": "L-0badid"})
    [line] = [x for x in lines(out) if x["logger"] == "bot.engine.worker"]
    assert line["launch_id"] == "L-0badid" and line["level"] == "WARNING"


@pytest.mark.devcluster
@pytest.mark.slow
async def test_serve_logs_a_launch_as_json_lines(
    standin: SlackStandin, unique: str, tmp_path: Path
) -> None:
    dev_config()  # skips when the dev cluster is not up
    await flush_test_redis()
    proc, port = start_serve(standin, tmp_path, TRAINBOT_LOG_FORMAT="json", TRAINBOT_LOG_LEVEL=None)
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_healthy(f"{base}/healthz", proc)
        async with knobs(unique, steps=2, step_time_s=0.2), open_test_store() as store:
            body = slash("/train", f"rm llama3p1_8b cluster=a3h name={unique}")
            answer = await post_signed(f"{base}/slack/events", body)
            launch_id = launch_id_in(answer.json()["text"])
            launch = await wait_for_launch(store, launch_id)
            await wait_delivered(store)
        async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as got:
            exposition = await got.text()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    records = [json.loads(line) for line in out.splitlines() if line.strip()]  # every line parses
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    unexpected = [r for r in records if r["level"] not in ("INFO", "WARNING")]
    assert not unexpected, json.dumps(unexpected, indent=1)
    assert not [r for r in records if r["logger"].split(".")[0] in ("asyncssh", "apscheduler")]
    mine = [r for r in records if r.get("launch_id") == launch_id]
    queued = [r for r in mine if "queued" in r["message"]]
    submitted = [
        r for r in mine if r["logger"] == "bot.engine.worker" and "submitted" in r["message"]
    ]
    assert queued and queued[0]["cluster"] == "a3h"
    assert submitted and submitted[0]["job_id"] == launch.job_id
    assert submitted[0]["cluster"] == "a3h"
    # the same real launch, as /metrics of that process counted it
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }
    assert samples[("trainbot_launches_total", (("cause", "none"), ("outcome", "COMPLETED")))] == 1
    assert samples[("trainbot_poll_duration_seconds_count", (("cluster", "a3h"),))] >= 1
    assert samples[("trainbot_ssh_round_trip_seconds_count", (("cluster", "a3h"),))] >= 2
    assert samples[("trainbot_outbox_delivery_latency_seconds_count", ())] >= 3
    assert samples[("trainbot_queue_depth", ())] == 0
