"""What a request to ``/slack/events`` passes before bolt parses it, and its hand-over.

The signature is checked (missing, bad or older than 300 s: 401), the body must be
well-formed (otherwise 400), and a signed request seen before (a replay, within the
signature's 5 minutes) is acknowledged and dropped; the record of seen requests is
the ``ReplayGuard`` passed in (Redis, shared by every bot process) or this process's
memory. When the guard cannot be asked, the request is refused: 503, or for a slash
command the store's error. ``to_bolt_request`` then hands the body to bolt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl

from aiohttp import web
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.request.async_internals import build_async_context
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier

from bot.text.mrkdwn import escape
from cluster.errors import TrainbotError

log = logging.getLogger(__name__)

ReplayGuard = Callable[[str, int], Awaitable[bool]]  # (key, ttl_s) -> first time seen?
REPLAY_WINDOW_S = 300  # Slack's signature window; kept a little longer below


def malformed(raw: str, content_type: str) -> str:
    """Why a (signed) body is not something Slack sends, or "" when it is well-formed."""
    if content_type == "application/json" or raw.lstrip().startswith("{"):
        try:
            return "" if isinstance(json.loads(raw), dict) else "JSON body is not an object"
        except ValueError:
            return "body is not valid JSON"
    try:
        form = dict(parse_qsl(raw, keep_blank_values=True, strict_parsing=bool(raw)))
    except ValueError:
        return "body is not a form"
    if "payload" in form:
        try:
            payload = json.loads(form["payload"])
        except ValueError:
            return "payload is not valid JSON"
        if not isinstance(payload, dict):
            return "payload is not a JSON object"
    return ""


class _MemoryGuard:
    """Seen requests in this process only (when no shared guard is given)."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}

    async def __call__(self, key: str, ttl_s: int) -> bool:
        now = time.monotonic()
        if len(self._seen) > 10_000:
            self._seen = {k: t for k, t in self._seen.items() if t > now}
        if self._seen.get(key, 0.0) > now:
            return False
        self._seen[key] = now + ttl_s
        return True


Check = Callable[[web.Request, str], Awaitable[web.Response | None]]


def request_check(signing_secret: str, replay_guard: ReplayGuard | None) -> Check:
    """The checks every request to ``/slack/events`` passes before bolt sees it."""
    verifier = SignatureVerifier(signing_secret) if signing_secret else None
    guard = replay_guard or _MemoryGuard()

    async def check(request: web.Request, raw: str) -> web.Response | None:
        timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature", "")
        if verifier is not None:
            try:
                valid = verifier.is_valid(body=raw, timestamp=timestamp, signature=signature)
            except ValueError:  # a timestamp that is not a number
                valid = False
            if not valid:
                log.info("refused a request with a missing, bad or stale signature")
                return web.Response(status=401, text="invalid or missing signature")
        problem = malformed(raw, request.content_type)
        if problem:
            log.info("refused a signed but malformed request: %s", problem)
            return web.Response(status=400, text=f"malformed request: {problem}")
        if verifier is not None:
            key = hashlib.sha256(f"{timestamp}:{signature}".encode()).hexdigest()
            try:
                first = await guard(key, REPLAY_WINDOW_S + 60)
            except TrainbotError as error:  # Redis is down: refuse, a replay must not pass
                log.warning("refused a signed request: the replay guard failed: %s", error)
                return _unavailable(raw, error)
            if not first:
                log.warning("dropped a replayed signed request (timestamp %s)", timestamp[:16])
                return web.Response(status=200, text="")
        return None

    return check


def _unavailable(raw: str, error: TrainbotError) -> web.Response:
    """The answer to a request that cannot be checked for replay: a slash command gets the
    words the commands use when the store fails (shown to the asker only); an event or a
    click gets 503 (Slack sends an event again later and shows the clicker an error)."""
    form = dict(parse_qsl(raw, keep_blank_values=True)) if not raw.lstrip().startswith("{") else {}
    if form.get("command") and "payload" not in form:
        text = f":warning: That did not work: {escape(str(error))}"
        return web.json_response({"response_type": "ephemeral", "text": text})
    return web.Response(status=503, text="trainbot's store is unreachable; try again shortly")


async def to_bolt_request(request: web.Request, raw: str | None = None) -> AsyncBoltRequest:
    """An aiohttp request as bolt's request, guarding bolt 1.30's ``payload`` trap.

    bolt's ``parse_body`` returns ``{}`` for any form body containing the
    substring "payload" (``/train ... name=payload-test``); such a body that has
    no ``payload`` field is parsed here as the plain form it is.
    """
    if raw is None:
        raw = await request.text()
    bolt_request = AsyncBoltRequest(body=raw, query=request.query_string, headers=request.headers)  # type: ignore[arg-type]
    if not bolt_request.body and raw and not raw.lstrip().startswith("{"):
        form = dict(parse_qsl(raw, keep_blank_values=True))
        if "payload" not in form:
            bolt_request.body = form
            bolt_request.context = build_async_context(AsyncBoltContext({}), form)
    return bolt_request
