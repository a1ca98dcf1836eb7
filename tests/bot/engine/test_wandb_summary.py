"""A finished run's W&B summary read back with a read-only key, against a local stand-in
of W&B's GraphQL API (the real service is not reachable from these tests)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from bot.engine.wandb_summary import (
    RUN_QUERY,
    WandbReader,
    parse_run_link,
    parse_summary,
    read_back,
    reader_for,
)
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch, Phase, Sweep
from bot.lifecycle.sweeps import wandb_columns
from bot.store.store import Store
from bot.wording import following, thread
from commands.requests import TrainRequest
from support.wandb_standin import WandbStandin
from tests.bot.botkit import bot_settings, stream_entries

KEY = "0123456789abcdef0123456789abcdef01234567"
LINK = "https://wandb.ai/devcluster/nemo/runs/trainbot-l-7f3a9c"


@pytest.fixture
async def wandb() -> AsyncIterator[WandbStandin]:
    server = WandbStandin(key=KEY)
    server.runs[("devcluster", "nemo", "trainbot-l-7f3a9c")] = {
        "train/loss": 0.98, "val_loss": 1.02, "_step": 100, "_runtime": 12.5,
        "lr": 3e-5, "note": "text", "done": True, "bad": float("nan"),
    }  # fmt: skip
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.mark.parametrize(
    ("link", "expected"),
    [
        (LINK, ("devcluster", "nemo", "trainbot-l-7f3a9c")),
        ("https://wandb.example.com:8443/team/proj/runs/abc_1/", ("team", "proj", "abc_1")),
        ("https://wandb.ai/devcluster/nemo", None),
        ("http://wandb.ai/a/b/runs/c", None),
        ("https://wandb.ai/a/b/runs/c?x=1", None),
    ],
)
def test_run_links(link: str, expected: tuple[str, str, str] | None) -> None:
    assert parse_run_link(link) == expected


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"data": {"project": {"run": {"summaryMetrics": '{"loss": 1, "_step": 3}'}}}},
         {"loss": 1.0}),
        ({"data": {"project": {"run": None}}}, None),
        ({"data": {"project": None}}, None),
        ({"errors": [{"message": "nope"}]}, None),
        ({"data": {"project": {"run": {"summaryMetrics": "{not json"}}}}, None),
        ({"data": {"project": {"run": {"summaryMetrics": "[1, 2]"}}}}, None),
        ("<html>", None),
    ],
)  # fmt: skip
def test_summaries(payload: object, expected: dict[str, float] | None) -> None:
    assert parse_summary(payload) == expected


def test_the_line_escapes_what_the_run_chose() -> None:
    text = following.wandb_summary({"run": "r1", "metrics": {"<!channel>": 1.0, "loss": 0.98123}})
    assert "<!channel>" not in text and "&lt;!channel&gt; 1" in text and "loss 0.9812" in text


async def test_the_reader_asks_for_the_linked_run_with_the_key(wandb: WandbStandin) -> None:
    reader = WandbReader(wandb.base_url, SecretStr(KEY))
    assert await reader.summary(LINK) == {"train/loss": 0.98, "val_loss": 1.02, "lr": 3e-5}
    assert wandb.seen[-1]["key_ok"] and wandb.seen[-1]["query"] == RUN_QUERY
    assert wandb.seen[-1]["variables"] == {
        "entity": "devcluster", "project": "nemo", "name": "trainbot-l-7f3a9c",
    }  # fmt: skip
    assert await reader.summary(LINK.replace("7f3a9c", "000000")) is None  # unknown run


async def test_a_wrong_key_or_no_server_reads_nothing_and_logs_no_key(
    wandb: WandbStandin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "f" * 40
    assert await WandbReader(wandb.base_url, SecretStr(wrong)).summary(LINK) is None
    assert not wandb.seen[-1]["key_ok"]
    gone = WandbReader("http://127.0.0.1:1", SecretStr(KEY), timeout_s=2)
    assert await gone.summary(LINK) is None
    assert "HTTP 401" in caplog.text
    assert wrong not in caplog.text and KEY not in caplog.text


def test_no_key_no_reader() -> None:
    assert reader_for(bot_settings()) is None
    settings = bot_settings(TRAINBOT_WANDB_READ_KEY=KEY, TRAINBOT_WANDB_API_URL="http://x")
    reader = reader_for(settings)
    assert reader is not None and reader.url == "http://x/graphql"
    assert KEY not in repr(settings)


async def test_an_ended_launch_gets_its_summary_once(store: Store, wandb: WandbStandin) -> None:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    launch = Launch(request=request, user_id="U0ALICE", channel="C1", phase=Phase.DONE,
                    outcome="COMPLETED", run_links=[LINK])  # fmt: skip
    await store.launches.create(launch, [], enqueue=False)
    reader = WandbReader(wandb.base_url, SecretStr(KEY))
    await read_back(store, reader, launch)
    stored = await store.launches.get(launch.id)
    assert stored is not None and stored.wandb_read
    assert stored.wandb_summary == {"train/loss": 0.98, "val_loss": 1.02, "lr": 3e-5}
    await read_back(store, reader, stored)  # read once
    assert len(wandb.seen) == 1
    entries = await stream_entries(store.redis)
    said = [Event.decode(i, f) for i, f in entries if f["launch"] == launch.id]
    lines = [thread.line(e) for e in said if e.kind == "thread"]
    assert lines == [
        "📈 W&B summary of run `trainbot-l-7f3a9c`: lr 3e-05 · train/loss 0.98 · val_loss 1.02"
    ]


async def test_a_sweep_compares_its_members_summaries_once_all_are_read(
    store: Store, wandb: WandbStandin
) -> None:
    """Members' read-backs finish in any order: the last one posts the comparison, once."""
    other = "https://wandb.ai/devcluster/nemo/runs/trainbot-l-000002"
    wandb.runs[("devcluster", "nemo", "trainbot-l-000002")] = {"train/loss": 1.5, "val_loss": 2}
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    sweep = Sweep(user_id="U0ALICE", channel="C1", title="sft · llama3p1_8b", text="/train",
                  where="1 node × a4", keys=["optim.config.lr"])  # fmt: skip
    members = [
        Launch(id=f"L-00000{n}", request=request, user_id="U0ALICE", channel="C1",
               phase=Phase.DONE, outcome="COMPLETED", run_links=[link], sweep=sweep.id)
        for n, link in ((1, LINK), (2, other))
    ]  # fmt: skip
    sweep.members = [m.id for m in members]
    sweep.values = [["1e-5"], ["<3e-5>"]]
    assert await store.launches.create_sweep(sweep, members, [], enqueue=False)
    reader = WandbReader(wandb.base_url, SecretStr(KEY))
    await read_back(store, reader, members[1])
    assert await thread_lines(store, "📈 W&B summaries") == []  # member 1 not read yet
    await read_back(store, reader, members[0])
    await read_back(store, reader, members[0])  # again: nothing more
    (table,) = await thread_lines(store, "📈 W&B summaries")
    assert table.splitlines()[1:] == [
        "```#  optim.config.lr  train/loss  val_loss  lr",
        "1  1e-5             0.98        1.02      3e-05",
        "2  &lt;3e-5&gt;           1.5         2         -```",
    ], table


def test_no_summaries_no_comparison() -> None:
    sweep = Sweep(user_id="U", channel="C", title="t", text="/train", where="w", keys=["k"],
                  members=["L-000001"], values=[["1"]])  # fmt: skip
    assert wandb_columns(sweep, [None]) == ([], [])


async def thread_lines(store: Store, start: str) -> list[str]:
    """The thread lines in the outbox that start with ``start``, as bot.wording says them."""
    entries = await stream_entries(store.redis)
    said = [thread.line(Event.decode(i, f)) for i, f in entries if f["kind"] == "thread"]
    return [line for line in said if line.startswith(start)]
