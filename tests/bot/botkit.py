"""Helpers for the end-to-end tests of the bot: a test Redis database, the dev
cluster's config tuned for speed, stand-in knobs by launch name, waiting."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypedDict, TypeVar

import pytest
import redis.asyncio as aioredis

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.notify.notifier import Notifier
from bot.settings.config import Config, parse_config
from bot.settings.env import Settings
from bot.store import keys
from bot.store.store import Store
from bot.wording import endings, thread
from commands.requests import TrainRequest
from support.workspace import ASK_KEY
from tests import devlogin

PROJECT = Path(__file__).resolve().parents[2]
DEV = PROJECT / ".devcluster"
# Tests flush this database; TRAINBOT_TEST_REDIS lets two checkouts test side by side.
TEST_REDIS = os.environ.get("TRAINBOT_TEST_REDIS", "redis://127.0.0.1:6379/15")
LAUNCH_RE = re.compile(r"\bL-[0-9a-f]{4,12}\b")
T = TypeVar("T")


def match_in(pattern: str | re.Pattern[str], text: str, group: int = 0) -> str:
    """The ``group`` of the first match of ``pattern`` in ``text``; fails the test, showing
    the text, when there is none."""
    found = re.search(pattern, text)
    assert found is not None, f"{pattern!r} is not in {text!r}"
    return found.group(group)


async def launch_in(store: Store, launch_id: str) -> Launch:
    """The launch's record; fails the test when the store has none."""
    launch = await store.launches.get(launch_id)
    assert launch is not None, f"the store has no launch {launch_id}"
    return launch


def ended_with(launch: Launch) -> str:
    """The launch's sentence of how it ended, as the parent message and the API say it."""
    return endings.sentence(launch.ending, launch.detail)


def launch_id_in(text: str) -> str:
    """The first launch id (``L-...``) in ``text``."""
    return match_in(LAUNCH_RE, text)


class Knobs(TypedDict, total=False):
    """The dev cluster stand-in's knobs (devcluster/login/.../_devcluster/standin.py says
    what each does); a test passes the ones it needs to :func:`knobs`."""

    fault: str
    fault_at_step: int
    fault_once: int
    steps: int
    step_time_s: float
    ckpt_every: int
    save_time_s: float
    tokenizer_race: str
    attach_delay_s: float
    teardown_s: float
    tensorboard: int
    startup_s: float
    startup_line_s: float
    epochs: int
    epoch_steps: int
    val_every: int
    nan_at: int
    nan_value: str
    spike_at: int
    spike_factor: float
    slow_at: int
    slow_steps: int
    slow_factor: float
    rl_buffered: int
    max_time: str
    must_save_by: str
    rl_layout: str
    gpu_util: float
    log_interval: int
    dialect: str
    exit_after_s: float
    exit_at: int
    nan_mode: str
    sigterm: str
    exit_minute_s: float
    log_throughput: int


