"""The rate limits of policy ``limits``: costly requests counted per person."""

from __future__ import annotations

import math
from typing import Literal

from bot.store.store import Store
from commands.context import CommandContext
from commands.errors import CommandError

RATE_WINDOW_S = 60.0  # the rate limits of policy ``limits`` count over this window


async def slow_down(
    store: Store, context: CommandContext, user_id: str, kind: Literal["launches", "commands"]
) -> None:
    """Count a costly request against the person's limit (policy ``limits``), or refuse
    it, saying how long to wait."""
    limits = context.policy.limits
    limit = limits.launches_per_minute if kind == "launches" else limits.commands_per_minute
    if limit is None:
        return
    wait_s = await store.take_rate(kind, user_id, limit=limit, window_s=RATE_WINDOW_S)
    if wait_s <= 0:
        return
    plural = "" if limit == 1 else ("es" if kind == "launches" else "s")
    what = (
        f"started {limit} launch{plural}"
        if kind == "launches"
        else f"ran {limit} command{plural} that ask a cluster"
    )
    raise CommandError(
        f"Slow down: you {what} in the last minute; try again in {math.ceil(wait_s)} s."
    )
