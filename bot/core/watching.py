"""``/watch``, ``/unwatch``, ``/jobs watching`` and the App Home notification settings.

Who may watch a launch is decided by the caller (:meth:`bot.core.lookup.Lookup.readable`,
the rule of ``/logs``); here the store is written and the answers worded.
"""

from __future__ import annotations

import time

from bot.lifecycle.launch import Launch
from bot.lifecycle.notices import dm_lane
from bot.lifecycle.prefs import EVENT_LABELS, Prefs, apply_choice, hours_text
from bot.store.store import Store
from bot.text.front import Reply
from bot.text.mrkdwn import escape
from bot.wording import render
from commands.context import User
from commands.errors import CommandError


def dm_events_text(prefs: Prefs) -> str:
    """``finish, failure and hang``, or "" when no event comes as a DM."""
    names = [EVENT_LABELS[e] for e in prefs.dm]
    if len(names) < 2:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


async def watch(store: Store, launch: Launch, user: User) -> Reply:
    """Follow ``launch`` (one the person may see) by DM."""
    if launch.user_id == user.id:
        return Reply(
            f"{launch.id} is your own launch: you are told about it already "
            "(the App Home settings say which events also come as DMs)."
        )
    if not launch.active:
        word = render.status_label(launch)[1]
        return Reply(f"{launch.id} has already ended ({escape(word)}): nothing more will come.")
    added = await store.people.watch(launch.id, user.id)
    prefs = await store.people.prefs(user.id)
    what = dm_events_text(prefs)
    how = (
        f"You get its {what} by DM"
        if what
        else "Your settings send no DMs yet: choose events in the App Home"
    )
    if prefs.quiet:
        how += f" (quiet hours {hours_text(prefs)})"
    first = "Watching" if added else "You already watch"
    return Reply(
        f"{first} {launch.id} ({escape(launch.words)} on {launch.cluster}, <@{launch.user_id}>'s). "
        f"{how}. `/unwatch {launch.id}` stops it."
    )


async def unwatch(store: Store, launch_id: str, user: User) -> Reply:
    if await store.people.unwatch(launch_id, user.id):
        return Reply(f"Stopped watching {launch_id}.")
    return Reply(f"You do not watch {launch_id}. `/jobs watching` lists what you watch.")


async def listing(store: Store, user: User) -> Reply:
    """``/jobs watching``: one line per launch the person watches; the gone are dropped."""
    ids = await store.people.watching(user.id)
    lines = []
    for launch_id, launch in zip(ids, await store.launches.get_many(ids), strict=True):
        if launch is None:
            await store.people.unwatch(launch_id, user.id)
            continue
        _, word = render.status_label(launch)
        link = f" · <{launch.permalink}|thread>" if launch.permalink.startswith("https://") else ""
        job = f" · job {launch.job_id}" if launch.job_id else ""
        lines.append(
            f"`{launch.id}` {escape(launch.words)} · {launch.cluster}{job} · {escape(word)} · "
            f"<@{launch.user_id}>{link}"
        )
    if not lines:
        return Reply("You watch no launches. `/watch <job>` follows one by DM.")
    return Reply(f"Launches you watch ({len(lines)}):\n" + "\n".join(lines))


async def change_prefs(store: Store, user_id: str, choice: str, tz: str) -> Reply:
    """A click in the App Home's notification settings (``tz``: the person's zone now)."""
    try:
        prefs = apply_choice(await store.people.prefs(user_id), choice)
    except ValueError as exc:
        raise CommandError(f"That setting did not work: {exc}.") from None
    if tz:
        prefs = prefs.model_copy(update={"tz": tz})
    await store.people.set_prefs(user_id, prefs)
    # DMs held for quiet hours are looked at again: they go now if the hours changed so.
    await store.lanes.retry_lane_at(dm_lane(user_id), time.time())
    return Reply("")
