"""``trainbot backup`` and ``trainbot restore``: a logical copy of every ``trainbot:``
key (launch records, the queue and its consumer groups, the outbox, budgets and the
charge ledger, history), written as JSON lines and read back into any Redis.

Each key is copied with Redis's own ``DUMP`` (the value in Redis's serialization,
checksummed by Redis) and its expiry as an absolute time, and put back with
``RESTORE ... ABSTTL``: a key that would have expired by the time of the restore is not
brought back, and the others expire when they would have. A stream keeps its consumer
groups and their pending entries, so a launch a worker had taken but not finished is
still pending after the restore.

The file: a header line (``{"trainbot_backup": 1, ...}``), one line per key
(``{"k": key, "exp_ms": when or 0, "v": base64 of the DUMP}``), and an end line with
the number of keys (a cut-off file is refused). It holds what Redis holds: keep it as
private as Redis (it is written owner-only).

The copy is read key by key: for a copy of one instant, stop the roles first (or copy
Redis's own RDB file after ``BGSAVE``; docs/upgrade.md).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from bot.settings.env import Target
from bot.store import keys
from bot.store.connection import open_redis
from cluster.errors import TrainbotError

FORMAT = 1
MATCH = f"{keys.PREFIX}:*"
BATCH = 500


class BackupError(TrainbotError):
    """A backup could not be written, or a file could not be restored (the text says why)."""


@dataclass(frozen=True)
class Summary:
    """What a backup wrote or a restore put back."""

    keys: int
    skipped: int = 0  # restore: keys that had expired since the backup
    redis_version: str = ""


def _open(path: Path, mode: str, *, gz: bool | None = None) -> IO[str]:
    if path.suffix == ".gz" if gz is None else gz:
        if mode == "w":
            return gzip.open(path, "wt", encoding="utf-8")
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(mode, encoding="utf-8")


async def backup(target: Target, path: Path) -> Summary:
    """Write every ``trainbot:`` key of ``target`` to ``path`` (``.gz``: compressed)."""
    try:
        async with open_redis(target, decode_responses=False) as redis:
            return await _backup(redis, path)
    except RedisError as exc:
        raise BackupError(f"Redis at {target.describe()} failed during the backup: {exc}") from exc
    except OSError as exc:
        raise BackupError(
            f"cannot write the backup to {path}: {exc.strerror or exc}; give a path in a "
            "directory that exists and that this user may write"
        ) from exc


async def _backup(redis: aioredis.Redis, path: Path) -> Summary:
    info = await redis.info("server")
    version = str(info.get("redis_version", ""))
    now_s, now_us = await redis.time()
    now_ms = int(now_s) * 1000 + int(now_us) // 1000
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    count = 0
    try:
        with _open(partial, "w", gz=path.suffix == ".gz") as out:
            header = {"trainbot_backup": FORMAT, "written_at": time.time(),
                      "redis_version": version, "match": MATCH}  # fmt: skip
            out.write(json.dumps(header) + "\n")
            batch: list[bytes] = []
            async for key in redis.scan_iter(match=MATCH, count=1000):
                batch.append(key)
                if len(batch) >= BATCH:
                    count += await _write_batch(redis, batch, now_ms, out)
                    batch = []
            count += await _write_batch(redis, batch, now_ms, out)
            out.write(json.dumps({"end": True, "keys": count}) + "\n")
        partial.replace(path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return Summary(keys=count, redis_version=version)


async def _write_batch(redis: aioredis.Redis, batch: list[bytes], now_ms: int, out: IO[str]) -> int:
    if not batch:
        return 0
    pipe = redis.pipeline(transaction=False)
    for key in batch:
        pipe.dump(key)
        pipe.pttl(key)
    replies = await pipe.execute()
    written = 0
    for index, key in enumerate(batch):
        payload, ttl_ms = replies[2 * index], int(replies[2 * index + 1])
        if payload is None or ttl_ms == -2:  # gone since the scan saw it
            continue
        record = {
            "k": key.decode("utf-8"),
            "exp_ms": now_ms + ttl_ms if ttl_ms >= 0 else 0,
            "v": base64.b64encode(payload).decode("ascii"),
        }
        out.write(json.dumps(record) + "\n")
        written += 1
    return written


@dataclass(frozen=True)
class _Record:
    key: str
    exp_ms: int
    payload: bytes


def read_backup(path: Path) -> tuple[dict[str, Any], list[_Record]]:
    """The header and the records of a backup file, checked line by line: anything that
    is not what :func:`backup` writes is refused with the line it was found on."""
    try:
        with _open(path, "r") as src:
            lines = src.read().splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BackupError(f"cannot read the backup {path}: {reason}") from exc
    if not lines:
        raise BackupError(f"{path} is empty; give a file written by `trainbot backup`")
    header = _json(path, 1, lines[0])
    if header.get("trainbot_backup") != FORMAT:
        raise BackupError(
            f"{path} is not a trainbot backup (format {FORMAT}): its first line is "
            f"{lines[0][:80]!r}; give a file written by `trainbot backup`"
        )
    records = list(_records(path, lines))
    return header, records


def _records(path: Path, lines: list[str]) -> Iterator[_Record]:
    for number, line in enumerate(lines[1:], start=2):
        item = _json(path, number, line)
        if item.get("end") is True:
            if item.get("keys") != number - 2 or number != len(lines):
                raise BackupError(
                    f"{path}: line {number} ends the backup after {number - 2} keys, "
                    f"but it says {item.get('keys')!r} and the file has {len(lines)} lines; "
                    "the file was changed or joined with another"
                )
            return
        key, exp_ms, value = item.get("k"), item.get("exp_ms"), item.get("v")
        if not isinstance(key, str) or not key.startswith(f"{keys.PREFIX}:"):
            raise BackupError(
                f"{path}: line {number} names the key {key!r}; a trainbot backup holds only "
                f"keys that start with {keys.PREFIX}:"
            )
        if not isinstance(exp_ms, int) or isinstance(exp_ms, bool) or exp_ms < 0:
            raise BackupError(f"{path}: line {number}: exp_ms must be a whole number >= 0")
        try:
            payload = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BackupError(f"{path}: line {number}: the value is not base64 ({exc})") from exc
        yield _Record(key, exp_ms, payload)
    raise BackupError(
        f"{path} stops after {len(lines) - 1} keys without its end line: the backup was cut "
        "off (disk full, or copied while it was being written); take another"
    )


def _json(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BackupError(f"{path}: line {number} is not JSON ({exc.msg})") from exc
    if not isinstance(item, dict):
        raise BackupError(f"{path}: line {number} is not a JSON object")
    return item


async def restore(target: Target, path: Path, *, replace: bool = False) -> Summary:
    """Put every key of the backup at ``path`` back into ``target``. Refused when the
    Redis already holds ``trainbot:`` keys, unless ``replace`` (then the backup's keys
    overwrite theirs; keys the backup lacks are left as they are)."""
    header, records = read_backup(path)
    try:
        async with open_redis(target, decode_responses=False) as redis:
            if not replace:
                async for key in redis.scan_iter(match=MATCH, count=1000):
                    raise BackupError(
                        f"Redis at {target.describe()} already holds trainbot keys (such as "
                        f"{key.decode('utf-8', 'replace')}); restore into an empty Redis, or "
                        "add --replace to overwrite the keys the backup holds"
                    )
            now_s, _ = await redis.time()
            restored = skipped = 0
            for start in range(0, len(records), BATCH):
                pipe = redis.pipeline(transaction=False)
                for record in records[start : start + BATCH]:
                    if record.exp_ms and record.exp_ms <= int(now_s) * 1000:
                        skipped += 1
                        continue
                    pipe.restore(record.key, record.exp_ms, record.payload,
                                 replace=replace, absttl=bool(record.exp_ms))  # fmt: skip
                    restored += 1
                await pipe.execute()
    except ResponseError as exc:
        raise BackupError(
            f"Redis at {target.describe()} refused the restore: {exc}. A backup restores into "
            f"the Redis version that wrote it ({header.get('redis_version') or 'unknown'}) "
            "or a newer one"
        ) from exc
    except RedisError as exc:
        raise BackupError(f"Redis at {target.describe()} failed during the restore: {exc}") from exc
    return Summary(keys=restored, skipped=skipped, redis_version=str(header.get("redis_version")))
