"""The restore drill: back up, lose Redis, restore into a new one, and every launch,
budget, charge and history record is back, with the queue's pending entries and the
keys' expiry. On private redis-servers (never the shared one), through the real
``trainbot backup`` and ``trainbot restore`` commands."""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from bench.soak_infra import OwnRedis
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.runtime.cli import main
from bot.store import keys
from bot.store.backup import BackupError, read_backup
from bot.store.budgets import BudgetGuard, TeamGuard
from bot.store.store import Store
from commands.requests import TrainRequest

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server (devcluster/up installs it)"
)

WEEK, TEAM = "2026-W49", "group:S0ML"


async def cli(argv: list[str]) -> int:
    """``trainbot <argv>`` as the console script runs it (its own event loop)."""
    return await asyncio.to_thread(main, argv)


def launch(user: str, cluster: str = "a4") -> Launch:
    req = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster=cluster)
    return Launch(request=req, user_id=user, user_name=user.lower(), channel="C1")


async def fill(store: Store) -> dict[str, Launch]:
    """What a working bot leaves in Redis: a charged finished launch (history, usage, the
    charge ledger, a team budget), a running one, one taken by a worker and not done."""
    done, running, taken = launch("U0ALICE"), launch("U0BOB", "a3m"), launch("U0ALICE")
    guard = BudgetGuard(cluster="a4", week=WEEK, limit=500.0)
    team = TeamGuard(team=TEAM, window=WEEK, limit=1000.0)
    await store.launches.create(done, [Event("parent", done.id)], enqueue=False, budget=guard,
                       teams=(team,))  # fmt: skip
    await store.launches.create(running, [Event("parent", running.id)], enqueue=False)
    await store.launches.create(
        taken, [Event("parent", taken.id), Event("thread", taken.id, "Queued.")]
    )

    def to_running(job_id: str) -> Any:
        def move(stored: Launch) -> list[Event]:
            stored.phase = Phase.RUNNING
            stored.attempts.append(Attempt(number=1, job_id=job_id, started_at=time.time() - 60))
            return []

        return move

    def to_done(stored: Launch) -> list[Event]:
        stored.phase, stored.outcome = Phase.DONE, "COMPLETED"
        stored.attempts[-1].ended_at = time.time()
        return []

    await store.launches.mutate(done.id, to_running("4187"))
    await store.launches.mutate(done.id, to_done)
    assert await store.budgets.charge(done.id, "a4", 6.5)
    await store.launches.mutate(running.id, to_running("4188"))
    picked = await store.queue.read("w1", block_ms=100)
    assert taken.id in [f["launch"] for _, f in picked]
    return {"done": done, "running": running, "taken": taken}


async def everything(store: Store) -> dict[str, Any]:
    """Every trainbot key's type, value and whether it expires (a stream: its entries,
    groups and pending entries), read with plain Redis commands."""
    r = store.redis
    found: dict[str, Any] = {}
    async for key in r.scan_iter(match="trainbot:*"):
        kind = await r.type(key)
        value: Any
        if kind == "string":
            value = await r.get(key)
        elif kind == "hash":
            value = await r.hgetall(key)
        elif kind == "set":
            value = sorted(await r.smembers(key))
        elif kind == "zset":
            value = await r.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            value = await r.lrange(key, 0, -1)
        elif kind == "stream":
            groups = await r.xinfo_groups(key)
            value = {
                "entries": await r.xrange(key),
                "groups": [(g["name"], g["pending"], g["last-delivered-id"]) for g in groups],
                "pending": [
                    [
                        (p["message_id"], p["consumer"])
                        for p in await r.xpending_range(key, g["name"], "-", "+", 1000)
                    ]  # fmt: skip
                    for g in groups
                ],
            }
        else:
            raise AssertionError(f"{key!r}: a {kind!r} key the drill does not read")
        found[key] = (kind, value, await r.ttl(key) > 0)
    return found


