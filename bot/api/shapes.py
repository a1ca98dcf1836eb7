"""Launches and checkpoints as the API's JSON: the structured fields beside the text the
core gives Slack. Pure: records in, plain dicts out."""

from __future__ import annotations

import re
from typing import Any

from bot.lifecycle import measures
from bot.lifecycle.launch import Launch
from bot.wording import endings, render
from commands.sweep import SWEEP_ID_PATTERN
from commands.values import LAUNCH_ID_PATTERN

# Launch and sweep ids as the core writes them in a reply (`L-7f3a9c`, `S-41c2aa`).
IDS_RE = re.compile(rf"\b(?:{LAUNCH_ID_PATTERN.strip('^$')}|{SWEEP_ID_PATTERN.strip('^$')})\b")


def ids_in(text: str) -> list[str]:
    """The launch and sweep ids a reply names, first seen first."""
    return list(dict.fromkeys(IDS_RE.findall(text)))


def launch_json(launch: Launch) -> dict[str, Any]:
    """One launch: what it is, where, its state in Slurm's words, its progress."""
    _, word = render.status_label(launch)
    request = launch.request
    progress = launch.progress
    record = next((a.record for a in reversed(launch.attempts) if a.record), None)
    return {
        "id": launch.id,
        "user_id": launch.user_id,
        "request": request.to_text(),
        "title": launch.title,
        "cluster": launch.cluster,
        "nodes": request.nodes,
        "phase": launch.phase.value,
        "state": word,
        "active": launch.active,
        "outcome": launch.outcome,
        "detail": endings.sentence(launch.ending, launch.detail),  # how it ended, in words
        "ending": launch.ending,  # ... and as facts (``move`` and what its words need)
        "job_id": launch.job_id,
        "attempts": len(launch.attempts),
        "step": progress.step,
        "total_steps": progress.total,
        "loss": progress.loss,
        "checkpoints": len(launch.checkpoints),
        "sweep": launch.sweep,
        "created_at": launch.created_at,
        "updated_at": launch.updated_at,
        "thread": launch.permalink,
        "record": record.model_dump(mode="json") if record else None,
    }


def checkpoints_json(launch: Launch) -> list[dict[str, Any]]:
    """A launch's checkpoints, oldest first: step, the validation loss at that step when
    the log said one, and its size in bytes when the poller measured it (else null)."""
    val = dict(launch.validation_history)
    found = []
    for name in launch.checkpoints:
        step = measures.checkpoint_step(launch, name)
        found.append(
            {
                "path": name,
                "step": step,
                "label": measures.checkpoint_label(launch, name),
                "val_loss": val.get(step) if step is not None else None,
                "size_bytes": launch.checkpoint_bytes.get(name),
            }
        )
    return found


def checkpoints_text(launch: Launch, found: list[dict[str, Any]]) -> str:
    """The same list as lines (plain text: the CLI prints it as it is)."""
    if not found:
        return f"{launch.id} has no checkpoints yet ({render.status_label(launch)[1]})."
    lines = [f"Checkpoints of {launch.id} ({launch.title} on {launch.cluster}):"]
    for item in found:
        loss = f" · val loss {item['val_loss']:.4g}" if item["val_loss"] is not None else ""
        size = f" · {item['size_bytes']:,} bytes" if item.get("size_bytes") else ""
        lines.append(f"• {item['label']}{loss}{size} · {item['path']}")
    return "\n".join(lines)
