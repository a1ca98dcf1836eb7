"""The App Home tab: a person's launches, each cluster's room, and their notification settings.

Pure: launches, history entries, cluster capacity and thread links in, Block Kit
blocks out. :meth:`bot.core.app_home.AppHome.home` gathers them (cheaply: capacity is shared
for a minute between everyone who opens the tab).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from bot.core import record_view
from bot.lifecycle import health, measures
from bot.lifecycle.launch import HistoryEntry, Launch, Sweep
from bot.lifecycle.notices import DM_EVENTS
from bot.lifecycle.prefs import EVENT_LABELS, Prefs
from bot.lifecycle.prefs import hours_text as prefs_hours
from bot.store.lanes import DeadLetter
from bot.text.actions import ACTION_PREFS
from bot.text.mrkdwn import SECTION_TEXT_MAX, actions, button, context, escape, hour_select, section
from bot.wording import render, waits
from cluster.preflight.discovery import ClusterCapacity

RECENT_SHOWN = 10


def home_blocks(
    active: Sequence[Launch],
    recent: Sequence[HistoryEntry],
    capacity: Mapping[str, ClusterCapacity | str],
    links: Mapping[str, str],
    *,
    sweeps: Mapping[str, Sweep] | None = None,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """``capacity`` holds each cluster's answer, or why it could not be asked;
    ``links`` the permalinks of launch threads, by launch id; ``sweeps`` the records
    of the sweeps active launches belong to (their members are grouped under them)."""
    now = time.time() if now is None else now
    blocks: list[dict[str, Any]] = [section("*Your launches*")]
    if active:
        grouped: dict[str, list[Launch]] = {}
        for launch in active:
            if launch.sweep:
                if launch.sweep not in grouped:
                    grouped[launch.sweep] = []
                    blocks.append(section(launch.sweep))  # the sweep's block goes here
                grouped[launch.sweep].append(launch)
            else:
                line = _active_line(launch, links.get(launch.id, ""), now, active)
                shown = record_view.record_button(launch)
                blocks.append(
                    section(line) if shown is None else {**section(line), "accessory": shown}
                )
        for sweep_id, members in grouped.items():
            at = blocks.index(section(sweep_id))
            text = _sweep_text(sweep_id, (sweeps or {}).get(sweep_id), members, links, now)
            blocks[at] = section(text)
    else:
        blocks.append(context("Nothing running. `/train help` shows how to start a run."))
    blocks.append(section("*Recently finished*"))
    if recent:
        blocks += [section(_recent_line(entry, links.get(entry.id, ""))) for entry in recent]
    else:
        blocks.append(context("No finished launches yet."))
    blocks.append(section("*Clusters*"))
    for name, answer in capacity.items():
        blocks.append(section(_cluster_line(name, answer)))
    blocks.append(
        context(f"Updated {time.strftime('%H:%M', time.localtime(now))} (UTC offset of the bot).")
    )
    return blocks


def _thread(link: str) -> str:
    return f" · <{link}|thread>" if link.startswith("https://") else ""


def _active_line(launch: Launch, link: str, now: float, active: Sequence[Launch]) -> str:
    icon, word = render.status_label(launch)
    progress = launch.progress
    step = f" · step {progress.step:,}/{progress.total:,}" if progress.total else ""
    job = f" · job {launch.job_id}" if launch.job_id else ""
    age = measures.duration(now - launch.created_at)
    gpu = f" · {text}" if (text := health.gpu_text(launch)) else ""
    return (
        f"{icon} `{launch.id}` {escape(launch.words)} · {launch.cluster}{job} · {word}{step}"
        f"{gpu}{waits.chain_text(launch, active)} · {age}{_thread(link)}"
    )


def _sweep_text(
    sweep_id: str, sweep: Sweep | None, members: list[Launch], links: Mapping[str, str], now: float
) -> str:
    """A sweep's head line and its active members under it, each with its values, in one
    section (a 64-member sweep stays one block); lines past the section's limit are
    counted, not shown."""
    first = members[0]
    total = len(sweep.members) if sweep else len(members)
    head = (
        f"🧪 `{sweep_id}` sweep · {escape(first.words)} · {first.cluster} · "
        f"{len(members)} of {total} members active{_thread(links.get(first.id, ''))}"
    )
    lines = [head]
    for shown, member in enumerate(members):
        index = sweep.members.index(member.id) if sweep and member.id in sweep.members else -1
        values = f" #{index + 1} ({escape(sweep.label(index))})" if sweep and index >= 0 else ""
        line = f"    ↳{values} {_member_line(member, now)}"
        rest = f"    … and {len(members) - shown} more"
        if sum(len(x) + 1 for x in lines) + len(line) + len(rest) + 2 > SECTION_TEXT_MAX:
            lines.append(rest)
            break
        lines.append(line)
    return "\n".join(lines)


def _member_line(launch: Launch, now: float) -> str:
    icon, word = render.status_label(launch)
    progress = launch.progress
    step = f" · step {progress.step:,}/{progress.total:,}" if progress.total else ""
    job = f" · job {launch.job_id}" if launch.job_id else ""
    return (
        f"{icon} `{launch.id}`{job} · {word}{step} · {measures.duration(now - launch.created_at)}"
    )


def _recent_line(entry: HistoryEntry, link: str) -> str:
    outcome = entry.outcome or entry.phase
    hours = f" · {entry.gpu_hours:.2g} GPU-hours" if entry.gpu_hours else ""
    ran = f" · ran {measures.duration(entry.run_s)}" if entry.run_s else ""
    return (
        f"`{entry.id}` {escape(entry.title.replace(' · ', ' '))} · {entry.cluster} · "
        f"{escape(outcome)}{ran}{hours}{_thread(link)}"
    )


def _cluster_line(name: str, answer: ClusterCapacity | str) -> str:
    if isinstance(answer, str):
        return f"*{name}*: cannot be asked right now ({escape(answer)})"
    parts = []
    for info in answer.partitions:
        pending, running = answer.queued(info.name)
        parts.append(
            f"`{info.name}` {info.gpus_idle} GPUs free on {info.nodes_usable}/{info.nodes} "
            f"nodes · {running} running, {pending} pending"
        )
    return f"*{name}*: " + ("; ".join(parts) or "no partitions")


def dead_letter_text(retrying: Sequence[DeadLetter], given_up: int) -> str:
    """What the notifier still owes as dead letters, for ``/healthz`` and the admins' App
    Home, e.g. ``1 dead letter retried (oldest: L-7f3a9c2b41 parent in C0OUT since
    2026-12-03 07:40 UTC: not_in_channel); 2 given up for good``; "" when none."""
    parts = []
    if retrying:
        first = retrying[0]
        where = f" in {first.channel}" if first.channel else ""
        since = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(first.at))
        plural = "s" if len(retrying) != 1 else ""
        parts.append(
            f"{len(retrying)} dead letter{plural} retried (oldest: {first.launch_id} "
            f"{first.event.kind}{where} since {since}: {first.reason})"
        )
    if given_up:
        parts.append(f"{given_up} given up for good")
    return "; ".join(parts)


def dead_letter_blocks(text: str) -> list[dict[str, Any]]:
    """The admins' App Home section on undelivered messages (none when ``text`` is "")."""
    if not text:
        return []
    return [
        section("*Undelivered messages* (you are a trainbot admin)"),
        section(escape(text)),
        context("`trainbot doctor` lists them; they are tried again for 24 h by default."),
    ]


