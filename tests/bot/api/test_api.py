"""The HTTP API on the web role's listener: the same refusals as Slack for the same person
(signed slash commands against the stand-in beside API calls), and a token that is
missing, wrong, expired, revoked or short of a scope answered 401/403 with a sentence."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiohttp
import pytest

from bot.api.routes import Api
from bot.runtime.assembly import Bot, running
from bot.settings.config import Config
from bot.slack.http import SlackService, run_slack
from bot.slack.webapi import SlackFront, open_front
from bot.store import keys
from bot.store.tokens import digest
from support.slack_requests import post_signed, slash_command_body
from support.slack_standin import SlackStandin
from support.workspace import BOT_TOKEN
from tests.bot.botkit import bot_settings, dev_config, flush_test_redis
from tests.bot.conftest import standin_params

# Alice may use a4 only, 2 nodes at most; custom images are not hers to use.
POLICY = """  rules:
    - users: ["U0ALICE"]
      groups: []
      clusters: ["a4"]
      max_nodes: 2
      max_concurrent: 4
"""
REFUSED = [
    "sft llama3p1_8b nodes=3 cluster=a4",  # more nodes than her rule allows
    "sft llama3p1_8b cluster=a3m",  # a cluster her rule does not name
    "sft llama3p1_8b cluster=a5",  # no such cluster
    "sft llama3p1_8b cluster=a4 image=/home/trainer/mine.sqsh",  # a custom image
    "sft llama3p1_8b cluster=a4 wobble=3",  # no such key
    "teleport llama3p1_8b",  # no such workload
]


def alice_policy(text: str) -> str:
    start = text.index("  rules:\n")
    end = text.index("  approval_above_nodes:")
    return text[:start] + POLICY + text[end:]


@asynccontextmanager
async def web_with_api(
    standin: SlackStandin, *, worker: bool = False
) -> AsyncIterator[tuple[Bot, SlackService, str]]:
    """The web role with the API mounted; with ``worker``, a worker answers its asks of
    the clusters (the App Home's capacity), otherwise nothing reaches a cluster."""
    await flush_test_redis()
    config = dev_config(edit=alice_policy)
    async with AsyncExitStack() as stack:
        front = await stack.enter_async_context(
            open_front(BOT_TOKEN, api_url=standin.api_url, backoff_base_s=0.01)
        )
        if worker:
            await stack.enter_async_context(
                running(bot_settings(), config, front, role="worker", instance="worker")
            )
        yield await stack.enter_async_context(_web(front, config, standin))


@asynccontextmanager
async def _web(
    front: SlackFront, config: Config, standin: SlackStandin
) -> AsyncIterator[tuple[Bot, SlackService, str]]:
    async with (
        running(bot_settings(), config, front, role="web", instance="web") as web,
        run_slack(
            standin_params(standin),
            web.core,
            health=web.healthy,
            metrics=web.metrics,
            front=front,
            api=Api(web.core, dm_channel=front.open_dm).app(),
        ) as slack,
    ):
        yield web, slack, f"http://127.0.0.1:{slack.http_port}"


async def call(
    method: str, url: str, token: str | None = None, body: Any = None, raw: bytes | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=data, headers=headers) as response,
    ):
        text = await response.text()
        assert "Traceback" not in text
        return response.status, json.loads(text), dict(response.headers)


async def test_the_api_refuses_what_slack_refuses_in_the_same_words(
    standin: SlackStandin,
) -> None:
    async with web_with_api(standin) as (web, slack, base):
        _, token = await web.store.tokens.mint_token("U0ALICE", user_name="alice")
        for text in REFUSED:
            said = await post_signed(f"{base}/slack/events", slash_command_body("/train", text))
            assert said.status == 200, said
            in_slack = said.json()["text"]
            status, answer, _ = await call(
                "POST", f"{base}/api/v1/launches", token, {"text": text, "channel": "C0TRAIN"}
            )
            assert (status, answer["ok"], answer["error"]) == (400, False, "refused"), answer
            assert in_slack == f":warning: {answer['text']}", text
            assert answer["launches"] == [] and answer["launch_id"] == ""
        assert await web.store.history.active_ids("U0ALICE") == []
        # One refusal in full: the rule's words, not a generic error.
        _, answer, _ = await call("POST", f"{base}/api/v1/launches", token, {"text": REFUSED[0]})
        assert "nodes=3" in answer["text"] and "2" in answer["text"], answer
        assert answer["channel"] == "DU0ALICE"  # her DM, as the stand-in names it


