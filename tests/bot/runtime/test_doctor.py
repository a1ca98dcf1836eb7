"""``trainbot doctor``: one line per check, what the notifier owes and what Redis
replicates in words, and the exit status when a cluster cannot be reached."""

from __future__ import annotations

import io

from bot.lifecycle.events import Event
from bot.runtime.doctor import DoctorReport, delivery_text, replicas_text, run_doctor
from bot.settings.config import parse_config
from bot.settings.env import Target
from bot.store.keys import NOTIFY_DEAD_LETTERS
from bot.store.lanes import DeadLetter
from tests.bot.botkit import bot_settings, flush_test_redis

UNREACHABLE = """
clusters:
  a4:
    type: hcc-a4
    login: {host: 127.0.0.1, port: 1, user: trainer}
    partition: a4
    max_nodes: 4
"""


def test_each_check_is_one_line_and_failures_are_counted() -> None:
    out = io.StringIO()
    report = DoctorReport(out)
    report.line(True, "config trainbot.yaml", "2 clusters")
    report.line(False, "redis", "connection refused")
    report.line(True, "a4: recipes")
    assert report.failed == 1
    assert out.getvalue().splitlines() == [
        "ok   config trainbot.yaml: 2 clusters",
        "FAIL redis: connection refused",
        "ok   a4: recipes",
    ]


def test_what_the_notifier_owes_and_gave_up_on() -> None:
    assert delivery_text(0, 0, []) == "0 waiting; no dead letters"
    letter = DeadLetter(
        event=Event("thread", "L-7f3a"), lane="L-7f3a", reason="not_in_channel", tries=1,
        channel="C0OUT",
    )  # fmt: skip
    assert delivery_text(2, 1, [letter]) == (
        f"2 waiting; 1 dead letter in {NOTIFY_DEAD_LETTERS}, "
        "newest: L-7f3a thread in C0OUT: not_in_channel (1 try)"
    )
    letter.tries, letter.channel = 8, ""
    assert delivery_text(0, 3, [letter]).endswith(
        "3 dead letters in trainbot:notify:dead, newest: L-7f3a thread: not_in_channel (8 tries)"
    )
    assert delivery_text(0, 3, []) == f"0 waiting; 3 dead letters in {NOTIFY_DEAD_LETTERS}"


def test_replicas_against_what_the_writes_wait_for() -> None:
    assert replicas_text(Target(), 1) == "1 replica connected"
    assert replicas_text(Target(wait_replicas=1), 2) == "2 replicas connected"
    assert replicas_text(Target(wait_replicas=2, wait_timeout_ms=300), 1) == (
        "1 replica connected; REDIS_WAIT_REPLICAS=2 is more: every durable write waits 300 ms"
    )


async def test_a_cluster_it_cannot_reach_fails_the_run_and_redis_still_passes() -> None:
    await flush_test_redis()
    out = io.StringIO()
    settings = bot_settings(TRAINBOT_CONFIG="/etc/trainbot/trainbot.yaml")
    status = await run_doctor(settings, parse_config(UNREACHABLE), out)
    lines = out.getvalue().splitlines()
    assert status == 1
    assert lines[0] == "ok   config /etc/trainbot/trainbot.yaml: 1 clusters"
    where = settings.redis_target().describe()
    assert lines[1] == f"ok   redis {where}: 0 replicas connected"
    assert lines[2] == "ok   messages: 0 waiting; no dead letters"
    assert lines[3].startswith("FAIL a4: ssh trainer@127.0.0.1:1")
    assert lines[-1] == "1 check(s) failed"


async def test_a_job_secret_the_environment_lacks_is_said_and_fails_nothing() -> None:
    await flush_test_redis()
    out = io.StringIO()
    settings = bot_settings(TRAINBOT_CONFIG="/etc/trainbot/trainbot.yaml")
    config = UNREACHABLE + "    job_secrets: {HF_TOKEN: {env: TRAINBOT_HF_TOKEN}}\n"
    assert await run_doctor(settings, parse_config(config), out) == 1  # the ssh line alone
    lines = out.getvalue().splitlines()
    assert lines[3] == (
        "note a4: job secrets: HF_TOKEN is not configured for a4 (TRAINBOT_HF_TOKEN is "
        "unset): its launches go without it"
    )
    assert lines[4].startswith("FAIL a4: ssh") and lines[-1] == "1 check(s) failed"
