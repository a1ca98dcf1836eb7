"""A sweep's arithmetic: its members' final losses and GPU-hours, their ranking, their
loss curves, whether all have ended, where it runs, and the W&B keys its comparison
shows. Plain numbers and words; ``bot.wording.sweeps`` draws the table and says the
comparison.

A sweep is one launch per combination of the values a ``/train`` line listed
(:class:`commands.requests.SweepRequest`). Each member is an ordinary launch that
names its sweep; the sweep's own record keeps the members' order and values and
the parent message.
"""

from __future__ import annotations

import math

from bot.lifecycle.launch import Launch, Phase, Sweep
from commands.requests import SweepRequest

WANDB_COLUMNS = 4  # the W&B summary keys a sweep's comparison shows, most shared first


def final_loss(launch: Launch) -> float | None:
    if launch.progress_history:
        return launch.progress_history[-1][1]
    return launch.progress.loss


def final_val_loss(launch: Launch) -> float | None:
    return launch.validation_history[-1][1] if launch.validation_history else None


def gpu_hours(launch: Launch, now: float) -> float:
    """What the member used: Slurm's figure once charged, else nodes x GPUs x time so far."""
    if launch.gpu_hours:
        return launch.gpu_hours
    gpus = launch.request.nodes * 8
    seconds = sum(
        (a.ended_at or (now if launch.active else a.submitted_at)) - a.submitted_at
        for a in launch.attempts
        if a.submitted_at
    )
    return max(seconds, 0.0) * gpus / 3600


def ranked(sweep: Sweep, launches: list[Launch | None]) -> list[tuple[int, Launch]]:
    """Members with a record, best first: by final validation loss where every ranked
    member has one, else by final loss; members without a loss last."""
    known = [(i, launch) for i, launch in enumerate(launches) if launch is not None]
    use_val = bool(known) and all(final_val_loss(launch) is not None for _, launch in known)

    def key(item: tuple[int, Launch]) -> tuple[int, float, int]:
        value = final_val_loss(item[1]) if use_val else final_loss(item[1])
        finite = value is not None and math.isfinite(value)
        return (0 if finite else 1, value if finite and value is not None else 0.0, item[0])

    return sorted(known, key=key)


def curves(
    sweep: Sweep, launches: list[Launch | None]
) -> list[tuple[str, list[tuple[float, float]]]]:
    """Each member's loss history, labelled by the values that differ."""
    return [
        (f"#{i + 1} {sweep.label(i)}", [(float(s), float(v)) for s, v in launch.progress_history])
        for i, launch in enumerate(launches)
        if launch is not None and launch.progress_history
    ]


def ended(launches: list[Launch | None]) -> bool:
    return all(
        launch is None or launch.phase == Phase.DONE or not launch.active for launch in launches
    )


def where(request: SweepRequest) -> str:
    """``2 nodes × a4`` (or ``1-2 nodes × a4`` when nodes vary)."""
    nodes = sorted({m.nodes for m in request.members})
    count = str(nodes[0]) if len(nodes) == 1 else f"{nodes[0]}-{nodes[-1]}"
    unit = "node" if nodes == [1] else "nodes"
    return f"{count} {unit} × {request.cluster}"


def wandb_columns(
    sweep: Sweep, launches: list[Launch | None]
) -> tuple[list[str], list[list[str | float | None]]]:
    """The members' W&B summaries as a table: a header (``#``, the varied keys, the
    summary keys most members report) and a row per member (its number, its values, its
    figures, None where it has none); no rows when no member has a summary."""
    summaries = [launch.wandb_summary if launch else {} for launch in launches]
    counts: dict[str, int] = {}
    for summary in summaries:
        for key in summary:
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return [], []
    shown = sorted(counts, key=lambda k: (-counts[k], k))[:WANDB_COLUMNS]
    header = ["#", *sweep.keys, *shown]
    body: list[list[str | float | None]] = [
        [str(i + 1), *sweep.values[i], *(summary.get(key) for key in shown)]
        for i, summary in enumerate(summaries)
    ]
    return header, body
