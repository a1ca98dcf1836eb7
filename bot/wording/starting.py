"""The words of a launch's lines from /train to its first job: queued, approval, submitting,
submitted, not started, where it starts from."""

from __future__ import annotations

from collections.abc import Mapping

from bot.text.mrkdwn import escape
from bot.wording import endings, refusals
from bot.wording.facts import Facts, count, fact, mention
from cluster.site.image_refs import IMPORT_NOTE
from commands.schedule import show

# -- /train, approval ------------------------------------------------------------------


def queue(facts: Facts) -> str:
    """``Queued by @alice: `/train sft ...```, then what it waits for (:func:`waits`; an
    entry of an older version holds those words as its ``waits``)."""
    said = fact(facts, "waits") if isinstance(facts.get("waits"), str) else waits(facts)
    return f"Queued by {mention(fact(facts, 'by'))}: {command(facts)}{said}"


def waits(facts: Facts) -> str:
    """Where cluster=auto put a new launch (``placed``), what it starts from
    (``starts_from``) and what it waits for: its ``at`` time in its owner's zone (``tz``),
    the launch it ``waits_for`` ``until`` it completes or ends; "" for none of them."""
    said = ""
    if placed := fact(facts, "placed"):
        said += f"\n📍 cluster=auto chose {escape(placed)}: Slurm starts it there first."
    if parent := fact(facts, "starts_from"):
        said += (
            f"\n▶️ It starts from {escape(parent)}'s newest complete checkpoint; its thread "
            "says which when it goes."
        )
    parts = []
    at = facts.get("at")
    if isinstance(at, int | float) and not isinstance(at, bool):
        parts.append(f"starts at {show(float(at), fact(facts, 'tz'))}")
    if waits_for := fact(facts, "waits_for"):
        parts.append(f"waits until {escape(waits_for)} {escape(fact(facts, 'until'))}")
    return said + (f"\n⏳ It {'; '.join(parts)}." if parts else "")


def ask_approval(facts: Facts) -> str:
    return (
        f"✋ asks for {command(facts)}. {escape(fact(facts, 'reason'))} A trainbot admin or an "
        f"approver for {escape(fact(facts, 'cluster'))} can approve it."
    )


def command(facts: Facts) -> str:
    """The command as it was understood, in code: ``/train sft llama3p1_8b ...``."""
    return f"`{escape(fact(facts, 'command'))}`"


def sweep_approval(facts: Facts) -> str:
    """The one approval a sweep asks, in its thread."""
    return (
        f"✋ {mention(fact(facts, 'by'))} asks for sweep {escape(fact(facts, 'sweep'))} "
        f"({count(facts, 'members')} launches): {command(facts)}. {escape(fact(facts, 'reason'))} "
        "A trainbot admin or an approver can approve the whole sweep."
    )


def approve(facts: Facts) -> str:
    return f"✅ Approved by {mention(fact(facts, 'by'))}. Queued."


def reject(facts: Facts) -> str:
    return f"⛔ Not approved by {mention(fact(facts, 'by'))}. Nothing was submitted."


# -- a worker: submit ------------------------------------------------------------------


def submitting(facts: Facts) -> str:
    """``Pre-flight ok: partition a4 up (4 of 4 nodes usable, 24 GPUs free), image
    nemo.sqsh found, recipe sft/x.py found, directories writable.``, then its notes."""
    parts = []
    part = facts.get("partition")
    if isinstance(part, Mapping):
        parts.append(
            f"partition {part.get('name', '')} up ({part.get('usable', 0)} of "
            f"{part.get('nodes', 0)} nodes usable, {part.get('gpus_idle', 0)} GPUs free)"
        )
    if facts.get("registry_image"):
        parts.append(f"image {fact(facts, 'registry_image')} from its registry ({IMPORT_NOTE})")
    else:
        parts.append(f"image {fact(facts, 'image')} found")
    if facts.get("script"):
        parts.append(f"{fact(facts, 'script_label')} {fact(facts, 'script')} found")
    parts.append("directories writable")
    notes = "".join(f"\nNote: {escape(str(n))}." for n in facts.get("notes") or [])
    return "Pre-flight ok: " + ", ".join(escape(p) for p in parts) + "." + notes


HOW = {
    "submitted": "Submitted",
    "found_after_restart": "Found the job submitted before a restart",
    "found_after_error": "The launcher reported an error after its sbatch worked; following",
}


