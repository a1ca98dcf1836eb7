"""Who may read a launch's logs: its owner, admins and the cluster's log viewers. Through the
signed HTTP front end (tests.bot.security.kit)."""

from __future__ import annotations

import pytest

from bot.text.actions import ACTION_LOGS
from support.slack_standin import SlackStandin
from tests.bot.security.kit import REFUSED_LOGS, secure_bot, seed

pytestmark = pytest.mark.devcluster


# -- who may see ---------------------------------------------------------------

# reader, how -> may read
LOG_READERS = [
    ("U0ALICE", "logs", True),  # the owner
    ("U0MALLORY", "logs", False),  # anyone else, with a guessed id
    ("U0MALLORY", "plot", False),
    ("U0MALLORY", "button", False),
    ("U0MALLORY", "slurm id", False),
    ("U0ADMIN", "logs", True),
    ("U0DAVE", "plot", True),  # admin by group
    ("U0TESS", "logs", True),  # policy.log_viewers: S0TEAM on a4
    ("U0TESS", "button", True),
]


@pytest.mark.parametrize(("reader", "how", "allowed"), LOG_READERS)
async def test_logs_only_for_owner_admins_and_viewers(
    standin: SlackStandin, log_file: str, reader: str, how: str, allowed: bool
) -> None:
    async with secure_bot(standin) as s:
        launch = await seed(s.bot, log_path=log_file)
        if how == "button":
            said = await s.click(ACTION_LOGS, launch.id, user=reader)
        elif how == "slurm id":
            said = await s.command("/logs", "990001", user=reader)
        else:
            said = await s.command(
                "/logs", f"{launch.id} {'plot' if how == 'plot' else ''}", user=reader
            )
    if allowed:
        assert REFUSED_LOGS not in said and ("Last" in said or "Loss curve" in said), said
    else:
        assert REFUSED_LOGS in said and "/jobs lists yours" in said, said
        assert "HF_TOKEN" not in said and "loss" not in said


async def test_log_viewers_are_per_cluster(standin: SlackStandin, log_file: str) -> None:
    async with secure_bot(standin) as s:
        launch = await seed(s.bot, cluster="a3m", log_path=log_file)
        said = await s.command("/logs", launch.id, user="U0TESS")
    assert REFUSED_LOGS in said and "log_viewers names for a3m" in said
