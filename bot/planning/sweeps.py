"""A sweep: its record, the table its parent message holds, and the comparison at the end.

A sweep is one launch per combination of the values a ``/train`` line listed
(:class:`commands.requests.SweepRequest`). Each member is an ordinary launch that
names its sweep; the sweep's own record keeps the members' order and values and
the parent message. The members' thread lines go into the sweep's thread; their
parent updates re-render the one table (the notifier coalesces them).
"""

from __future__ import annotations

import math
from typing import Any

from bot.lifecycle import render
from bot.lifecycle.launch import Launch, Phase, Sweep
from bot.text.mrkdwn import (
    ACTION_CANCEL,
    SECTION_TEXT_MAX,
    Block,
    actions,
    cancel_button,
    context,
    escape,
    section,
)
from commands.requests import SweepRequest

TABLE_SECTIONS_MAX = 3  # sections of rows in the parent; past that the table is summarised
SELECT_OPTIONS_MAX = 100  # Slack's limit for a static select
ACTION_CANCEL_MEMBER = "trainbot_cancel_member"


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


def _num(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4g}"


def _state(launch: Launch | None) -> str:
    if launch is None:
        return "❔ GONE"
    icon, word = render.status_label(launch)
    if launch.active and len(launch.attempts) > 1:
        word = f"RETRY {len(launch.attempts)}"
    return f"{icon} {word}"


def _step(launch: Launch | None) -> str:
    if launch is None or not launch.progress.total:
        return "-"
    return f"{launch.progress.step}/{launch.progress.total}"


def rows(sweep: Sweep, launches: list[Launch | None], now: float) -> list[list[str]]:
    """The table's rows: #, each varied value, state, step, loss, GPU-h."""
    table = []
    for index, launch in enumerate(launches):
        hours = "-" if launch is None else f"{gpu_hours(launch, now):.2f}"
        loss = None if launch is None else final_loss(launch)
        table.append(
            [str(index + 1), *sweep.values[index], _state(launch), _step(launch), _num(loss), hours]
        )
    return table


def _columns(header: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in [header, *body]]  # fmt: skip


def _header(sweep: Sweep) -> list[str]:
    return ["#", *sweep.keys, "state", "step", "loss", "GPU-h"]


def headline(sweep: Sweep, launches: list[Launch | None]) -> str:
    done = sum(1 for launch in launches if launch is not None and not launch.active)
    hours = f" · ~{sweep.estimate_gpu_hours:,.1f} GPU-hours" if sweep.estimate_gpu_hours else ""
    word = "DONE" if done == len(launches) else "RUNNING"
    return (
        f"🧪 *SWEEP {sweep.id}* {word} · {escape(sweep.title)} · {len(launches)} members · "
        f"{escape(sweep.where)}{hours} · {done}/{len(launches)} ended"
    )


def _chunks(lines: list[str], max_chars: int) -> list[list[str]]:
    chunks: list[list[str]] = [[]]
    size = 0
    for line in lines:
        if chunks[-1] and size + len(line) + 1 > max_chars:
            chunks.append([])
            size = 0
        chunks[-1].append(line)
        size += len(line) + 1
    return chunks


def _summary(launches: list[Launch | None]) -> str:
    counts: dict[str, int] = {}
    for launch in launches:
        word = _state(launch)
        counts[word] = counts.get(word, 0) + 1
    return " · ".join(f"{word} {n}" for word, n in sorted(counts.items()))


def table_blocks(
    sweep: Sweep, launches: list[Launch | None], now: float
) -> tuple[str, list[Block]]:
    """The parent message: headline, the table (in at most ``TABLE_SECTIONS_MAX``
    code blocks; the rows past that summarised by state), and the cancel controls."""
    head = headline(sweep, launches)
    lines = [escape(line) for line in _columns(_header(sweep), rows(sweep, launches, now))]
    room = SECTION_TEXT_MAX - 10  # the code fence
    chunks = _chunks(lines[1:], room - len(lines[0]) - 1)
    blocks: list[Block] = [section(head)]
    for chunk in chunks[:TABLE_SECTIONS_MAX]:
        blocks.append(section("```" + "\n".join([lines[0], *chunk]) + "```"))
    shown = sum(len(chunk) for chunk in chunks[:TABLE_SECTIONS_MAX])
    if shown < len(launches):
        blocks.append(
            context(f"{len(launches) - shown} more members not shown: {_summary(launches[shown:])}")
        )
    blocks.append(context(f"launched by <@{sweep.user_id}> · `{escape(sweep.text)}`"))
    if controls := _controls(sweep, launches):
        blocks.append(actions(*controls))
    return head.replace("*", ""), blocks


def _controls(sweep: Sweep, launches: list[Launch | None]) -> list[Block]:
    running = [
        (i, launch) for i, launch in enumerate(launches) if launch is not None and launch.active
    ]
    if not running:
        return []
    label = f"sweep {sweep.id} ({len(running)} active launches)"
    options = [
        {
            "text": {"type": "plain_text", "text": f"#{i + 1} {sweep.label(i)}"[:75]},
            "value": launch.id,
        }
        for i, launch in running[:SELECT_OPTIONS_MAX]
    ]
    select: dict[str, Any] = {
        "type": "static_select",
        "action_id": ACTION_CANCEL_MEMBER,
        "placeholder": {"type": "plain_text", "text": "Cancel a member…"},
        "options": options,
    }
    button = cancel_button(sweep.id, job_label=label)
    button["text"]["text"] = "Cancel sweep"
    assert button["action_id"] == ACTION_CANCEL
    return [button, select]


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


def comparison_text(sweep: Sweep, launches: list[Launch | None], now: float) -> str:
    """The end of the sweep: every member, best final loss first."""
    header = ["rank", "#", *sweep.keys, "outcome", "loss", "val loss", "GPU-h"]
    body = []
    for rank, (index, launch) in enumerate(ranked(sweep, launches), start=1):
        body.append([
            str(rank), str(index + 1), *sweep.values[index], render.status_label(launch)[1],
            _num(final_loss(launch)), _num(final_val_loss(launch)),
            f"{gpu_hours(launch, now):.2f}",
        ])  # fmt: skip
    lines = [escape(line) for line in _columns(header, body)]
    best = ranked(sweep, launches)
    top = f" Best: #{best[0][0] + 1} ({escape(sweep.label(best[0][0]))})." if best else ""
    return (
        f"🏁 Sweep {sweep.id} ended: {len(launches)} members, sorted by final "
        f"loss.{top}\n```" + "\n".join(lines) + "```"
    )


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


def short_values(sweep: Sweep, index: int) -> str:
    return escape(sweep.label(index))


WANDB_COLUMNS = 4  # the W&B summary keys a sweep's comparison shows, most shared first


def wandb_comparison_text(sweep: Sweep, launches: list[Launch | None]) -> str:
    """The members' W&B run summaries side by side: the keys most members report ("" when
    no member has one). Every key is escaped: whoever writes a run chose it."""
    summaries = [launch.wandb_summary if launch else {} for launch in launches]
    counts: dict[str, int] = {}
    for summary in summaries:
        for key in summary:
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return ""
    shown = sorted(counts, key=lambda k: (-counts[k], k))[:WANDB_COLUMNS]
    header = ["#", *sweep.keys, *shown]
    body = [
        [str(i + 1), *sweep.values[i], *(_num(summary.get(key)) for key in shown)]
        for i, summary in enumerate(summaries)
    ]
    lines = [escape(line) for line in _columns(header, body)]
    return f"📈 W&B summaries of sweep {sweep.id}:\n```" + "\n".join(lines) + "```"
