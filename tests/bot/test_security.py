"""Security through the signed HTTP front end: who may see, act on and run what.

Every request here is signed as Slack signs it and goes through aiohttp, the
signature check, slack-bolt and the core, with real Redis and the dev cluster's
login node behind; answers are read where Slack would show them (the ack or
the Web API stand-in). No workers run, so nothing queued is ever submitted, except
in the test of a failed submission.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import shlex
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
import yaml

from bot.config import Config
from bot.http import SlackParams, SlackService, run_slack
from bot.launches import Attempt, Launch, Phase
from bot.service import Bot, running
from bot.slack_app import WORKING_TEXT
from bot.slack_front import open_front
from bot.slack_text import (
    ACTION_APPROVE,
    ACTION_CANCEL,
    ACTION_LOGS,
    ACTION_REJECT,
    ACTION_RETRY,
    ACTION_USE_PARTITION,
)
from bot.store import Event
from cluster.frameworks.base import Tracking
from cluster.launch import plan_launch
from commands.access import AccountRule, ApproverRule, ImageRule, ViewerRule
from commands.policy import PolicyRule, Principals
from commands.requests import TrainRequest
from support.slack_standin import (
    BOT_TOKEN,
    SIGNING_SECRET,
    TEAM_ID,
    SlackStandin,
    block_action_payload,
    event_envelope,
    post_signed,
    slash_command_fields,
)
from tests.bot.botkit import (
    TEST_REDIS,
    bot_settings,
    dev_config,
    flush_test_redis,
    login_run,
    wait_delivered,
    wait_for_launch,
    wait_until,
)
from tests.bot.conftest import standin_params
from tests.cluster.test_injection import hostile_values

pytestmark = pytest.mark.devcluster

PROJECT = Path(__file__).resolve().parents[2]
HF_TOKEN = "hf_sEcReT7eLLnobody42"
WANDB_KEY = "wandb-0123456789abcdef-secret"
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
            command, text, user_id=user, user_name=user.lower(), trigger_id=_trigger(), **fields
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
        payload["trigger_id"] = _trigger()
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


def _trigger() -> str:
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
    config = dev_config(**(watch or {}))
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
            replay_guard=bot.store.first_seen,
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
    await bot.store.create(launch, [], enqueue=False)
    return launch


@pytest.fixture
def log_file(unique: str) -> Iterator[str]:
    """A job log on the login node that echoes the job's secrets, as a careless job might."""
    home = login_run("echo $HOME").strip()
    path = f"{home}/sectest-{unique}.log"
    b64 = base64.b64encode(f"token={HF_TOKEN}".encode()).decode()
    login_run(f"printf 'step 1 loss 2.5\\nHF_TOKEN={HF_TOKEN}\\nenv64={b64}\\n' > {path}")
    yield path
    login_run(f"rm -f {path}", check=False)


# -- who may see ---------------------------------------------------------------

REFUSED_LOGS = "its logs are for its owner"
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


# -- approvals -----------------------------------------------------------------

# who clicks, which button, on a 3-node launch of alice on a4 -> allowed, text
APPROVALS = [
    ("U0BOB", ACTION_APPROVE, False, "Only a trainbot admin or an approver for a4"),
    ("U0LEAD", ACTION_APPROVE, False, "up to 2 nodes on a4; this one asks for 3"),
    ("U0ALICE", ACTION_APPROVE, False, "cannot approve your own launch"),
    ("U0CHIEF", ACTION_APPROVE, True, "Approved L-"),
    ("U0ADMIN", ACTION_APPROVE, True, "Approved L-"),
    ("U0BOB", ACTION_REJECT, False, "Only its owner, a trainbot admin or an approver for a4"),
    ("U0LEAD", ACTION_REJECT, True, "Rejected L-"),
    ("U0ALICE", ACTION_REJECT, True, "Rejected L-"),  # the asker withdraws
]


@pytest.mark.parametrize(("clicker", "action", "allowed", "says"), APPROVALS)
async def test_approve_and_reject_only_by_those_allowed(
    standin: SlackStandin, clicker: str, action: str, allowed: bool, says: str
) -> None:
    async with secure_bot(standin) as s:
        asked = await s.command("/train", "sft llama3p1_8b nodes=3 cluster=a4")
        assert "needs a second person's approval" in asked, asked
        launch_id = asked.split()[0]
        said = await s.click(action, launch_id, user=clicker)
        stored = await s.bot.store.get(launch_id)
    assert says in said, said
    assert stored is not None
    if not allowed:
        assert stored.phase == Phase.AWAITING_APPROVAL
    elif action == ACTION_APPROVE:
        assert stored.phase == Phase.QUEUED
    else:
        assert stored.phase == Phase.REJECTED


