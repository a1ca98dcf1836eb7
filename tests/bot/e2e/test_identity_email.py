"""An email cannot borrow an identity: on the dev cluster, through signed slash commands
against the Slack stand-in, a person whose Slack profile email names alice (mapped to
someone else), root, the shared account trainer, a system account, a user the login
node does not have, or any name from an unconfirmed email or another domain, is
refused with a message naming whom to ask, and nothing runs as them; alice (listed)
and bob (his confirmed email) still run as themselves."""

from __future__ import annotations

import pytest

from support.slack_requests import post_signed, slash_command_body
from support.slack_standin import SlackStandin
from tests.bot.botkit import (
    LAUNCH_RE,
    dev_config,
    wait_delivered,
    wait_for_launch,
)
from tests.bot.e2e.test_bot_slack_e2e import slack_bot, thread_texts

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

ALICE, BOBBY = "U0ALICE", "U0BOBBY"
BORROWERS = {
    "U0EVALICE": ("alice@example.com", "names alice, who is someone else here"),
    "U0EVROOT": ("root@example.com", "names root, which is not a person's user"),
    "U0EVSHARED": ("Trainer@example.com", "names trainer, which is not a person's user"),
    "U0EVDAEMON": ("daemon@example.com", "daemon is a system account on the login node"),
    "U0EVSLURM": ("slurm@example.com", "slurm is a system account on the login node"),
    "U0EVNOBODY": ("carol@example.com", "there is no user carol on the login node"),
    "U0EVDOMAIN": ("bob@evil.example", "is in evil.example, not in example.com"),
    "U0EVUNCONF": ("bob@example.com", "your Slack profile's email gives none"),
}


async def test_an_email_that_names_someone_else_root_or_the_shared_account_is_refused(
    standin: SlackStandin, unique: str
) -> None:
    for user_id, (email, _) in BORROWERS.items():
        standin.emails[user_id] = email
    standin.unconfirmed.add("U0EVUNCONF")
    standin.emails[BOBBY] = "Bob@example.com"
    config = dev_config(people={ALICE: "alice"}, unmapped="refuse", from_email=True)
    text = f"sft llama3p1_8b cluster=a4 name={unique} dry_run=true"
    async with slack_bot(standin, config=config) as (bot, slack):
        url = f"http://127.0.0.1:{slack.http_port}/slack/events"
        answers = {}
        for user_id in [*BORROWERS, ALICE, BOBBY]:
            body = slash_command_body("/train", text, user_id=user_id)
            answers[user_id] = (await post_signed(url, body)).json()["text"]
        launches = {}
        for user_id in (ALICE, BOBBY):
            found = LAUNCH_RE.search(answers[user_id])
            assert found is not None, answers[user_id]
            launches[user_id] = await wait_for_launch(bot.store, found.group(0))
        await wait_delivered(bot.store)
        for user_id, (_, why) in BORROWERS.items():
            message = answers[user_id]
            assert message.startswith(":warning: You have no user on a4"), (user_id, message)
            assert why in message, (user_id, message)
            ask = "Ask on-call (<!subteam^S0ONCALL>) to add you under clusters.a4.identity.users."
            assert message.endswith(ask), message
            # Nothing was stored or queued for them, so nothing can run as anyone.
            assert await bot.store.history.active_ids(user_id) == [], user_id
            assert await bot.store.history.entries(user_id=user_id) == [], user_id
        # The bot never logged in as any name those emails gave.
        logged_in = {key[2] for key in bot.clusters.pool._links}
        assert logged_in <= {"trainer", "alice", "bob"}, logged_in
    for user_id, unix_user in ((ALICE, "alice"), (BOBBY, "bob")):
        launch = launches[user_id]
        assert launch.cluster_user == unix_user and launch.outcome == "DRY_RUN", launch.ending
        dry = [t for t in thread_texts(standin, launch.parent_ts) if t.startswith("Dry run")]
        assert dry and f"On the login node, as {unix_user}, trainbot would run" in dry[0]
        assert "✓ " in dry[0] and "✗" not in dry[0], dry[0]
