"""The words of a run's health notes (``bot.lifecycle.health`` finds them, as facts):
a NaN loss, a spike, a reward that collapsed or went flat, validation loss rising, slow
steps and their recovery, idle GPUs; and who cancelled a run, and the closing line of a
run that completed although its loss went NaN. Pure: facts in, mrkdwn out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bot.text.mrkdwn import escape

Facts = Mapping[str, Any]


def _loss(value: float) -> str:
    return f"{value:.4g}"


def loss_nan(f: Facts) -> str:
    owner, loss = escape(str(f["owner"])), escape(str(f["loss"]))
    what = f"🛑 <@{owner}> the training loss is {loss} at step {f['step']:,}"
    if f.get("then") == "ended":
        return f"{what}; the job has already ended."
    if f.get("then") == "stop":
        return (
            f"{what}: trainbot is stopping the run (health policy: stop on NaN). "
            "It will not be retried."
        )
    return (
        f"{what}. The run goes on (health policy: flag); what it trains from here is "
        "likely unusable: cancel it if it should not."
    )


def loss_spike(f: Facts) -> str:
    return (
        f"⚠️ Loss spike at step {f['step']:,}: {_loss(f['loss'])}, over "
        f"{f['factor']:g}× the recent median ({_loss(f['median'])})."
    )


def reward_collapse(f: Facts) -> str:
    return (
        f"📉 The reward collapsed at step {f['step']:,}: its median over the last "
        f"{f['window']} steps is {f['median']:.3g}, its best was {f['best']:.3g}."
    )


def reward_flat(f: Facts) -> str:
    return (
        f"📏 The reward has been {f['reward']:.3g} for {f['steps']} steps "
        f"(up to step {f['step']:,}): every answer scores the same, so the policy gets "
        "no learning signal."
    )


def val_rising(f: Facts) -> str:
    vals = list(f["validations"])
    figures = " → ".join(_loss(v) for v in vals)
    return (
        f"📝 Validation loss rose over the last {len(vals)} validations ({figures}, up to "
        f"step {f['step']:,}) while the training loss fell ({_loss(f['train_from'])} → "
        f"{_loss(f['train_to'])}): the run may be overfitting."
    )


def slow(f: Facts) -> str:
    saves = list(f.get("saves") or [])
    if saves:
        cause = "Likely cause: checkpoint saves at step " + ", ".join(f"{s:,}" for s in saves)
    else:
        cause = (
            "No checkpoint save in that window; the usual causes are a node whose tasks "
            "lag the others, I/O waits or a starved data loader"
        )
    return (
        f"🐢 Steps are slow since step {f['first']:,}: {f['step_time_s']:.3g} s at step "
        f"{f['step']:,}, the run's median is {f['median_s']:.3g} s. {escape(cause)}."
    )


def speed_back(f: Facts) -> str:
    return (
        f"✅ Step time is back to normal at step {f['step']:,} ({f['step_time_s']:.3g} s; "
        f"median {f['median_s']:.3g} s)."
    )


def gpu_idle(f: Facts) -> str:
    return (
        f"🪫 <@{escape(str(f['owner']))}> the {f['gpus']} GPUs of job {escape(str(f['job']))} "
        f"have been nearly idle for {f['minutes']:.0f} min: {escape(str(f['sample']))}. A "
        "starved data loader, I/O waits or a stuck rank are the usual causes."
    )


NOTES: dict[str, Callable[[Facts], str]] = {
    "loss_nan": loss_nan,
    "loss_spike": loss_spike,
    "reward_collapse": reward_collapse,
    "reward_flat": reward_flat,
    "val_rising": val_rising,
    "slow": slow,
    "speed_back": speed_back,
    "gpu_idle": gpu_idle,
}


def note(facts: Facts) -> str:
    """The words of one health note; ValueError for a kind this version does not know."""
    kind = str(facts.get("note", ""))
    say = NOTES.get(kind)
    if say is None:
        raise ValueError(f"a health note of kind {kind!r} has no words here ({', '.join(NOTES)})")
    return say(facts)
