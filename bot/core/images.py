"""/images: each cluster's images, asked of the workers (the web role holds no SSH key);
/images import and fetch: an image run queued for the workers, followed in its own thread
(:mod:`bot.engine.image_runner`)."""

from __future__ import annotations

import asyncio
import time

from bot.gateway.asks import ClusterCalls
from bot.gateway.identity import People
from bot.lifecycle.image_run import ImageRun, new_run_id
from bot.store.store import Store
from bot.text.front import Front, Incoming, Reply
from bot.text.mrkdwn import escape
from cluster.errors import TrainbotError
from cluster.images.listing import ImageFile, ImageListing
from cluster.site.image_refs import IMPORT_NOTE
from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.requests import ImagesRequest


async def answer(
    calls: ClusterCalls, context: CommandContext, user: User, request: ImagesRequest
) -> Reply:
    """The clusters the person may launch on (admins: all), one block each."""
    policy = context.policy
    names = [request.cluster] if request.cluster else list(context.clusters)
    if not policy.is_admin(user.id, user.groups):
        names = [n for n in names if policy.rule_for(user.id, user.groups, n)]
    if not names:
        raise CommandError(
            "You may not launch on that cluster, so /images has nothing to show you. "
            "Ask a trainbot admin for access."
        )
    found = await asyncio.gather(*(calls.images(n) for n in names), return_exceptions=True)
    blocks = []
    for name, listing in zip(names, found, strict=True):
        if isinstance(listing, TrainbotError):
            blocks.append(f"*{name}*: could not list its images ({escape(str(listing))}).")
        elif isinstance(listing, BaseException):
            raise listing
        else:
            blocks.append(listing_text(listing, time.time()))
    return Reply("\n".join(blocks))


async def start(
    store: Store,
    people: People,
    front: Front | None,
    incoming: Incoming,
    user: User,
    request: ImagesRequest,
) -> Reply:
    """``/images import|fetch``: checked by the parser (name, policy); here who runs it
    (the person's Unix user where the cluster maps people) and where its thread goes."""
    cluster = str(request.cluster)
    cluster_user = await people.cluster_user(cluster, user)
    problem = await front.can_post(incoming.channel_id) if front else ""
    if problem:
        return Reply(problem, error=True)
    run = ImageRun(
        id=new_run_id(), user_id=user.id, channel=incoming.channel_id, request=request,
        cluster_user=cluster_user, groups=sorted(user.groups),
    )  # fmt: skip
    await store.image_runs.save(run)
    what = (
        f"import {request.source} as {request.name}"
        if request.action == "import"
        else f"fetch the prebuilt {request.framework} image"
    )
    return Reply(
        f"Queued {run.id}: {escape(what)} on {escape(cluster)}. Following it in the thread; "
        "when it is ready, image=<name> uses it."
    )


def listing_text(listing: ImageListing, now: float) -> str:
    """One cluster's images as text (pure)."""
    lines = [f"*{listing.cluster}*"]
    for image in listing.files:
        lines.append("  " + _file_line(image, now))
    for name, ref in listing.registry:
        lines.append(f"  `{escape(ref)}` ({escape(name)}): a registry image; {IMPORT_NOTE}")
    if listing.prebuilt:
        lines.append(f"  The guide's prebuilt images for {listing.region}:")
        for pre in listing.prebuilt:
            where = (
                f"mounted at `{pre.mounted_path}` (use image={pre.mounted_path})"
                if pre.mounted
                else f"not mounted here; copy with `gcloud storage cp {pre.bucket_uri} <dir>`"
            )
            lines.append(f"    {pre.framework}: `{pre.bucket_uri}`, {where}")
    elif not listing.region:
        lines.append("  (no region in its config: the guide's prebuilt images are not listed)")
    return "\n".join(lines)


def _file_line(image: ImageFile, now: float) -> str:
    uses = f" · default for {', '.join(image.default_for)}" if image.default_for else ""
    if image.name:
        uses += f" · image={escape(image.name)}"
    if image.size_bytes is None:
        return f"`{escape(image.path)}` · missing{uses}"
    size = (
        f"{image.size_bytes / 1e9:.1f} GB"
        if image.size_bytes >= 1e8
        else (
            f"{image.size_bytes / 1e6:.1f} MB"
            if image.size_bytes >= 1e5
            else f"{image.size_bytes} B"
        )
    )
    date = time.strftime("%Y-%m-%d", time.gmtime(image.mtime)) if image.mtime else "?"
    return f"`{escape(image.path)}` · {size} · {date}{uses}"