def submitted(facts: Facts) -> str:
    """``Submitted: Slurm job 41 on a4, partition a4, 2 nodes. Logs: `...```, or, for a
    job that appeared after a cancel, that it is being cancelled."""
    job = escape(fact(facts, "job"))
    if facts.get("after_cancel"):
        return f"🚫 Slurm job {job} appeared after the launch was cancelled: cancelling it."
    how = HOW.get(fact(facts, "how"), HOW["submitted"])
    nodes = count(facts, "nodes")
    unit = "node" if nodes == 1 else "nodes"
    as_user = f" as {escape(fact(facts, 'user'))}" if facts.get("user") else ""
    logs = f" Logs: `{escape(fact(facts, 'log_dir'))}`" if facts.get("log_dir") else ""
    text = (
        f"{how}: Slurm job {job} on {escape(fact(facts, 'cluster'))}, partition "
        f"{escape(fact(facts, 'partition'))}, {nodes} {unit}{as_user}.{logs}"
    )
    if count(facts, "attempt") > 1:
        text += f" (attempt {count(facts, 'attempt')})"
    if facts.get("record"):
        text += "\n" + escape(fact(facts, "record"))
    return text


# -- a waiting launch that is due, but does not start --------------------------------------


def not_started(facts: Facts) -> str:
    """Why a launch that waited ends without a job (``why``): the launch it waited for ended
    badly or is still unapproved, the budget has no room, its owner may no longer launch,
    or its ``from=`` cannot be used. The policy's answer is worded by
    :mod:`bot.wording.refusals`; the parent's end, by :mod:`bot.wording.endings`."""
    why = fact(facts, "why")
    parent, owner = escape(fact(facts, "parent")), mention(fact(facts, "owner"))
    start_from, error = escape(fact(facts, "start_from")), escape(fact(facts, "error"))
    if why == "parent_ended":
        ended = facts.get("parent_ending")
        detail = endings.sentence(
            ended if isinstance(ended, dict) else {}, fact(facts, "parent_detail")
        )
        said = f" ({detail.rstrip('.')})" if detail else ""
        return (
            f"⛔ Not started, because {parent}, which this launch waited for, ended "
            f"{escape(fact(facts, 'parent_outcome'))}{said}. Nothing was submitted. To run it "
            f"whatever the end, `/train` again with after={parent}:any."
        )
    if why == "parent_unapproved":
        hours = facts.get("hours", 0)
        return (
            f"⛔ Not started: {parent}, which this launch waits for, has awaited approval for "
            f"over {hours:g} h. This launch ends here, so it no longer counts against your "
            f"active launches (max_concurrent) and budget. Once {parent} is approved, "
            f"`/train` it again with after={parent}."
        )
    if why == "over_budget":
        return f"⛔ Not started now that it is due: {refusals.refused(facts)}"
    if why == "no_longer_allowed":
        return (
            f"⛔ {owner}: not started now that it is due: {refusals.refused(facts)} "
            "Nothing was submitted."
        )
    if why == "no_checkpoint":
        return (
            f"⛔ {owner}: not started (NO_CHECKPOINT): from={start_from}, but {error}. Nothing "
            "was submitted. `/train` again without from= to start from the recipe's own "
            "weights, or from a launch that saved a checkpoint."
        )
    if why == "not_allowed":
        return (
            f"⛔ {owner}: not started (NOT_ALLOWED): from={start_from}: {error} Nothing was "
            "submitted."
        )
    if why == "no_copy":
        return (
            f"⛔ {owner}: not started (NO_CHECKPOINT): from={start_from}: {error}. Nothing was "
            "submitted."
        )
    return f"⛔ Not started ({escape(fact(facts, 'outcome'))}). Nothing was submitted."


def start_from(facts: Facts) -> str:
    """``▶️ Starts from L-1's newest complete checkpoint, step 30 (`name`): `key=value`.``
    and, for a framework that goes on writing where it starts, the copy it starts from."""
    which = "newest complete checkpoint" if facts.get("newest") else "checkpoint"
    parent = escape(fact(facts, "parent"))
    text = (
        f"▶️ Starts from {parent}'s {which}, step {count(facts, 'step'):,} "
        f"(`{escape(fact(facts, 'checkpoint'))}`): "
        f"`{escape(fact(facts, 'key'))}={escape(fact(facts, 'value'))}`."
    )
    if facts.get("copy"):
        linked = "linked " if facts.get("linked") else ""
        text += (
            f" It starts from a {linked}copy (`{escape(fact(facts, 'copy'))}`): {parent}'s own "
            "checkpoint directory is left as it is."
        )
    return text