async def test_bad_tokens_are_401_with_a_sentence(
    standin: SlackStandin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with web_with_api(standin) as (web, slack, base):
        jobs = f"{base}/api/v1/launches"
        status, answer, headers = await call("GET", jobs)
        assert status == 401 and answer["error"] == "missing_token"
        assert "Authorization: Bearer <token>" in answer["text"] and "App Home" in answer["text"]
        assert headers["WWW-Authenticate"].startswith('Bearer realm="trainbot"')

        async with aiohttp.ClientSession() as session:
            async with session.get(jobs, headers={"Authorization": "Basic YWxpY2U6eA=="}) as r:
                basic = await r.json()
        assert r.status == 401 and "must read `Bearer <token>`" in basic["text"]

        status, answer, _ = await call("GET", jobs, "tbt_" + "x" * 43)
        assert status == 401 and "not known to trainbot" in answer["text"]

        record, token = await web.store.tokens.mint_token("U0ALICE", scopes=("read",), ttl_s=600)
        status, answer, _ = await call("GET", jobs, token)
        assert status == 200 and answer["ok"] and "no active launches" in answer["text"]

        status, answer, _ = await call("POST", jobs, token, {"text": "sft llama3p1_8b"})
        assert status == 403 and answer["error"] == "insufficient_scope"
        assert f"API token {record.id} may read only" in answer["text"]

        stale = record.model_copy(update={"expires_at": time.time() - 5})
        await web.store.redis.set(keys.token(digest(token)), stale.model_dump_json())
        status, answer, _ = await call("GET", jobs, token)
        assert status == 401 and f"API token {record.id} expired on " in answer["text"]

        await web.store.tokens.revoke_token(record.id)
        status, answer, _ = await call("GET", jobs, token)
        assert status == 401 and "revoked" in answer["text"]

        _, writer = await web.store.tokens.mint_token("U0ALICE")
        status, answer, _ = await call("POST", jobs, writer, raw=b"{not json")
        assert status == 400 and "must be a JSON object" in answer["text"]
        status, answer, _ = await call("POST", jobs, writer, {"text": "sft x", "channel": "#gen"})
        assert status == 400 and "Slack channel id" in answer["text"]
        status, answer, _ = await call("GET", f"{base}/api/v1/launches/L-0000ff", writer)
        assert status == 400 and "No launch L-0000ff" in answer["text"]
        status, answer, _ = await call("GET", f"{base}/api/v1/launches/nonsense/logs", writer)
        assert status == 400 and "is not a job" in answer["text"]
        stored = str(await web.store.redis.keys("*"))
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "API /jobs from U0ALICE" in logged  # requests are logged, by token id
    assert token not in logged and writer not in logged
    assert token[4:] not in stored and writer[4:] not in stored


async def test_the_openapi_document_names_every_path(standin: SlackStandin) -> None:
    async with web_with_api(standin) as (_, _slack, base):
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/api/v1/openapi.json") as response:
                document = await response.json()
            async with session.get(f"{base}/healthz") as health:
                assert health.status in (200, 503)  # still served beside the API
    assert document["openapi"].startswith("3.")
    assert set(document["paths"]) == {
        "/launches",
        "/launches/{job}",
        "/launches/{job}/logs",
        "/launches/{job}/cancel",
        "/launches/{job}/checkpoints",
        "/launches/{job}/watch",
        "/usage",
        "/clusters",
    }


pytestmark = pytest.mark.devcluster


async def test_a_plain_text_launch_is_followed_until_the_server_stops(
    standin: SlackStandin,
) -> None:
    """The body may be the bare text after /train; a followed launch that has no log yet
    is waited for, and a shutdown ends the stream with a line saying so."""
    async with aiohttp.ClientSession() as session:
        async with web_with_api(standin) as (web, _slack, base):
            _, token = await web.store.tokens.mint_token("U0ALICE", user_name="alice")
            auth = {"Authorization": f"Bearer {token}"}
            async with session.post(
                f"{base}/api/v1/launches?channel=C0TRAIN",
                data=b"sft llama3p1_8b cluster=a4 nodes=1",
                headers={**auth, "Content-Type": "text/plain"},
            ) as posted:
                answer = await posted.json()
            assert posted.status == 200 and answer["text"].startswith("Queued L-"), answer
            (launch,) = answer["launches"]
            assert launch["id"] == answer["launch_id"] and launch["phase"] == "queued"
            assert launch["cluster"] == "a4" and launch["nodes"] == 1 and launch["active"]
            _, bob = await web.store.tokens.mint_token("U0BOB", scopes=("read",))
            watch = f"{base}/api/v1/launches/{launch['id']}/watch"
            bob_auth = {"Authorization": f"Bearer {bob}"}
            async with session.post(watch, headers=bob_auth) as watched:  # not his to see
                said = await watched.json()
            assert watched.status == 400 and "belongs to someone else" in said["text"], said
            async with session.post(watch, headers=auth) as watched:
                said = await watched.json()
            assert said["text"].startswith(f"{launch['id']} is your own launch"), said
            async with session.delete(watch, headers=bob_auth) as unwatched:
                said = await unwatched.json()
            assert said["text"].startswith(f"You do not watch {launch['id']}."), said
            assert await web.store.people.watchers(launch["id"]) == []
            follow = await session.get(
                f"{base}/api/v1/launches/{launch['id']}/logs?follow=true", headers=auth
            )
            assert follow.headers["Content-Type"].startswith("text/plain")
            first = await follow.content.readline()
            assert first.decode() == f"[trainbot] {launch['id']} is QUEUED; waiting for its log\n"
        rest = await asyncio.wait_for(follow.content.read(), 15)
        follow.close()
    assert rest.decode() == "[trainbot] trainbot is restarting; follow again\n"
