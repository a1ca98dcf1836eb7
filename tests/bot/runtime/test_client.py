"""The CLI's API commands before and around the server: what is missing or unreachable is
said with what would be right, exit 2, and the token never appears in what is printed."""

from __future__ import annotations

import asyncio

import pytest

from bot.runtime.cli import main
from tests.bot import botkit
from tests.bot.botkit import free_port


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({}, "TRAINBOT_URL is not set"),
        ({"TRAINBOT_URL": "http://127.0.0.1:1"}, "TRAINBOT_TOKEN is not set"),
        ({"TRAINBOT_URL": "trainbot:3000", "TRAINBOT_TOKEN": "tbt_x"}, "must start with http"),
    ],
)
def test_what_is_missing_is_said(
    env: dict[str, str],
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("TRAINBOT_URL", "TRAINBOT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["jobs"]) == 2
    assert said in capsys.readouterr().err


def test_an_unreachable_server_is_said_without_the_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "tbt_" + "s" * 43
    monkeypatch.setenv("TRAINBOT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("TRAINBOT_TOKEN", token)
    assert main(["train", "sft", "llama3p1_8b"]) == 2
    out = capsys.readouterr()
    assert "cannot reach http://127.0.0.1:" in out.err and token not in out.err + out.out


async def test_token_create_prints_it_once_and_revoke_ends_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = botkit.DEV / "trainbot.yaml"
    if not config.is_file():
        pytest.skip("the dev cluster is not up: run devcluster/up first")
    await botkit.flush_test_redis()
    monkeypatch.setenv("REDIS_URL", botkit.TEST_REDIS)
    create = ["token", "create", "--user", "U0ALICE", "--ttl", "2h", "--config", str(config)]
    assert await asyncio.to_thread(main, [*create, "--scope", "read"]) == 0
    out = capsys.readouterr().out.splitlines()
    token = out[-1]
    assert token.startswith("tbt_") and token not in out[0] and "T-" in out[0]
    async with botkit.open_test_store() as store:
        record = await store.tokens.token_record(token)
        assert record is not None and record.scopes == ("read",)
        assert 7190 < record.expires_at - record.created_at <= 7200
        assert (
            await asyncio.to_thread(main, ["token", "revoke", record.id, "--config", str(config)])
            == 0
        )
        assert await store.tokens.token_record(token) is None
    assert (
        await asyncio.to_thread(main, ["token", "revoke", record.id, "--config", str(config)]) == 1
    )
    assert (
        await asyncio.to_thread(main, [*create[:4], "--ttl", "soon", "--config", str(config)]) == 2
    )
    assert "ttl 'soon' is not a duration" in capsys.readouterr().err