async def test_back_up_lose_redis_restore_and_everything_is_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = OwnRedis(tmp_path / "first")
    await first.start()
    try:
        async with Store.connect(first.url) as store:
            made = await fill(store)
            before = await everything(store)
            history = await store.history.entries()
            charges = await store.budgets.charges(0)
        monkeypatch.setenv("REDIS_URL", first.url)
        assert await cli(["backup", str(tmp_path / "trainbot.backup.gz")]) == 0
        assert f"{len(before)} keys" in capsys.readouterr().out
    finally:
        await first.stop()
    shutil.rmtree(tmp_path / "first")  # Redis and its files are lost

    second = OwnRedis(tmp_path / "second")
    await second.start()
    try:
        monkeypatch.setenv("REDIS_URL", second.url)
        assert await cli(["restore", str(tmp_path / "trainbot.backup.gz")]) == 0
        assert f"{len(before)} keys put back" in capsys.readouterr().out
        async with Store.connect(second.url) as store:
            assert await everything(store) == before
            for launch in made.values():
                stored = await store.launches.get(launch.id)
                assert stored is not None and stored.id == launch.id
            assert [e.id for e in await store.history.entries()] == [e.id for e in history]
            assert (await store.history.entries())[0].job_id == "4187"
            assert await store.budgets.charges(0) == charges and charges[0].gpu_hours == 6.5
            assert await store.budgets.usage("U0ALICE", "a4", await week_of(store, made)) == 6.5
            assert (await store.budgets.team_use(TEAM, WEEK))[0] == 6.5
            assert await store.history.find_job("4188") == [("a3m", made["running"].id)]
            assert made["running"].id in await store.history.tracked_ids("a3m")
            # The worker's entry is still its own, pending, as before the loss.
            mine = await store.queue.read("w1", block_ms=0, pending=True)
            assert made["taken"].id in [f["launch"] for _, f in mine]

        # A second restore into the now full Redis is refused, and says how to go on.
        assert await cli(["restore", str(tmp_path / "trainbot.backup.gz")]) == 1
        err = capsys.readouterr().err
        assert "already holds trainbot keys" in err and "--replace" in err
        assert await cli(["restore", "--replace", str(tmp_path / "trainbot.backup.gz")]) == 0
    finally:
        await second.stop()


async def week_of(store: Store, made: dict[str, Launch]) -> str:
    """The ISO week the finished launch was charged in (the week it ended)."""
    for charge in await store.budgets.charges(0):
        if charge.launch_id == made["done"].id:
            return time.strftime("%G-W%V", time.gmtime(charge.ended_at))
    raise AssertionError("no charge")


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


HEADER = {"trainbot_backup": 1, "written_at": 0, "redis_version": "7.0.15"}


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ([], "is empty"),
        ([{"hello": 1}], "is not a trainbot backup"),
        ([HEADER, {"k": "trainbot:x", "exp_ms": 0, "v": "AAAA"}], "without its end line"),
        (
            [HEADER, {"k": "other:x", "exp_ms": 0, "v": "AAAA"}, {"end": True, "keys": 1}],
            "only keys that start with trainbot:",
        ),  # fmt: skip
        (
            [HEADER, {"k": "trainbot:x", "exp_ms": -5, "v": "AAAA"}, {"end": True, "keys": 1}],
            "exp_ms must be",
        ),  # fmt: skip
        (
            [HEADER, {"k": "trainbot:x", "exp_ms": 0, "v": "%%"}, {"end": True, "keys": 1}],
            "not base64",
        ),  # fmt: skip
        ([HEADER, {"end": True, "keys": 3}], "says 3"),
    ],
)
def test_a_file_that_is_not_a_whole_backup_is_refused(
    tmp_path: Path, lines: list[dict[str, Any]], says: str
) -> None:
    path = write_lines(tmp_path / "b.jsonl", lines)
    with pytest.raises(BackupError, match=says):
        read_backup(path)


async def test_a_backup_is_owner_only_and_a_bad_payload_is_refused_by_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    redis = OwnRedis(tmp_path / "r")
    await redis.start()
    try:
        monkeypatch.setenv("REDIS_URL", redis.url)
        async with Store.connect(redis.url) as store:
            await store.redis.set("trainbot:one", "1", ex=3600)
            await store.redis.set("other:key", "not ours")
        out = tmp_path / "b.jsonl.gz"
        assert await cli(["backup", str(out)]) == 0
        assert out.stat().st_mode & 0o077 == 0
        lines = gzip.decompress(out.read_bytes()).decode().splitlines()
        records = {json.loads(line)["k"]: json.loads(line) for line in lines[1:-1]}
        assert "trainbot:one" in records and "other:key" not in records  # only trainbot's
        assert all(name.startswith("trainbot:") for name in records)
        assert records["trainbot:one"]["exp_ms"] > time.time() * 1000  # it expires, later
        assert records[keys.QUEUE]["exp_ms"] == 0  # it never does
        forged = [json.loads(lines[0]), {"k": "trainbot:two", "exp_ms": 0, "v": "AAAA"},
                  {"end": True, "keys": 1}]  # fmt: skip
        assert await cli(["restore", "--replace", str(write_lines(tmp_path / "f", forged))]) == 1
        assert "refused the restore" in capsys.readouterr().err
    finally:
        await redis.stop()


async def test_a_path_that_cannot_be_written_or_read_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    redis = OwnRedis(tmp_path / "r")
    await redis.start()
    try:
        monkeypatch.setenv("REDIS_URL", redis.url)
        assert await cli(["backup", str(tmp_path / "no-such-dir" / "b.jsonl")]) == 1
        err = capsys.readouterr().err
        assert "cannot write the backup to" in err and "No such file or directory" in err
        assert "Traceback" not in err
        assert await cli(["restore", str(tmp_path / "missing.jsonl")]) == 1
        assert "cannot read the backup" in capsys.readouterr().err
    finally:
        await redis.stop()