def prefs_blocks(prefs: Prefs) -> list[dict[str, Any]]:
    """The person's notification settings, each changed by a click (``trainbot_prefs_*``)."""
    toggles = []
    for event in DM_EVENTS:
        on = event in prefs.dm
        label = ("✓ " if on else "") + EVENT_LABELS[event]
        value = f"dm:{event}:{'off' if on else 'on'}"
        toggles.append(
            button(label, f"{ACTION_PREFS}_dm_{event}", value, style="primary" if on else "")
        )
    if prefs.quiet:
        quiet = f"Quiet hours {prefs_hours(prefs)}: DMs wait until they end"
        quiet += (
            "; failures and hangs come anyway."
            if prefs.break_through
            else ", failures and hangs too."
        )
    else:
        quiet = "No quiet hours: DMs come at once."
    return [
        section("*Notifications*"),
        context(
            "You are mentioned in a launch's thread when it needs you or ends. "
            "Also as a DM (your launches and those you `/watch`):"
        ),
        actions(*toggles),
        section(escape(quiet)),
        actions(
            button(
                "Quiet hours off" if prefs.quiet else "Quiet hours on",
                f"{ACTION_PREFS}_quiet",
                "quiet:off" if prefs.quiet else "quiet:on",
            ),
            hour_select(f"{ACTION_PREFS}_start", "start", prefs.quiet_start_h),
            hour_select(f"{ACTION_PREFS}_end", "end", prefs.quiet_end_h),
            button(
                "Hold failures too" if prefs.break_through else "Let failures through",
                f"{ACTION_PREFS}_break",
                "break:off" if prefs.break_through else "break:on",
            ),
        ),
    ]
