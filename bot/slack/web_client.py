"""The ``AsyncWebClient`` every Slack call goes through, and its retry policy.

Rate limits (HTTP 429) are retried after the ``Retry-After`` the server asked
for (capped); 5xx answers and connection errors are retried with a bounded
exponential backoff.
"""

from __future__ import annotations

import asyncio
import logging
import random

import aiohttp
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.http_retry.interval_calculator import RetryIntervalCalculator
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://slack.com/api/"


class Backoff(RetryIntervalCalculator):
    """``base_s * 2**attempt`` capped at ``cap_s``, with up to 10% jitter."""

    def __init__(self, *, base_s: float = 0.5, cap_s: float = 8.0) -> None:
        self.base_s = base_s
        self.cap_s = cap_s

    def calculate_sleep_duration(self, current_attempt: int) -> float:
        delay = min(self.cap_s, self.base_s * 2.0**current_attempt)
        return delay + random.uniform(0, delay / 10)


class RateLimitRetry(AsyncRetryHandler):
    """Retries HTTP 429 after exactly the ``Retry-After`` seconds asked for (capped)."""

    def __init__(self, *, max_retry_count: int = 5, max_wait_s: float = 60.0) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.max_wait_s = max_wait_s

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        return response is not None and response.status_code == 429

    async def prepare_for_next_attempt_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        wait_s = 1.0
        for name, values in (response.headers if response else {}).items():
            if name.lower() == "retry-after" and values:
                try:
                    wait_s = float(values[0])
                except ValueError:
                    pass
        wait_s = min(max(wait_s, 0.0), self.max_wait_s)
        log.warning("Slack rate limit on %s; retrying in %.1f s", _method_of(request), wait_s)
        await asyncio.sleep(wait_s + random.uniform(0, min(1.0, wait_s / 10)))
        state.next_attempt_requested = True
        state.increment_current_attempt()


class ServerErrorRetry(AsyncRetryHandler):
    """Retries any 5xx answer with a bounded backoff."""

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is None or response.status_code < 500:
            return False
        log.warning("Slack answered %d on %s; retrying", response.status_code, _method_of(request))
        return True


def _method_of(request: HttpRequest) -> str:
    return str(request.url).rstrip("/").rsplit("/", 1)[-1]


def make_web_client(
    bot_token: str,
    *,
    api_url: str = DEFAULT_API_URL,
    session: aiohttp.ClientSession | None = None,
    max_retries: int = 4,
    backoff_base_s: float = 0.5,
    max_rate_limit_wait_s: float = 60.0,
) -> AsyncWebClient:
    """An ``AsyncWebClient`` on ``api_url`` with trainbot's retry policy."""
    backoff = Backoff(base_s=backoff_base_s)
    # Not slack_sdk's own 429/5xx handlers: theirs sleep any Retry-After uncapped (and
    # fail on a non-integer one), retry only 500 and 503 (not a proxy's 502 or 504), and log
    # nothing; these cap the wait, retry every 5xx and say so in the log.
    handlers: list[AsyncRetryHandler] = [
        AsyncConnectionErrorRetryHandler(max_retry_count=max_retries, interval_calculator=backoff),
        RateLimitRetry(max_retry_count=max_retries + 1, max_wait_s=max_rate_limit_wait_s),
        ServerErrorRetry(max_retry_count=max_retries, interval_calculator=backoff),
    ]
    base_url = api_url if api_url.endswith("/") else api_url + "/"
    return AsyncWebClient(
        token=bot_token, base_url=base_url, session=session, retry_handlers=handlers
    )
