"""The rate limits of policy ``limits``: costly requests counted per person."""

from __future__ import annotations

import math
from typing import Literal

from bot.store.store import Store
from commands.context import CommandContext
from commands.errors import CommandError

RATE_WINDOW_S = 60.0  # the rate limits of policy ``limits`` count over this window


async def slow_down(
    store: Store,
    context: CommandContext,
    user_id: str,
    kind: Literal["launches", "commands"],
    uses: int = 1,
) -> None:
    """Count a costly request (``uses`` launches: a sweep's members) against the person's
    limit (policy ``limits``), all or none, or refuse it, saying how long to wait."""
    limit = _limit(context, kind)
    if limit is None:
        return
    if uses > limit:
        raise CommandError(
            f"This starts {uses} launches, and you may start at most {limit} a minute "
            "(policy limits.launches_per_minute counts each member of a sweep). Give fewer "
            "values, or split it into sweeps a minute apart."
        )
    wait_s = await store.budgets.take_rate(
        kind, user_id, limit=limit, window_s=RATE_WINDOW_S, uses=uses
    )
    _too_fast(kind, limit, wait_s)


async def active_slowed_down(store: Store, context: CommandContext, user_id: str) -> int:
    """The person's active launches, and a launch counted against their limit (or
    refused, as :func:`slow_down`), in one round trip to the store."""
    limit = _limit(context, "launches")
    active, _, wait_s = await store.budgets.active_counts_taking_rate(
        user_id, "launches", limit=limit, window_s=RATE_WINDOW_S
    )
    if limit is not None:
        _too_fast("launches", limit, wait_s)
    return active


def _limit(context: CommandContext, kind: Literal["launches", "commands"]) -> int | None:
    limits = context.policy.limits
    return limits.launches_per_minute if kind == "launches" else limits.commands_per_minute


def _too_fast(kind: Literal["launches", "commands"], limit: int, wait_s: float) -> None:
    """The refusal of a request over its limit (``wait_s`` > 0: when one more fits)."""
    if wait_s <= 0:
        return
    plural = "" if limit == 1 else ("es" if kind == "launches" else "s")
    what = (
        f"started {limit} launch{plural}"
        if kind == "launches"
        else f"ran {limit} costly command{plural} (/logs, /clusters, /usage)"
    )
    raise CommandError(
        f"Slow down: you {what} in the last minute; try again in {math.ceil(wait_s)} s."
    )
