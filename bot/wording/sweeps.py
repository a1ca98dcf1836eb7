"""How a sweep looks in its channel: the table its parent message holds (Block Kit), each
member's label in the sweep's thread, the comparison at the end and the members' W&B
summaries side by side. The arithmetic (final losses, GPU-hours, the ranking) is
``bot.lifecycle.sweeps``'; the members' thread lines go into the sweep's thread, and
their parent updates re-render the one table (the notifier coalesces them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bot.lifecycle.launch import Launch, Sweep
from bot.lifecycle.sweeps import final_loss, final_val_loss, gpu_hours, ranked
from bot.text.actions import ACTION_CANCEL, ACTION_CANCEL_MEMBER
from bot.text.mrkdwn import (
    SECTION_TEXT_MAX,
    Block,
    actions,
    cancel_button,
    context,
    escape,
    section,
)
from bot.wording import render

TABLE_SECTIONS_MAX = 3  # sections of rows in the parent; past that the table is summarised
SELECT_OPTIONS_MAX = 100  # Slack's limit for a static select


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


def short_values(sweep: Sweep, index: int) -> str:
    return escape(sweep.label(index))


WANDB_COLUMNS = 4  # the W&B summary keys a sweep's comparison shows, most shared first


def wandb_comparison(facts: Mapping[str, Any]) -> str:
    """The members' W&B run summaries side by side (``header`` and ``rows`` of the thread
    event's facts: see ``bot.lifecycle.sweeps.wandb_columns``). Every cell is escaped:
    whoever writes a run chose its keys."""
    header = [str(cell) for cell in facts.get("header") or []]
    body = [[_num(cell) if not isinstance(cell, str) else cell for cell in row]
            for row in facts.get("rows") or []]  # fmt: skip
    lines = [escape(line) for line in _columns(header, body)]
    return (
        f"📈 W&B summaries of sweep {escape(str(facts.get('sweep', '')))}:\n```"
        + "\n".join(lines)
        + "```"
    )
