"""``GET /api/v1/launches/<job>/logs?follow=true``: the log as it grows, as chunked plain
text, until the launch ends.

Every ``interval_s`` the launch is read again and its log's tail asked of the cluster the
way ``/logs`` asks it (``Core.calls``: a worker's SSH in the web role); the lines the
last tail did not have are written out, redacted as every reply of the core is. A new
attempt (a retry) starts on a new log: a line says so. When the launch ends, one last
tail is written, then a line with its final state in Slurm's words. A launch with no
log yet (queued, pending) is waited for, with a line saying so. When the server shuts
down, a last line says so (the CLI then exits 1: the launch did not end).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from bot.core.core import Core
from bot.lifecycle.launch import Launch
from bot.wording import endings, render
from cluster.errors import TrainbotError

log = logging.getLogger(__name__)

FOLLOW_LINES = 500  # the tail asked each time: more than a poll's worth of lines
END_MARK = "[trainbot]"


def new_lines(before: list[str], now: list[str]) -> list[str]:
    """The lines of tail ``now`` after its overlap with the previous tail ``before`` (the
    longest suffix of ``before`` that starts ``now``); all of ``now`` when none overlaps."""
    for size in range(min(len(before), len(now)), 0, -1):
        if before[-size:] == now[:size]:
            return now[size:]
    return now


def end_line(launch: Launch) -> str:
    _, word = render.status_label(launch)
    said = endings.sentence(launch.ending, launch.detail)
    detail = f": {said}" if said else ""
    return f"{END_MARK} {launch.id} ended {word}{detail}\n"


async def follow_logs(
    request: web.Request,
    core: Core,
    launch: Launch,
    *,
    interval_s: float = 2.0,
    stopping: asyncio.Event | None = None,
) -> web.StreamResponse:
    """Stream the log of ``launch`` (which the caller may read) until it ends, the
    follower goes away, or ``stopping`` is set (the server shuts down: a line says so)."""
    stopping = stopping or asyncio.Event()
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    seen: list[str] = []
    path = ""
    if not (launch.attempt and launch.attempt.tracking and launch.attempt.tracking.log_path):
        word = render.status_label(launch)[1]
        await response.write(f"{END_MARK} {launch.id} is {word}; waiting for its log\n".encode())
    try:
        while True:
            current = await core.store.launches.get(launch.id)
            if current is None:
                await response.write(f"{END_MARK} {launch.id} is no longer kept\n".encode())
                break
            ended = not current.active
            attempt = current.attempt
            log_path = attempt.tracking.log_path if attempt and attempt.tracking else ""
            if log_path and log_path != path:
                path, seen = log_path, []
                head = f"{END_MARK} job {attempt.job_id if attempt else ''} log: {path}\n"
                await response.write(head.encode())
            if path:
                seen = await _write_new(response, core, current, path, seen)
            if ended:
                await response.write(end_line(current).encode())
                break
            if request.transport is None or request.transport.is_closing():
                log.info("log follower of %s went away", launch.id)
                return response
            try:
                await asyncio.wait_for(stopping.wait(), interval_s)
            except TimeoutError:
                continue
            await response.write(f"{END_MARK} trainbot is restarting; follow again\n".encode())
            break
    except (ConnectionResetError, asyncio.CancelledError):
        log.info("log follower of %s went away", launch.id)
        raise
    await response.write_eof()
    return response


async def _write_new(
    response: web.StreamResponse, core: Core, launch: Launch, path: str, seen: list[str]
) -> list[str]:
    """Write the lines of the log's tail not written yet; the tail, to compare next time."""
    try:
        text = await core.calls.tail(launch, path, FOLLOW_LINES)
    except TrainbotError as exc:  # said, and asked again next time
        await response.write(f"{END_MARK} could not read the log now: {exc}\n".encode())
        return seen
    lines = text.splitlines()
    fresh = new_lines(seen, lines)
    if fresh:
        chunk = "\n".join(fresh) + "\n"
        await response.write((core.redactor(chunk) if core.redactor else chunk).encode())
    return lines
