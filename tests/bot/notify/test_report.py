"""The usage report: posted once per slot of its schedule with two bot processes running
(time compressed: a slot every 2 s), and what it says of charges."""

from __future__ import annotations

import asyncio
import io
import time

import pytest
import redis.asyncio as aioredis

from bot.console.chat import ConsoleFront, plain
from bot.notify.report import report_text
from bot.runtime.assembly import running
from bot.settings.config import Config
from bot.settings.sections import Report
from bot.store.budgets import Charge
from bot.store.nodes import NodeEntry, NodeRecord
from bot.text.front import Blocks, MessageRef
from tests.bot.botkit import TEST_REDIS, bot_settings, dev_config

REPORT_CHANNEL = "C0REPORT"


class Recording(ConsoleFront):
    """The console, noting when each report reached the report channel."""

    def __init__(self, posts: list[tuple[float, str]]) -> None:
        super().__init__(io.StringIO(), color=False)
        self.posts = posts

    async def post(
        self, channel: str, text: str, *, blocks: Blocks | None = None, thread_ts: str = ""
    ) -> MessageRef:
        if channel == REPORT_CHANNEL:
            self.posts.append((time.monotonic(), text))
        return await super().post(channel, text, blocks=blocks, thread_ts=thread_ts)


pytestmark = pytest.mark.usefixtures("clean_redis")


def with_report(config: Config, cron: str) -> Config:
    return config.model_copy(update={"report": Report(channel=REPORT_CHANNEL, cron=cron, days=1)})


@pytest.mark.devcluster
async def test_two_bot_processes_post_each_report_once() -> None:
    config = with_report(dev_config(), "*/2 * * * * *")
    posts: list[tuple[float, str]] = []
    async with (
        running(bot_settings(), config, Recording(posts), workers=0, instance="a"),
        running(bot_settings(), config, Recording(posts), workers=0, instance="b"),
    ):
        await asyncio.sleep(7.2)
    assert len(posts) >= 3, posts  # a slot every 2 s for 7 s
    times = sorted(at for at, _ in posts)
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert all(gap > 1.0 for gap in gaps), gaps  # never two posts of one slot
    assert all(text.startswith("*GPU usage report* ") for _, text in posts)
    client = aioredis.from_url(TEST_REDIS)
    try:
        marks = await client.keys("trainbot:report:*")
    finally:
        await client.aclose()
    assert len(marks) == len(posts), (marks, posts)


def test_a_bad_schedule_is_refused_with_an_example() -> None:
    with pytest.raises(ValueError, match=r"not a crontab schedule .*'0 9 \* \* mon'"):
        Report(channel=REPORT_CHANNEL, cron="every monday")


def test_the_report_ranks_people_and_clusters_and_counts_failed_runs_by_cause() -> None:
    def charge(
        n: int, user: str, cluster: str, hours: float, outcome: str, cause: str = ""
    ) -> Charge:
        return Charge(launch_id=f"L-{n:06x}", user_id=user, cluster=cluster, gpu_hours=hours,
                      ended_at=1000.0 + n, outcome=outcome, cause=cause)  # fmt: skip

    charges = [
        charge(1, "U1", "a4", 10.0, "COMPLETED"),
        charge(2, "U2", "a3m", 4.0, "FAILED", "cuda_oom"),
        charge(3, "U2", "a3m", 2.0, "FAILED", "cuda_oom"),
        charge(4, "U3", "a4", 4.0, "NODE_FAIL"),
        charge(5, "U3", "a4", 0.0, "CANCELLED"),
    ]
    text = report_text(charges, since=0.0, until=86400.0, top=2)
    # The window in each reader's own time zone; UTC where Slack cannot, and in a terminal.
    assert text.startswith(
        "*GPU usage report* <!date^0^{date_short_pretty} {time}|1970-01-01 00:00 UTC> to "
        "<!date^86400^{date_short_pretty} {time}|1970-01-02 00:00 UTC>: "
    ), text
    assert plain(text).startswith(
        "GPU usage report 1970-01-01 00:00 UTC to 1970-01-02 00:00 UTC: 20.00 GPU-hours"
    ), plain(text)
    assert "20.00 GPU-hours in 5 launches" in text, text
    assert "Top users: <@U1> 10.00, <@U2> 6.00\n" in text, text
    assert "Clusters: a4 14.00, a3m 6.00" in text, text
    assert "Failures by cause: cuda_oom 2, node_fail 1" in text, text
    assert "GPU-hours used by failed runs: 10.00 (50%)" in text, text


def test_a_run_that_stopped_early_is_no_failure_in_the_report() -> None:
    early = Charge(launch_id="L-000001", user_id="U1", cluster="a4", gpu_hours=3.0,
                   ended_at=1000.0, outcome="STOPPED_EARLY")  # fmt: skip
    text = report_text([early], since=0.0, until=86400.0, top=2)
    assert "3.00 GPU-hours in 1 launch" in text and "Failures by cause" not in text, text


def test_the_report_names_the_nodes_that_failed_launches_in_its_window() -> None:
    def failed(launch_id: str, at: float, cause_key: str = "xid_hardware") -> NodeEntry:
        return NodeEntry(at=at, launch_id=launch_id, job_id=launch_id[-2:], cause_key=cause_key)

    drained = NodeEntry(kind="drain", at=5000.0, by="U0BOB", reason="x")
    nodes = [
        NodeRecord("a4", "dev1", (failed("L-000003", 5000.0),)),
        NodeRecord("a4", "dev3", (drained, failed("L-000002", 4000.0, "node_failure"),
                                  failed("L-000001", 3000.0), failed("L-000000", 10.0))),
        NodeRecord("a3m", "dev0", (failed("L-000004", 10.0),)),  # before the window
    ]  # fmt: skip
    text = report_text([], since=1000.0, until=86400.0, top=5, nodes=nodes)
    assert text.endswith(
        "\nNodes that failed launches (launches, causes): "
        "a4/dev3 2 (node_failure, xid_hardware), a4/dev1 1 (xid_hardware)"
    ), text
    assert "dev0" not in text
    assert "Nodes that failed" not in report_text([], since=1000.0, until=86400.0, top=5)
