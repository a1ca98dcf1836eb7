"""Fixtures of the security tests: clean Redis, the Slack stand-in with the groups
the policy names, and a job log that echoes secrets."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator

import pytest

from support.slack_standin import SlackStandin
from tests.bot.botkit import flush_test_redis, login_run
from tests.bot.security.kit import GROUPS, HF_TOKEN


@pytest.fixture(autouse=True)
async def clean_redis() -> None:
    await flush_test_redis()


@pytest.fixture
async def standin() -> AsyncIterator[SlackStandin]:
    server = SlackStandin(usergroups={k: list(v) for k, v in GROUPS.items()})
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
def log_file(unique: str) -> Iterator[str]:
    """A job log on the login node that echoes the job's secrets, as a careless job might
    (where the launch's logs are: under the recipes checkout, naming its job, 990001)."""
    home = login_run("echo $HOME").strip()
    logs = f"{home}/vertex-oss-training/nemo/logs/sectest-{unique}"
    path = f"{logs}/log-sectest_990001_0.out"
    b64 = base64.b64encode(f"token={HF_TOKEN}".encode()).decode()
    text = f"step 1 loss 2.5\\nHF_TOKEN={HF_TOKEN}\\nenv64={b64}\\n"
    login_run(f"mkdir -p {logs} && printf '{text}' > {path}")
    yield path
    login_run(f"rm -rf {logs}", check=False)
