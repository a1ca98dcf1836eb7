"""On-call alerts: the page in the on-call channel and PagerDuty Events API v2.

The message builders are pure. ``cause`` and ``action`` come from the caller as
already-escaped mrkdwn; every other user-derived value is escaped here, and
Slack ids are only turned into mentions when they look like Slack ids, so a
title such as ``<!channel>`` shows as typed and pings no one.

:class:`PagerDuty` sends trigger and resolve events with a dedup key (one alert
per launch and cause), retries 429 (after ``Retry-After``), 5xx and connection
errors a bounded number of times, and raises :class:`AlertError` when it gives
up. The routing key never appears in logs or in the error text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal

import aiohttp
from pydantic import SecretStr

from bot.text.mrkdwn import escape
from cluster.errors import TrainbotError

log = logging.getLogger(__name__)

Severity = Literal["critical", "error", "warning", "info"]
SEVERITIES: tuple[str, ...] = ("critical", "error", "warning", "info")
SUMMARY_MAX = 1024  # Events API v2 limit on payload.summary

_USERGROUP_ID = re.compile(r"^S[A-Z0-9]{2,}$")
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
_LINK_URL = re.compile(r"^https?://[^\s<>|]+$")


class AlertError(TrainbotError):
    """An alert could not be delivered (after retries). Never holds the routing key."""

    def __init__(self, *, action: str, dedup_key: str, reason: str, status: int = 0) -> None:
        self.action = action
        self.dedup_key = dedup_key
        self.reason = reason
        self.status = status
        super().__init__(str(self))

    def __str__(self) -> str:
        status = f" (HTTP {self.status})" if self.status else ""
        return f"PagerDuty {self.action} for {self.dedup_key} failed: {self.reason}{status}"


# ---------------------------------------------------------------------------
# Message builders (pure)


def _launch_label(*, job_id: str, launch_id: str, title: str, user_id: str) -> str:
    """``job 4187 (L-7f3a: sft llama3p1_8b, <@U123>)``, escaped."""
    head = f"job {escape(job_id)}" if job_id else f"launch {escape(launch_id)}"
    inside = escape(title)
    if job_id and launch_id:
        inside = f"{escape(launch_id)}: {inside}" if inside else escape(launch_id)
    if user_id:
        who = f"<@{user_id}>" if _USER_ID.match(user_id) else escape(user_id)
        inside = f"{inside}, {who}" if inside else who
    return f"{head} ({inside})" if inside else head


def _thread_link(permalink: str) -> str:
    if not _LINK_URL.match(permalink):
        return ""
    return f" Thread: <{escape(permalink)}|thread>"


def _sentence(text: str) -> str:
    text = text.strip()
    return text if not text or text.endswith((".", "!", "?")) else text + "."


def oncall_text(
    *,
    usergroup_id: str,
    job_id: str,
    launch_id: str,
    title: str,
    user_id: str,
    cluster: str,
    cause: str,
    action: str,
    permalink: str,
) -> str:
    """The page for the on-call channel, e.g.

    ``<!subteam^S0ONCALL> job 4187 (L-7f3a: sft llama3p1_8b, <@U123>) on a4: node
    dev1 failed (NODE_FAIL). Retried without it as job 4192. Thread: <url|thread>``

    ``cause`` and ``action`` are already-escaped mrkdwn. An empty or malformed
    ``usergroup_id`` mentions no one.
    """
    mention = f"<!subteam^{usergroup_id}> " if _USERGROUP_ID.match(usergroup_id) else ""
    label = _launch_label(job_id=job_id, launch_id=launch_id, title=title, user_id=user_id)
    where = f" on {escape(cluster)}" if cluster else ""
    text = f"{mention}{label}{where}: {_sentence(cause) or 'needs attention.'}"
    if action.strip():
        text += f" {_sentence(action)}"
    return text + _thread_link(permalink)


def resolved_text(
    *,
    job_id: str,
    launch_id: str,
    title: str,
    cluster: str,
    outcome: str,
    permalink: str,
) -> str:
    """The follow-up once the trouble is over; mentions no one, e.g.

    ``✅ Resolved: job 4187 (L-7f3a: sft llama3p1_8b) on a4: recovered as job 4192.
    Thread: <url|thread>``

    ``outcome`` is already-escaped mrkdwn ("recovered as job 4192", "completed").
    """
    label = _launch_label(job_id=job_id, launch_id=launch_id, title=title, user_id="")
    where = f" on {escape(cluster)}" if cluster else ""
    return f"✅ Resolved: {label}{where}: {_sentence(outcome) or 'resolved.'}" + _thread_link(
        permalink
    )


# ---------------------------------------------------------------------------
# PagerDuty Events API v2

Sleep = Callable[[float], Awaitable[None]]


class PagerDuty:
    """A client for one Events API v2 endpoint and routing key.

    Pass ``session`` to share an aiohttp session; otherwise one is opened on
    first use and closed by :meth:`close` (or ``async with``).
    """

    def __init__(
        self,
        url: str,
        routing_key: SecretStr,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout_s: float = 10.0,
        max_attempts: int = 4,
        backoff_base_s: float = 1.0,
        max_wait_s: float = 60.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.url = url
        self._routing_key = routing_key
        self._session = session
        self._owns_session = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.max_wait_s = max_wait_s
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"PagerDuty(url={self.url!r}, routing_key=SecretStr('**********'))"

    async def __aenter__(self) -> PagerDuty:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session if this client opened it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def trigger(
        self,
        dedup_key: str,
        summary: str,
        *,
        source: str,
        severity: Severity = "error",
        custom_details: Mapping[str, Any] | None = None,
        links: Sequence[Mapping[str, str]] = (),
    ) -> None:
        """Open (or add to) the alert ``dedup_key``. ``links`` are ``{"href", "text"}``."""
        if severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {', '.join(SEVERITIES)} (got {severity!r})")
        if len(summary) > SUMMARY_MAX:
            summary = summary[: SUMMARY_MAX - 1] + "…"
        payload: dict[str, Any] = {
            "summary": summary,
            "source": source,
            "severity": severity,
            "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "component": "trainbot",
            "custom_details": dict(custom_details or {}),
        }
        event: dict[str, Any] = {"event_action": "trigger", "dedup_key": dedup_key}
        event["payload"] = payload
        event["links"] = [dict(link) for link in links]
        event["client"] = "trainbot"
        await self._send(event)

    async def resolve(self, dedup_key: str) -> None:
        """Resolve the alert ``dedup_key`` (PagerDuty drops it if none is open)."""
        await self._send({"event_action": "resolve", "dedup_key": dedup_key})

    async def _send(self, event: dict[str, Any]) -> None:
        action = str(event["event_action"])
        key = str(event["dedup_key"])
        body = json.dumps({"routing_key": self._routing_key.get_secret_value(), **event})
        reason = "not sent"
        status = 0
        for attempt in range(1, self.max_attempts + 1):
            wait_s: float | None = None
            try:
                status, text, retry_after = await self._post(body)
            except (aiohttp.ClientError, TimeoutError) as exc:
                status, reason = 0, _redact(_describe(exc), self._routing_key)
            else:
                if 200 <= status < 300:
                    log.info("PagerDuty %s accepted: dedup_key=%s", action, key)
                    return
                reason = _redact(_error_text(text) or f"HTTP {status}", self._routing_key)
                if status != 429 and status < 500:
                    raise AlertError(action=action, dedup_key=key, reason=reason, status=status)
                wait_s = retry_after if status == 429 else None
            if attempt == self.max_attempts:
                break
            delay_s = self._delay_s(attempt, wait_s)
            log.warning(
                "PagerDuty %s for %s failed (%s); retrying in %.1f s (attempt %d of %d)",
                action,
                key,
                f"HTTP {status}: {reason}" if status else reason,
                delay_s,
                attempt + 1,
                self.max_attempts,
            )
            await self._sleep(delay_s)
        raise AlertError(
            action=action,
            dedup_key=key,
            reason=f"{reason} (gave up after {self.max_attempts} attempts)",
            status=status,
        )

    async def _post(self, body: str) -> tuple[int, str, float | None]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        async with self._session.post(
            self.url,
            data=body.encode(),
            headers={"Content-Type": "application/json"},
            timeout=self._timeout,
        ) as response:
            text = await response.text(errors="replace")
            return response.status, text, _retry_after_s(response.headers.get("Retry-After"))

    def _delay_s(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(max(retry_after_s, 0.0), self.max_wait_s)
        delay = min(self.max_wait_s, self.backoff_base_s * 2.0 ** (attempt - 1))
        return delay + random.uniform(0, delay / 10)


def _retry_after_s(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def _error_text(text: str) -> str:
    """PagerDuty's error answer as one line: message and errors, or the raw text cut short."""
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200]
    if not isinstance(data, dict):
        return " ".join(text.split())[:200]
    errors = data.get("errors")
    details = "; ".join(str(e) for e in errors) if isinstance(errors, list) else ""
    message = str(data.get("message") or data.get("status") or "")
    return ": ".join(part for part in (message, details) if part)[:300]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _redact(text: str, secret: SecretStr) -> str:
    value = secret.get_secret_value()
    return text.replace(value, "**********") if value else text