def dev_config(
    poll_interval_s: float = 1.0,
    *,
    cache_dir: str = "",
    data_dir: str = "",
    recipes_dir: str = "",
    webhook_url: str = "",
    approval_above_nodes: int | None = None,
    people: dict[str, str] | None = None,
    unmapped: str = "shared",
    from_email: bool = False,
    email_domains: tuple[str, ...] = ("example.com",),
    hf_token_file: str = "",
    failures: str = "",
    edit: Callable[[str], str] | None = None,
    file: str = "trainbot.yaml",
    watch: Mapping[str, float] | None = None,
    **watch_fields: float,
) -> Config:
    """The dev cluster's config, polled faster; ``cache_dir``, ``data_dir``, the recipes
    checkout (every path under it) and ``watch`` fields (``watch`` and the keywords left)
    replaced.
    ``people`` maps users to Unix users (every cluster's ``identity``), ``hf_token_file``
    makes HF_TOKEN come from that file on the login node; ``failures`` is the YAML of the
    failure catalog's site entries (``failures:``); ``edit`` changes the YAML text last.
    ``file``: which of ``.devcluster``'s configs (``trainbot-bastion.yaml``: behind the
    bastion)."""
    path = DEV / file
    if not path.is_file():
        pytest.skip("the dev cluster is not up: run devcluster/up first")
    text = re.sub(
        r"poll_interval_s: [0-9.]+", f"poll_interval_s: {poll_interval_s}", path.read_text()
    )
    if cache_dir:
        text = text.replace("cache_dir: ~/.cache", f"cache_dir: {cache_dir}")
    if data_dir:
        text = text.replace("data_dir: ~/data", f"data_dir: {data_dir}")
    if recipes_dir:
        text = text.replace("~/vertex-oss-training", recipes_dir)
    if approval_above_nodes is not None:
        text = text.replace(
            "approval_above_nodes: null", f"approval_above_nodes: {approval_above_nodes}"
        )
    if webhook_url:
        hook = f"webhook: {{url: '{webhook_url}', routing_key: {{env: TRAINBOT_PAGERDUTY_KEY}}}}"
        text = text.replace("webhook: null", hook)
    if people is not None or unmapped != "shared" or from_email:
        users = ", ".join(f"{k}: {v}" for k, v in (people or {}).items())
        text, count = re.subn(
            r"(?m)^      users: \{\}\n      unmapped: shared$",
            f"      users: {{{users}}}\n      unmapped: {unmapped}\n"
            f"      from_email: {str(from_email).lower()}\n"
            f"      email_domains: [{', '.join(email_domains)}]",
            text,
        )
        assert count == len(re.findall(r"(?m)^  [a-z0-9]+:\n    type:", text)), "no identity"
    if hf_token_file:
        text = text.replace(
            "HF_TOKEN: {env: TRAINBOT_HF_TOKEN}", f"HF_TOKEN: {{file: {hf_token_file}}}"
        )
    for key, value in {**(watch or {}), **watch_fields}.items():
        text, count = re.subn(rf"(?m)^  {key}: .*$", f"  {key}: {value}", text)
        assert count == 1, f"watch.{key} is not in the dev config (run devcluster/up again)"
    if failures:
        text += f"\nfailures: {failures}\n"
    if edit is not None:
        text = edit(text)
    return parse_config(text, source=str(path), base_dir=DEV)


def bot_settings(**env: str) -> Settings:
    return Settings.from_environ({"REDIS_URL": TEST_REDIS, "TRAINBOT_ASK_KEY": ASK_KEY, **env})


async def stream_entries(
    redis: aioredis.Redis, key: str = keys.OUTBOX
) -> list[tuple[str, dict[str, str]]]:
    """A stream's entries (the outbox by default) as text: entry id and fields."""
    entries = await redis.xrange(key)
    return [
        (_text(i), {_text(k): _text(v) for k, v in (f or {}).items()}) for i, f in entries or []
    ]


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def stored_record(store: Store, launch_id: str) -> dict[str, Any]:
    """The launch's record as Redis holds it (JSON), read behind the store's back."""
    raw = await store.redis.get(keys.launch(launch_id))
    assert raw is not None, f"no record of {launch_id} in Redis"
    record: dict[str, Any] = json.loads(raw)
    return record


async def flush_test_redis() -> None:
    client = aioredis.from_url(TEST_REDIS)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


@asynccontextmanager
async def open_test_store() -> AsyncIterator[Store]:
    async with Store.connect(TEST_REDIS) as store:
        yield store


def login_run(
    command: str, *, check: bool = True, timeout_s: float = 60, user: str = devlogin.SHARED
) -> str:
    """Run a command on the dev cluster's login node (plain ssh, strict host keys), as
    the shared account or as one of the dev cluster's people with their own key."""
    proc = devlogin.run(command, timeout_s=timeout_s, user=user)
    if check and proc.returncode != 0:
        raise AssertionError(f"{command!r} exited {proc.returncode}: {proc.stderr}")
    return proc.stdout


@asynccontextmanager
async def knobs(
    tag: str, *, users: tuple[str, ...] = (devlogin.SHARED,), **values: float | str
) -> AsyncIterator[None]:
    """Stand-in knobs for every job whose Slurm name contains ``tag`` (the launch's name=),
    in the home of each login user whose jobs should see them."""
    body = "".join(f"{k}={v}\\n" for k, v in values.items())
    path = f"~/devcluster-control/{tag}.env"
    for user in users:
        await asyncio.to_thread(login_run, f"printf '{body}' > {path}", user=user)
    try:
        yield
    finally:
        for user in users:
            await asyncio.to_thread(login_run, f"rm -f {path}", check=False, user=user)


