"""What the security tests share: the bot behind its signed HTTP front end, the policy
they run under, and launches seeded as the workers and poller would have left them.

Every request is signed as Slack signs it and goes through aiohttp, the
signature check, slack-bolt and the core, with real Redis and the dev cluster's
login node behind; answers are read where Slack would show them (the ack or
the Web API stand-in). No workers run, so nothing queued is ever submitted, except
in the test of a failed submission.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.runtime.assembly import Bot, running
from bot.settings.config import Config
from bot.slack.app import WORKING_TEXT
from bot.slack.http import SlackService, run_slack
from bot.slack.webapi import open_front
from cluster.watching.tracking import Tracking
from commands.policy import PolicyRule, Principals
from commands.requests import TrainRequest
from commands.rules import ApproverRule, ImageRule, ViewerRule
from support.slack_requests import block_action_payload, post_signed, slash_command_fields
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN, SIGNING_SECRET, TEAM_ID
from tests.bot.botkit import bot_settings, dev_config
from tests.bot.conftest import standin_params

PROJECT = Path(__file__).resolve().parents[3]
HF_TOKEN = "hf_sEcReT7eLLnobody42"
WANDB_KEY = "wandb-0123456789abcdef-secret"
REFUSED_LOGS = "its logs are for its owner"
GROUPS = {
    "S0ONCALL": ["U0BOB", "U0CAROL"],
    "S0ADMINS": ["U0DAVE"],
    "S0TEAM": ["U0TESS"],
    "S0LEADS": ["U0LEAD"],
    "S0IMG": ["U0IMG"],
    "S0VISION": ["U0VIC"],  # named only by the accounts rule of one test
}
POLICY = {
    "admins": Principals(users=("U0ADMIN",), groups=("S0ADMINS",)),
    "rules": (PolicyRule(users=("*",), clusters=("*",), max_nodes=4, max_concurrent=10),),
    "approval_above_nodes": 2,
    "approvers": (
        ApproverRule(groups=("S0LEADS",), clusters=("a4",), max_nodes=2),
        ApproverRule(users=("U0CHIEF",)),
    ),
    "log_viewers": (ViewerRule(groups=("S0TEAM",), clusters=("a4",)),),
    "custom_images": (
        ImageRule(groups=("S0IMG",), clusters=("a4",), dirs=("/opt/images/reviewed",)),
        ImageRule(users=("U0CHIEF",), dirs=("/opt/images/trusted",), job_secrets=True),
    ),
    "workspaces": (TEAM_ID,),
}


@dataclass
class Secure:
    """The bot (no workers) behind its HTTP front end, and ways to talk to it."""

    bot: Bot
    service: SlackService
    standin: SlackStandin

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.service.http_port}/slack/events"

    async def command(
        self, command: str, text: str, *, user: str = "U0ALICE", **fields: str
    ) -> str:
        """A signed slash command; the answer the asker sees."""
        form = slash_command_fields(
            command, text, user_id=user, user_name=user.lower(), trigger_id=new_trigger(), **fields
        )
        seen = len(self._ephemerals(user))
        answer = await post_signed(self.url, urllib.parse.urlencode(form))
        assert answer.status == 200, answer.body
        said = str(answer.json()["text"]) if answer.body else ""
        if said == WORKING_TEXT:
            return await self._next_ephemeral(user, seen)
        return said

    async def click(
        self, action_id: str, value: str, *, user: str = "U0ALICE", team: str = TEAM_ID
    ) -> str:
        """A signed button click; the ephemeral answer the clicker gets."""
        payload = block_action_payload(action_id, value, user_id=user)
        payload["trigger_id"] = new_trigger()
        payload["team"]["id"] = team
        payload["user"]["team_id"] = team
        seen = len(self._ephemerals(user))
        body = urllib.parse.urlencode({"payload": json.dumps(payload)})
        answer = await post_signed(self.url, body)
        assert answer.status == 200, answer.body
        return await self._next_ephemeral(user, seen)

    def _ephemerals(self, user: str) -> list[str]:
        return [
            str(c.params.get("text", ""))
            for c in self.standin.calls_to("chat.postEphemeral")
            if c.params.get("user") == user
        ]

    async def _next_ephemeral(self, user: str, seen: int) -> str:
        for _ in range(200):
            found = self._ephemerals(user)
            if len(found) > seen:
                return found[seen]
            await asyncio.sleep(0.05)
        raise AssertionError(f"no answer for {user}")


def new_trigger() -> str:
    return f"1.{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def secure_bot(
    standin: SlackStandin,
    *,
    env: dict[str, str] | None = None,
    workers: int = 0,
    watch: dict[str, float] | None = None,
    a4: dict[str, Any] | None = None,
    **policy: Any,
) -> AsyncIterator[Secure]:
    """The bot behind its HTTP front end; ``a4`` replaces fields of that cluster's profile."""
    config = dev_config(watch=watch)
    fields = {name: getattr(config, name) for name in Config.model_fields}
    clusters = dict(config.clusters)
    clusters["a4"] = clusters["a4"].model_copy(update=a4 or {})
    config = Config.model_validate(  # checked as the config file would be
        {**fields, "clusters": clusters, "policy": {**dict(config.policy), **POLICY, **policy}}
    )
    settings = bot_settings(
        TRAINBOT_HF_TOKEN=HF_TOKEN,
        TRAINBOT_WANDB_API_KEY=WANDB_KEY,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        **(env or {}),
    )
    params = standin_params(standin, allowed_team_ids=config.policy.workspaces)
    async with (
        open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01) as front,
        running(settings, config, front, workers=workers) as bot,
        run_slack(
            params,
            bot.core,
            health=bot.healthy,
            metrics=bot.metrics,
            front=front,
            replay_guard=bot.store.marks.first_seen,
        ) as service,
    ):
        yield Secure(bot, service, standin)


async def seed(
    bot: Bot,
    *,
    owner: str = "U0ALICE",
    phase: Phase = Phase.DONE,
    cluster: str = "a4",
    nodes: int = 1,
    log_path: str = "",
    open_alerts: tuple[str, ...] = (),
) -> Launch:
    """A launch as the workers and poller would have left it."""
    request = TrainRequest(
        workload="sft", model="llama3p1_8b", framework="nemo", cluster=cluster, nodes=nodes
    )
    launch = Launch(
        request=request,
        user_id=owner,
        user_name=owner.lower().removeprefix("u0"),
        channel="C0TRAIN",
        phase=phase,
        outcome="COMPLETED" if phase == Phase.DONE else "",
        open_alerts=list(open_alerts),
        progress_history=[(1, 2.5), (2, 2.1), (3, 1.9)],
    )
    if log_path:
        tracking = Tracking(framework="nemo", job_id="990001", log_path=log_path)
        launch.attempts = [Attempt(number=1, job_id="990001", tracking=tracking)]
    await bot.store.launches.create(launch, [], enqueue=False)
    return launch


async def queued(s: Secure, text: str) -> str:
    said = await s.command("/train", text)
    assert said.startswith("Queued L-"), said
    return said.split()[1].rstrip(":")