# -- on-call -------------------------------------------------------------------

# clicker, button, launch paged? -> allowed, text
ONCALL = [
    ("U0BOB", ACTION_CANCEL, True, True, "Cancelled"),
    ("U0BOB", ACTION_RETRY, True, True, "is not running"),  # past the check; nothing to retry
    ("U0BOB", ACTION_CANCEL, False, False, "Only alice"),  # never paged: not theirs
    ("U0MALLORY", ACTION_CANCEL, True, False, "Only alice"),
    ("U0ALICE", ACTION_CANCEL, False, True, "Cancelled"),
]


@pytest.mark.parametrize(("clicker", "action", "paged", "allowed", "says"), ONCALL)
async def test_oncall_acts_on_launches_that_paged_them(
    standin: SlackStandin, clicker: str, action: str, paged: bool, allowed: bool, says: str
) -> None:
    async with secure_bot(standin) as s:
        alerts = ("hang:L",) if paged else ()
        launch = await seed(s.bot, phase=Phase.QUEUED, open_alerts=alerts)
        said = await s.click(action, launch.id, user=clicker)
        stored = await s.bot.store.get(launch.id)
    assert says in said, said
    assert stored is not None
    cancelled = action == ACTION_CANCEL and allowed
    assert (stored.outcome == "CANCELLED") is cancelled


async def test_removal_from_admin_group_takes_effect_on_group_event(
    standin: SlackStandin, log_file: str
) -> None:
    async with secure_bot(standin) as s:
        launch = await seed(s.bot, log_path=log_file)
        assert REFUSED_LOGS not in await s.command("/logs", launch.id, user="U0DAVE")
        standin.usergroups["S0ADMINS"] = []
        event = event_envelope({"type": "subteam_members_changed", "subteam_id": "S0ADMINS"})
        answer = await post_signed(s.url, json.dumps(event), content_type="application/json")
        assert answer.status == 200
        await asyncio.sleep(0.3)
        said = await s.command("/logs", launch.id, user="U0DAVE")
    assert REFUSED_LOGS in said