def sacct_rows(job_id: str, timeout_s: float = 30) -> list[dict[str, str]]:
    """The job's accounting rows, once slurmdbd holds the whole record: the controller
    sends start and end to the database through a queue, and a row read in between can
    lack its partition (seen once in CI right after COMPLETED)."""
    fields = ["JobID", "JobName", "State", "NNodes", "Partition"]
    deadline = time.monotonic() + timeout_s
    while True:
        out = login_run(f"sacct -X -P -n -o {','.join(fields)} -j {job_id}")
        rows = [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines()]
        if (rows and rows[-1]["Partition"]) or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def slurm_jobs_named(fragment: str) -> list[str]:
    """Job ids whose name contains ``fragment``: squeue (all states, it knows names at once)
    and sacct (right after a job starts it may still call it "allocation")."""
    grep = f"grep -F -e {shlex.quote(fragment)} || true"
    out = login_run(
        f"squeue -h -t all -o '%i|%j' | {grep}; "
        f"sacct -X -P -n -o JobID,JobName%80 -S now-1days | {grep}"
    )
    return sorted({line.split("|")[0] for line in out.splitlines() if line})


async def wait_for_launch(
    store: Store, launch_id: str, done: str = "terminal", timeout_s: float = 240
) -> Launch:
    """Until the launch is terminal (or ``done`` names a phase to reach)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    launch = None
    while loop.time() < deadline:
        launch = await store.launches.get(launch_id)
        if launch is not None:
            if done == "terminal" and not launch.active:
                return launch
            if launch.phase == done:
                return launch
        await asyncio.sleep(0.3)
    raise AssertionError(f"launch {launch_id} did not reach {done} in {timeout_s}s: {launch}")


async def wait_until(
    predicate: Callable[[], Awaitable[T | None]],
    what: str,
    timeout_s: float = 60,
    interval_s: float = 0.2,
) -> T:
    """Await ``predicate()`` until it returns something truthy, and return that."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(interval_s)


async def wait_delivered(store: Store, timeout_s: float = 30) -> None:
    """Until every message written so far has reached the front end (or the dead letters):
    the outbox is empty and no lane holds one still being delivered."""

    async def empty() -> bool:
        return await store.lanes.undelivered() == 0

    await wait_until(empty, "the outbox to be delivered", timeout_s, interval_s=0.1)


def in_dm(params: dict[str, Any]) -> bool:
    """Whether a chat.postMessage went to a direct message (the stand-in's DM ids start D)."""
    return str(params.get("channel", "")).startswith("D")


def in_order(lines: list[str], *patterns: str) -> None:
    """Each pattern matches some line, after the line the previous pattern matched."""
    position = 0
    for pattern in patterns:
        for index in range(position, len(lines)):
            if re.search(pattern, lines[index]):
                position = index + 1
                break
        else:
            shown = "\n".join(lines)
            raise AssertionError(f"no line matching {pattern!r} after line {position}:\n{shown}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def request(**fields: object) -> TrainRequest:
    """An sft llama3p1_8b request on a4, with ``fields`` changed."""
    return TrainRequest(
        workload="sft",
        model="llama3p1_8b",
        framework="nemo",
        cluster="a4",
        **fields,
    )


async def thread_texts(store: Store, launch_id: str) -> list[str]:
    """The thread lines the outbox holds for the launch, oldest first, as bot.wording says
    them (an event holds its move's facts, or its own text)."""
    entries = await stream_entries(store.redis)
    decoded = [Event.decode(i, f) for i, f in entries]
    return [thread.line(e) for e in decoded if e.kind == "thread" and e.launch_id == launch_id]


@asynccontextmanager
async def notifying(notifier: Notifier) -> AsyncIterator[Notifier]:
    """The notifier delivering the outbox while the block runs."""
    stop = asyncio.Event()
    task = asyncio.create_task(notifier.run(stop))
    try:
        yield notifier
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
