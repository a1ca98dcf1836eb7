"""A refusal that names whom to ask leaves the gateway as facts, never as Slack markup:
``NoUser`` and ``Readmission`` carry the reason as plain text and the admins and on-call
as Slack ids (bot/wording/refusals.py words them; its tests hold the words). Real Redis
and the dev cluster's config; nobody here is mapped, so no login node is asked."""

from __future__ import annotations

import pytest

from bot.gateway.authority import Authority
from bot.gateway.identity import NoUser, People
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.launch import Launch
from bot.settings.config import Config
from cluster.ssh.pool import SSHPool
from commands.context import User
from commands.policy import Policy, PolicyRule, Principals
from commands.requests import TrainRequest
from tests.bot.botkit import bot_settings, dev_config, flush_test_redis, open_test_store

POLICY = Policy(
    admins=Principals(users=("U0ADMIN", "*"), groups=("S0ADMINS",)),
    rules=(PolicyRule(users=("U0BOB",)),),
)
ASK = {"users": ["U0ADMIN"], "groups": ["S0ADMINS"], "oncall": "S0ONCALL", "cluster": "a4"}


def config_refusing_the_unmapped() -> Config:
    config = dev_config(people={"U0ALICE": "alice"}, unmapped="refuse")
    alerts = config.alerts.model_copy(update={"oncall_usergroup": "S0ONCALL"})
    return config.model_copy(update={"policy": POLICY, "alerts": alerts})


async def test_no_user_carries_the_reason_as_text_and_whom_to_ask_as_ids() -> None:
    await flush_test_redis()
    config = config_refusing_the_unmapped()
    async with open_test_store() as store, SSHPool() as pool:
        clusters = Clusters(config, bot_settings(), pool, store)
        with pytest.raises(NoUser) as refused:
            await People(clusters, None, clusters).cluster_user("a4", User(id="U0BOB"))
    facts = refused.value.facts
    assert facts["ask"] == ASK  # "*" is nobody to ask
    assert facts["reason"] == (
        "You have no user on a4: trainbot runs each person's jobs there as their own Unix "
        "user, and its configuration names none for you (Slack user U0BOB)."
    )
    assert "<" not in str(refused.value)  # plain text: the log and placement's reasons
    assert str(refused.value).endswith(
        "Ask a trainbot admin to add you under clusters.a4.identity.users."
    )


async def test_a_readmission_refused_for_want_of_a_user_says_it_in_facts() -> None:
    await flush_test_redis()
    config = config_refusing_the_unmapped()
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    launch = Launch(request=request, user_id="U0BOB", channel="C1")
    async with open_test_store() as store, SSHPool() as pool:
        clusters = Clusters(config, bot_settings(), pool, store)
        answer = await Authority(store, clusters, People(clusters, None, clusters)).readmit(launch)
    assert (answer.outcome, answer.allowed) == ("NO_USER", False)
    assert answer.facts() == {"reason": answer.why, "ask": ASK}
    assert answer.why.startswith("You have no user on a4:") and "<" not in answer.why