async def test_privileged_groups_are_cached_briefly_then_asked_again(
    standin: SlackStandin, log_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A removal from an admin group that Slack never announced takes effect once the
    privileged groups' cache runs out (20 s here made 1 s; the unprivileged groups' much
    longer one must not apply), and not before: Slack is asked once per expiry, not at
    every request."""
    from bot import core

    assert core.PRIVILEGED_GROUPS_TTL_S <= 30 < core.GROUPS_TTL_S  # the defaults' bound
    monkeypatch.setattr(core, "PRIVILEGED_GROUPS_TTL_S", 1.0)
    asked: list[str] = []
    async with secure_bot(standin) as s:
        members = s.bot.core.front.usergroup_members  # type: ignore[union-attr]

        async def counted(group: str) -> list[str]:
            asked.append(group)
            return list(await members(group))

        s.bot.core.front.usergroup_members = counted  # type: ignore[union-attr,method-assign]
        launch = await seed(s.bot, log_path=log_file)
        assert REFUSED_LOGS not in await s.command("/logs", launch.id, user="U0DAVE")
        standin.usergroups["S0ADMINS"] = []  # no subteam event: only the expiry can tell
        cached = await s.command("/logs", launch.id, user="U0DAVE")
        admins_asked = asked.count("S0ADMINS")
        await asyncio.sleep(1.3)
        expired = await s.command("/logs", launch.id, user="U0DAVE")
    assert REFUSED_LOGS not in cached, cached  # still within the cache's life
    assert admins_asked == 1, asked
    assert REFUSED_LOGS in expired, expired  # asked again, and the removal took effect
    assert asked.count("S0ADMINS") == 2, asked


# -- max_concurrent ------------------------------------------------------------


async def test_simultaneous_trains_cannot_pass_max_concurrent(standin: SlackStandin) -> None:
    rules = (PolicyRule(users=("*",), clusters=("*",), max_nodes=4, max_concurrent=1),)
    async with secure_bot(standin, rules=rules) as s:
        counted = s.bot.store.active_count

        async def slowly_counted(user_id: str) -> int:  # widen the window a race needs
            count = await counted(user_id)
            await asyncio.sleep(0.3)
            return count

        s.bot.store.active_count = slowly_counted  # type: ignore[method-assign]

        async def train(i: int) -> str:
            form = slash_command_fields(
                "/train", f"sft llama3p1_8b cluster=a4 name=race{i}", trigger_id=_trigger()
            )
            answer = await post_signed(s.url, urllib.parse.urlencode(form))
            return str(answer.json()["text"])

        answers = list(await asyncio.gather(*(train(i) for i in range(6))))
        late = answers.count(WORKING_TEXT)
        for _ in range(200):  # answers after the ack arrive as ephemerals
            if len(s._ephemerals("U0ALICE")) >= late:
                break
            await asyncio.sleep(0.05)
        answers = [a for a in answers if a != WORKING_TEXT] + s._ephemerals("U0ALICE")
        active = await s.bot.store.active_count("U0ALICE")
    queued = [a for a in answers if a.startswith("Queued")]
    refused = [a for a in answers if "your limit is 1" in a]
    assert (len(queued), len(refused), active) == (1, 5, 1), answers


@pytest.mark.parametrize("action", [ACTION_CANCEL, ACTION_RETRY, ACTION_LOGS, ACTION_USE_PARTITION])
async def test_a_button_value_that_is_no_launch_gets_a_clear_answer(
    standin: SlackStandin, caplog: pytest.LogCaptureFixture, action: str
) -> None:
    """Button values come back from outside like typed text: checked the same way."""
    caplog.set_level(logging.INFO)
    async with secure_bot(standin) as s:
        said = await s.click(action, "$(id);x:a4")
    assert "is not a job: give a launch id such as L-7f3a9c" in said, said
    assert "Traceback" not in caplog.text


# -- workspaces ----------------------------------------------------------------


async def test_requests_from_other_workspaces_are_refused(standin: SlackStandin) -> None:
    async with secure_bot(standin) as s:
        launch = await seed(s.bot, phase=Phase.QUEUED)
        other = await s.command("/jobs", "", team_id="T0ELSEWHERE")
        own = await s.command("/jobs", "")
        payload = block_action_payload(ACTION_CANCEL, launch.id)
        payload["team"]["id"] = payload["user"]["team_id"] = "T0ELSEWHERE"
        body = urllib.parse.urlencode({"payload": json.dumps(payload)})
        click = await post_signed(s.url, body)
        await asyncio.sleep(0.5)
        stored = await s.bot.store.get(launch.id)
    assert "serves another Slack workspace" in other
    assert launch.id in own
    assert click.status == 200 and stored is not None and stored.phase == Phase.QUEUED


# -- what may run --------------------------------------------------------------

# user, image -> queued?, job secrets in the spec, text
IMAGES = [
    ("U0ALICE", "/tmp/evil.sqsh", False, None, "Custom images are not allowed for you on a4"),
    ("U0ALICE", "/opt/images/reviewed/x.sqsh", False, None, "Use one of its images: nemo, nemo-rl"),
    ("U0IMG", "/opt/images/reviewed/x.sqsh", True, False, "Queued"),
    ("U0IMG", "~/images/reviewed/x.sqsh", False, None, "(/opt/images/reviewed). Put it there"),
    ("U0IMG", "/opt/images/elsewhere/x.sqsh", False, None, "(/opt/images/reviewed). Put it"),
    ("U0CHIEF", "/opt/images/trusted/x.sqsh", True, True, "Queued"),
    ("U0ALICE", "nemo", True, True, "Queued"),  # the cluster's own image, by name
]


@pytest.mark.parametrize(("user", "image", "queued", "secrets", "says"), IMAGES)
async def test_custom_images_only_where_policy_allows(
    standin: SlackStandin,
    user: str,
    image: str,
    queued: bool,
    secrets: bool | None,
    says: str,
) -> None:
    async with secure_bot(standin) as s:
        said = await s.command("/train", f"sft llama3p1_8b cluster=a4 image={image}", user=user)
        ids = await s.bot.store.active_ids(user)
        specs = [
            s.bot.clusters.spec_for(launch) for i in ids if (launch := await s.bot.store.get(i))
        ]
    assert says in said, said
    assert len(ids) == (1 if queued else 0)
    if queued:
        spec = specs[0].spec
        assert bool(spec.secrets) is secrets
        if not secrets:
            assert spec.secret_files() == {} and spec.profile.job_secrets == {}


async def test_a_custom_image_reaches_a_nemo_rl_job(standin: SlackStandin) -> None:
    """NeMo-RL takes its image as CONTAINER (launch.sh reads it; sbatch exports the
    submitting shell's environment): an allowed image= is what the submission exports."""
    image = "/opt/images/reviewed/rl-custom.sqsh"
    async with secure_bot(standin) as s:
        said = await s.command("/train", f"dpo llama3p1_8b cluster=a4 image={image}", user="U0IMG")
        (launch_id,) = await s.bot.store.active_ids("U0IMG")
        launch = await s.bot.store.get(launch_id)
        assert launch is not None
        plan = plan_launch(s.bot.clusters.spec_for(launch).spec)
        default = s.bot.clusters.profile("a4").image_for("nemo-rl")
    assert said.startswith("Queued"), said
    script = plan.script()
    assert plan.spec.framework == "nemo-rl" and plan.argv[0] == "sbatch"
    assert f"\nexport CONTAINER={image}\n" in script, script
    assert script.index("export CONTAINER=") < script.index("\nexec sbatch ")
    assert default not in script


async def test_a_groups_launches_run_under_its_slurm_account(standin: SlackStandin) -> None:
    """policy.accounts by user group: the member's /train is planned with that --account
    (the group's members come from Slack, as for every other rule)."""
    accounts = (AccountRule(groups=("S0VISION",), clusters=("a4",), account="vision"),)
    async with secure_bot(standin, accounts=accounts) as s:
        said = {
            u: await s.command("/train", "sft llama3p1_8b cluster=a4", user=u)
            for u in GROUPS["S0VISION"] + ["U0ALICE"]
        }
        argv = {}
        for user in said:
            (launch_id,) = await s.bot.store.active_ids(user)
            launch = await s.bot.store.get(launch_id)
            assert launch is not None
            argv[user] = [str(a) for a in plan_launch(s.bot.clusters.spec_for(launch).spec).argv]
    assert all(text.startswith("Queued") for text in said.values()), said
    vic = argv["U0VIC"]
    assert vic[vic.index("--account") + 1] == "vision"
    assert "vision" not in argv["U0ALICE"]


# -- requests that are not what they claim -------------------------------------


async def test_a_replayed_signed_train_or_click_acts_once_across_processes(
    standin: SlackStandin,
) -> None:
    form = slash_command_fields("/train", "sft llama3p1_8b cluster=a4", trigger_id=_trigger())
    train = urllib.parse.urlencode(form)
    ts = int(time.time())
    async with secure_bot(standin) as s:
        first = await post_signed(s.url, train, timestamp=ts)
        again = await post_signed(s.url, train, timestamp=ts)  # the same request, byte for byte
        launch_id = str(first.json()["text"]).split()[1].rstrip(":")
        payload = block_action_payload(ACTION_CANCEL, launch_id)
        payload["trigger_id"] = _trigger()
        cancel = urllib.parse.urlencode({"payload": json.dumps(payload)})
        clicked = await post_signed(s.url, cancel, timestamp=ts)
        answered = await s._next_ephemeral("U0ALICE", 0)
        clicked_again = await post_signed(s.url, cancel, timestamp=ts)
        # a second bot process (its own HTTP listener) shares the record in Redis
        params = SlackParams(
            bot_token=BOT_TOKEN,
            signing_secret=SIGNING_SECRET,
            api_url=standin.api_url,
            http_port=0,
        )
        async with run_slack(
            params,
            s.bot.core,
            health=s.bot.healthy,
            metrics=s.bot.metrics,
            replay_guard=s.bot.store.first_seen,
        ) as other:
            elsewhere = f"http://127.0.0.1:{other.http_port}/slack/events"
            replayed = [await post_signed(elsewhere, b, timestamp=ts) for b in (train, cancel)]
            await asyncio.sleep(0.5)  # time for an answer a replayed click would get
        stored = await s.bot.store.get(launch_id)
        answers = s._ephemerals("U0ALICE")
    assert first.json()["text"].startswith("Queued")
    assert clicked.status == 200 and "Cancelled" in answered, answered
    dropped = [again, clicked_again, *replayed]
    assert [(a.status, a.body) for a in dropped] == [(200, "")] * 4
    assert answers == [answered]  # the click acted once: one answer
    assert stored is not None and stored.outcome == "CANCELLED"


CLOSED_REDIS = "redis://127.0.0.1:1/0"  # nothing listens there


async def test_signed_requests_while_redis_is_down_get_a_clear_answer_not_a_500(
    standin: SlackStandin, caplog: pytest.LogCaptureFixture
) -> None:
    """The replay guard cannot ask Redis: the request is refused (a replay must not slip
    through), a slash command with the words the commands use, anything else with 503."""
    caplog.set_level(logging.INFO)
    group_event = event_envelope({"type": "subteam_members_changed", "subteam_id": "S0ADMINS"})
    async with secure_bot(standin) as s:
        launch = await seed(s.bot, phase=Phase.QUEUED)
        up = s.bot.store.redis
        s.bot.store.redis = aioredis.from_url(CLOSED_REDIS, decode_responses=True)  # Redis goes
        try:
            form = slash_command_fields(
                "/train", "sft llama3p1_8b cluster=a4", trigger_id=_trigger()
            )
            command = await post_signed(s.url, urllib.parse.urlencode(form))
            payload = block_action_payload(ACTION_CANCEL, launch.id)
            click = await post_signed(
                s.url, urllib.parse.urlencode({"payload": json.dumps(payload)})
            )
            event = await post_signed(
                s.url, json.dumps(group_event), content_type="application/json"
            )
        finally:
            await s.bot.store.redis.aclose()
            s.bot.store.redis = up
        stored = await s.bot.store.get(launch.id)
        active = await s.bot.store.active_count("U0ALICE")
    assert command.status == 200, command.body
    said = str(command.json()["text"])
    assert said.startswith(":warning: That did not work: Redis is unreachable"), said
    assert (click.status, event.status) == (503, 503)
    assert stored is not None and stored.phase == Phase.QUEUED and active == 1
    served = [r for r in caplog.records if r.name.startswith(("aiohttp", "bot.http"))]
    assert not [r for r in served if r.exc_info or r.levelno >= logging.ERROR], served


# body, content type, signed, header overrides -> status
MALFORMED = [
    ("payload=notjson", "application/x-www-form-urlencoded", False, {}, 401),
    ("payload=notjson", "application/x-www-form-urlencoded", True, {}, 400),
    ("payload=%5B1%2C2%5D", "application/x-www-form-urlencoded", True, {}, 400),
    ("{not json", "application/json", True, {}, 400),
    ("[1, 2]", "application/json", True, {}, 400),
    ("{not json", "application/json", False, {}, 401),
    ("command=/jobs", "application/x-www-form-urlencoded", False, {"ts": "abc"}, 401),
    ("notaform", "application/x-www-form-urlencoded", True, {}, 400),
]


@pytest.mark.parametrize(("body", "content_type", "signed", "headers", "status"), MALFORMED)
async def test_unsigned_or_malformed_requests_get_4xx_without_a_traceback(
    standin: SlackStandin,
    caplog: pytest.LogCaptureFixture,
    body: str,
    content_type: str,
    signed: bool,
    headers: dict[str, str],
    status: int,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with secure_bot(standin) as s:
        if signed:
            answer = await post_signed(s.url, body, content_type=content_type)
            got = answer.status
        else:
            sent = {"Content-Type": content_type}
            if "ts" in headers:
                sent |= {"X-Slack-Request-Timestamp": headers["ts"], "X-Slack-Signature": "v0=00"}
            async with (
                aiohttp.ClientSession() as session,
                session.post(s.url, data=body.encode(), headers=sent) as response,
            ):
                got = response.status
    assert got == status
    assert "Traceback" not in caplog.text


async def test_non_utf8_body_is_400(standin: SlackStandin) -> None:
    """A body that is not UTF-8, correctly signed (over its bytes, as Slack signs): 400,
    saying why; nothing reaches bolt. Unsigned, the same body is refused too."""
    body = b"command=%2Ftrain&text=\xff\xfe payload"
    ts = str(int(time.time()))
    digest = hmac.new(SIGNING_SECRET.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256)
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": "v0=" + digest.hexdigest(),
    }
    async with secure_bot(standin) as s, aiohttp.ClientSession() as session:
        async with session.post(s.url, data=body, headers=headers) as response:
            signed = (response.status, await response.text())
        async with session.post(s.url, data=b"\xff\xfe payload") as response:
            unsigned = response.status
    assert signed == (400, "malformed request: body is not UTF-8"), signed
    assert unsigned in (400, 401)


# -- injection and bad input: refused, with what would be right ------------------

BAD_TRAINS = [
    ("time=٠٤:٠٠:٠٠", "only the digits 0-9"),  # Arabic-Indic digits
    ("time=۱۰", "only the digits 0-9"),
    ("nodes=٢", "is not a whole number"),
    ("name=$(reboot)", "is not a valid job name"),
    ("name=x;id", "is not a valid job name"),
    ("partition=a4;id", "is not a valid partition name"),
    ("image=~/x.sqsh;id", "image="),
    ("image=../../etc/x.sqsh", "relative path"),
    ("trainer.max_steps=`id`", "trainer.max_steps"),
    ("cluster=a4'", "Unbalanced quote"),
    ("cluster=a5", "Unknown cluster 'a5'"),
]


@pytest.mark.parametrize(("extra", "says"), BAD_TRAINS)
async def test_hostile_or_bad_values_are_refused_before_queueing(
    standin: SlackStandin, extra: str, says: str
) -> None:
    async with secure_bot(standin) as s:
        said = await s.command("/train", f"sft llama3p1_8b {extra}")
        active = await s.bot.store.active_count("U0ALICE")
    assert says in said and not said.startswith("Queued"), said
    assert active == 0


@pytest.mark.parametrize("key", ["name", "partition", "image", "time", "trainer.max_steps"])
async def test_shell_injection_in_any_value_is_refused_and_runs_nothing(
    standin: SlackStandin, unique: str, key: str
) -> None:
    """The hostile values of the cluster layer's injection test, typed into /train."""
    marker = f"/tmp/trainbot-pwned-{unique}"
    async with secure_bot(standin) as s:
        for value in hostile_values(marker):
            said = await s.command("/train", f"sft llama3p1_8b cluster=a4 {key}={value}")
            assert not said.startswith("Queued") and ":warning:" in said, (value, said)
        active = await s.bot.store.active_count("U0ALICE")
    assert active == 0
    assert login_run(f"test -e {marker} && echo found || echo absent").strip() == "absent"


# -- what comes back from the cluster --------------------------------------------


@asynccontextmanager
async def cluster_job(root: str, body: str, name: str) -> AsyncIterator[str]:
    """A real one-node job on the dev cluster (partition a4) running the bash ``body``,
    sbatch's output in ``root``; its id. Cancelled, and ``root`` removed, afterwards."""
    await asyncio.to_thread(login_run, f"mkdir -p {root}")
    out = await asyncio.to_thread(
        login_run,
        f"sbatch --parsable -p a4 -N 1 -J {name} -o {root}/sbatch_%j.out "
        f"--wrap {shlex.quote(body)}",
    )
    job_id = out.strip().split(";")[0]
    try:
        yield job_id
    finally:
        await asyncio.to_thread(login_run, f"scancel {job_id}; rm -rf {root}", check=False)


async def follow(s: Secure, launch_id: str, job_id: str, local_dir: str) -> Tracking:
    """Record ``job_id`` as the launch's submission, as a worker does once run.py printed
    nemo-run's status block: from now on the poller follows the job."""
    launch = await s.bot.store.get(launch_id)
    assert launch is not None
    spec = s.bot.clusters.spec_for(launch).spec
    status = f"Task 0: {spec.job_name}\n- Job id: {job_id}\n- Local Directory: {local_dir}\n"
    tracking = spec.fw.tracking(spec, status)

    def submitted(stored: Launch) -> list[Event]:
        if not stored.attempts:
            stored.attempts.append(Attempt(number=1))
        attempt = stored.attempts[-1]
        attempt.job_id, attempt.submitted_at, attempt.tracking = job_id, time.time(), tracking
        stored.phase = Phase.SUBMITTED
        return [Event("update", stored.id)]

    await s.bot.store.mutate(launch_id, submitted)
    return tracking


async def queued(s: Secure, text: str) -> str:
    said = await s.command("/train", text)
    assert said.startswith("Queued L-"), said
    return said.split()[1].rstrip(":")


def posted(standin: SlackStandin) -> list[str]:
    """Everything the bot put in Slack: texts and blocks of messages, updates, ephemerals."""
    methods = ("chat.postMessage", "chat.update", "chat.postEphemeral")
    return [
        str(c.params.get("text", "")) + json.dumps(c.params.get("blocks", ""))
        for method in methods
        for c in standin.calls_to(method)
    ]


# the node a job's log says failed (bash, on the job's node) -> it is the job's own
NAMED_NODES = [
    ("login0", False),  # a valid host name, not a node of the job
    ("$other", False),  # a real node of the cluster, not this job's
    ("-$SLURMD_NODENAME", False),  # not a valid host name
    ("$SLURMD_NODENAME", True),  # the job's own node: the one case that counts
]


@pytest.mark.parametrize(("named", "own"), NAMED_NODES)
async def test_a_node_a_log_names_counts_only_if_it_is_the_jobs_own(
    standin: SlackStandin, unique: str, named: str, own: bool
) -> None:
    """A running launch's log says ``Node failure on <name>``, then the job fails. Only its
    own node is excluded on retry or paged for; any other name changes nothing."""
    home = (await asyncio.to_thread(login_run, "echo $HOME")).strip()
    root = f"{home}/sectest-{unique}"
    body = (
        "other=$(for n in dev0 dev1 dev2 dev3; do [ $n = $SLURMD_NODENAME ] || echo $n; done "
        "| head -n 1)\n"
        f'echo "srun: error: Node failure on {named}" >> {root}/log-x_${{SLURM_JOB_ID}}_0.out\n'
        "sleep 4\nexit 1\n"
    )
    async with secure_bot(standin, watch={"evidence_reread_s": 0}) as s:
        launch_id = await queued(s, f"sft llama3p1_8b cluster=a4 name=sec{unique}")
        async with cluster_job(root, body, f"sec{unique}") as job_id:
            await follow(s, launch_id, job_id, root)

            async def read_while_running() -> Launch | None:
                got = await s.bot.store.get(launch_id)
                seen = (
                    got and got.phase == Phase.RUNNING and "Node failure" in got.attempts[-1].tail
                )
                return got if seen else None

            running_launch = await wait_until(read_while_running, "the log read while running")

            async def ended() -> Launch | None:
                got = await s.bot.store.get(launch_id)
                return got if got and got.phase in (Phase.DONE, Phase.RETRYING) else None

            launch = await wait_until(ended, "the failure handled", timeout_s=90)
        await wait_delivered(s.bot.store)
    assert running_launch.open_alerts == [] and len(running_launch.attempts) == 1
    node = launch.attempts[0].node_list
    paged = [c for c in standin.calls_to("chat.postMessage") if c.params["channel"] == "C0ONCALL"]
    if own:
        assert launch.phase == Phase.RETRYING and launch.attempts[-1].exclude == node
        assert launch.open_alerts and paged
        return
    assert (launch.phase, launch.outcome, len(launch.attempts)) == (Phase.DONE, "FAILED", 1)
    assert launch.attempts[0].cause_key == "unknown" and not launch.attempts[0].exclude
    assert launch.open_alerts == [] and paged == []
    assert not any("without" in text or "Retrying" in text for text in posted(standin))


async def test_names_and_lines_from_the_cluster_never_ping_anyone(
    standin: SlackStandin, unique: str
) -> None:
    """A job writes a checkpoint directory named ``<!channel>-step=1-`` (NeMo's pattern
    takes it) and log lines full of Slack markup, then fails: what Slack receives pings
    no one, yet says what happened."""
    home = (await asyncio.to_thread(login_run, "echo $HOME")).strip()
    root = f"{home}/sectest-{unique}"
    async with secure_bot(standin, watch={"evidence_reread_s": 0}) as s:
        launch_id = await queued(s, f"sft llama3p1_8b cluster=a4 name=sec{unique}")
        log_dir = s.bot.clusters.profile("a4").log_dir.replace("~", home, 1)
        checkpoints = f"{log_dir}/sec{unique}-{launch_id}"
        hostile = "<!channel> <!here|here> <!everyone> <@U0BOB> <https://evil.example|click>"
        body = (
            f"log={root}/log-x_${{SLURM_JOB_ID}}_0.out\n"
            f"echo {shlex.quote('step 1: ' + hostile)} >> $log\n"
            f"mkdir -p {shlex.quote(checkpoints + '/checkpoints/<!channel>-step=1-')}\n"
            "sleep 4\n"
            f"echo {shlex.quote('RuntimeError: ' + hostile)} >> $log\n"
            "exit 1\n"
        )
        try:
            async with cluster_job(root, body, f"sec{unique}") as job_id:
                await follow(s, launch_id, job_id, root)
                await wait_for_launch(s.bot.store, launch_id, timeout_s=90)
                await wait_delivered(s.bot.store)
        finally:
            await asyncio.to_thread(login_run, f"rm -rf {checkpoints}", check=False)
        launch = await s.bot.store.get(launch_id)
    texts = posted(standin)
    assert launch is not None and launch.checkpoints == ["<!channel>-step=1-"]
    assert any("💾 Checkpoint step 1 saved." in text for text in texts), texts
    assert any("RuntimeError: &lt;!channel&gt;" in text for text in texts), texts
    for text in texts:
        for markup in ("<!channel", "<!here", "<!everyone", "<@U0BOB", "<https://evil"):
            assert markup not in text, text


# -- secrets never leave the cluster -------------------------------------------


def _encodings(secret: str) -> list[str]:
    return [
        secret,
        base64.b64encode(secret.encode()).decode(),
        urllib.parse.quote(secret, safe=""),
        secret.encode().hex(),
    ]


async def test_secrets_in_a_job_log_are_redacted_in_logs(
    standin: SlackStandin, log_file: str
) -> None:
    async with secure_bot(standin) as s:
        launch = await seed(s.bot, phase=Phase.QUEUED, log_path=log_file)
        tail = await s.command("/logs", launch.id)
    for secret in (HF_TOKEN, WANDB_KEY):
        for form in _encodings(secret):
            assert form not in tail, form
    assert "[redacted]" in tail
    assert "step 1 loss 2.5" in tail  # the rest of the log is intact


# A site's launcher that fails and dumps its environment to stderr for debugging, plainly
# and base64-encoded. Nothing on the dev cluster does that by itself (sbatch never prints
# the environment, and Slurm there enforces no accounts), so this one stands in for it;
# the rest is the real path: worker, pre-flight, the submit over SSH, sbatch's refusal.
ENV_DUMPING_RUN_PY = """\
import base64, os, sys
print("sbatch: error: Batch job submission failed: Invalid account or account/partition "
      "combination specified", file=sys.stderr)
print("run.py: submission failed; environment:", file=sys.stderr)
for key, value in sorted(os.environ.items()):
    print(f"  {key}={value}", file=sys.stderr)
    print(f"  {key}(base64)={base64.b64encode(value.encode()).decode()}", file=sys.stderr)
sys.exit(1)
"""


async def redis_text() -> str:
    """Every key of the test database and its value, whatever its type."""
    client = aioredis.from_url(TEST_REDIS, decode_responses=True)
    parts: list[str] = []
    try:
        async for key in client.scan_iter():
            kind = await client.type(key)
            if kind == "string":
                value: object = await client.get(key)
            elif kind == "hash":
                value = await client.hgetall(key)
            elif kind == "list":
                value = await client.lrange(key, 0, -1)
            elif kind == "set":
                value = sorted(await client.smembers(key))
            elif kind == "zset":
                value = await client.zrange(key, 0, -1, withscores=True)
            else:
                value = await client.xrange(key)
            parts.append(f"{key}: {value}")
    finally:
        await client.aclose()
    return "\n".join(parts)


async def test_secrets_a_failed_submission_prints_go_nowhere(
    standin: SlackStandin, caplog: pytest.LogCaptureFixture, unique: str
) -> None:
    """A launcher whose refusal echoes the job's secrets: a worker submits, sbatch's error
    reaches the thread, and neither secret (nor its base64) is in anything Slack received,
    anything logged, or any key in Redis."""
    caplog.set_level(logging.DEBUG)
    home = (await asyncio.to_thread(login_run, "echo $HOME")).strip()
    recipes = f"{home}/sectest-{unique}"
    script = base64.b64encode(ENV_DUMPING_RUN_PY.encode()).decode()
    await asyncio.to_thread(
        login_run,
        f"mkdir -p {recipes}/nemo/sft && cp ~/vertex-oss-training/nemo/sft/llama3p1_8b_sft.py "
        f"{recipes}/nemo/sft/ && echo {script} | base64 -d > {recipes}/nemo/run.py",
    )
    try:
        async with secure_bot(standin, workers=1, a4={"recipes_dir": recipes}) as s:
            launch_id = await queued(s, "sft llama3p1_8b cluster=a4")
            launch = await wait_for_launch(s.bot.store, launch_id, timeout_s=120)
            await wait_delivered(s.bot.store)
            stored = await redis_text()
    finally:
        await asyncio.to_thread(login_run, f"rm -rf {recipes}", check=False)
    slack = json.dumps([c.params for c in standin.calls])
    assert launch.outcome == "SUBMIT_FAILED", launch.detail
    assert "Slurm refused the job" in slack and "Invalid account" in slack
    assert "HF_TOKEN=[redacted]" in slack and "WANDB_API_KEY(base64)=[redacted]" in slack
    for where, text in {"Slack": slack, "the logs": caplog.text, "Redis": stored}.items():
        for secret in (HF_TOKEN, WANDB_KEY):
            for form in _encodings(secret):
                assert form not in text, f"{where} holds {form}"


# -- deployment defaults -------------------------------------------------------


def test_health_and_metrics_are_not_published_on_all_interfaces() -> None:
    compose = yaml.safe_load((PROJECT / "docker-compose.yml").read_text())
    published = {name: service.get("ports", []) for name, service in compose["services"].items()}
    assert [name for name, ports in published.items() if ports] == ["web"]  # only HTTP mode's
    for port in published["web"]:
        text = str(port)
        assert text.startswith(("127.0.0.1:", "${TRAINBOT_PUBLISH_ADDRESS:-127.0.0.1}:")), text
