"""The words of a page for on-call: what went wrong (the cause) and what trainbot does
about it (the action), from the facts an ``oncall`` event carries (``cause_key`` and
``facts``). Slack gets them escaped (mrkdwn), PagerDuty as plain text (``plain=True``).

An ``oncall`` entry written before pages carried facts holds its ``cause`` and ``action``
already worded (escaped), and the notifier posts those as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.lifecycle.measures import duration
from bot.text.mrkdwn import escape
from cluster.slurm.reasons import explain_pending

Facts = Mapping[str, Any]

ACTIONS = {
    "job_held": "Release it (scontrol release) or cancel it.",
    "silent_hang": "Cancel or Retry from the thread.",
    "tokenizer_seed": "Not retried.",
    "node_failure": "Slurm runs it again.",
}


def _s(facts: Facts, key: str) -> str:
    value = facts.get(key, "")
    return value if isinstance(value, str) else str(value)


def cause(cause_key: str, facts: Facts, *, plain: bool = False) -> str:
    """``job 41 is held by an admin (Slurm: JobHeldAdmin)``; a failure the catalog
    diagnosed says its own cause."""
    say = (lambda text: text) if plain else escape
    if cause_key == "job_held":
        why = explain_pending(_s(facts, "code"))
        words = _s(facts, "words") or (why.words if why else "held")
        return f"job {say(_s(facts, 'job'))} is {say(words)} (Slurm: {say(_s(facts, 'code'))})"
    if cause_key == "silent_hang":
        quiet = facts.get("quiet_s", 0)
        quiet_s = quiet if isinstance(quiet, int | float) and not isinstance(quiet, bool) else 0
        return f"no progress for {duration(quiet_s)} while RUNNING (silent hang?)"
    if cause_key == "node_failure":
        nodes = f" on {say(_s(facts, 'nodes'))}" if facts.get("nodes") else ""
        return f"node failure{nodes} (NODE_FAIL); Slurm requeued job {say(_s(facts, 'job'))}"
    return say(_s(facts, "cause"))  # tokenizer_seed, and the failure catalog's causes


def action(cause_key: str, facts: Facts) -> str:
    """What trainbot does about it (no fact a person typed: nothing to escape)."""
    if cause_key in ACTIONS:
        return ACTIONS[cause_key]
    return "Retrying." if facts.get("retry") else "Not retried."
