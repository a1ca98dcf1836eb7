"""``/images [cluster=C]``, ``/images fetch <framework> [cluster=C]`` and
``/images import <reference> as <name> [cluster=C]``: parsing and checking (no I/O).

``fetch`` and ``import`` write into the cluster's image directory
(:attr:`cluster.site.profiles.ClusterProfile.image_directory`); the name is checked here (a
plain name: no path, no ``..``, not one the config gives another image), and whether the
person may run images from that directory is the custom-image policy's word, asked here
before anything is queued.
"""

from __future__ import annotations

from cluster.images.jobs import check_image_name, image_path, listed_names
from cluster.images.listing import PREBUILT
from cluster.site.image_refs import is_registry_ref
from cluster.site.profiles import ClusterProfile
from commands.access import may_use_image
from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.parse import Args
from commands.policy import Policy
from commands.requests import ImagesRequest
from commands.suggest import did_you_mean, join_names, quote
from commands.train import check_keys

ACTIONS = ("fetch", "import")
USAGE_LIST = "/images [cluster=C]"
USAGE_FETCH = "/images fetch <framework> [cluster=C]"
USAGE_IMPORT = "/images import <docker-uri> as <name> [cluster=C]"


def parse_images(args: Args, user: User, context: CommandContext) -> ImagesRequest:
    """The request for ``/images`` and its ``fetch`` and ``import`` words."""
    check_keys(args, ("cluster",), "/images")
    cluster = args.pairs.get("cluster")
    if not args.words:
        return ImagesRequest(cluster=None if cluster is None else context.profile(cluster).name)
    word = args.words[0].lower()
    if word not in ACTIONS:
        raise CommandError(
            f"/images takes no word {quote(word)}. Usage: {USAGE_LIST}, {USAGE_FETCH} or "
            f"{USAGE_IMPORT}.{did_you_mean(word, ACTIONS)}"
        )
    profile = context.profile(cluster)
    if word == "fetch":
        return _fetch(args.words[1:], profile, user, context)
    return _import(args.words[1:], profile, user, context)


def _fetch(
    words: tuple[str, ...], profile: ClusterProfile, user: User, context: CommandContext
) -> ImagesRequest:
    known = listed_names()
    if len(words) != 1:
        raise CommandError(
            f"Usage: {USAGE_FETCH}, with one framework: {join_names(list(known))} "
            "(the guide's prebuilt image for the cluster's region)."
        )
    framework = words[0].lower().replace("_", "-")
    if framework not in known:
        raise CommandError(
            f"The guide has no prebuilt image for {quote(words[0])}. It has one for "
            f"{join_names(list(known))}.{did_you_mean(framework, known)}",
            field="framework",
        )
    if not profile.region:
        raise CommandError(
            f"{profile.name} has no region in its config, so the guide's prebuilt images "
            "(one bucket per region: us, europe, asia) are not known there. Ask a trainbot "
            f"admin to set region: for {profile.name}, or use {USAGE_IMPORT}."
        )
    name = _prebuilt_name(framework)
    _may_write(profile, name, user, context)
    return ImagesRequest(cluster=profile.name, action="fetch", framework=framework)


def _import(
    words: tuple[str, ...], profile: ClusterProfile, user: User, context: CommandContext
) -> ImagesRequest:
    if len(words) != 3 or words[1].lower() != "as":
        raise CommandError(
            f"Usage: {USAGE_IMPORT}, for example /images import nvcr.io/nvidia/nemo:26.02 as "
            "nemo-26.02 cluster=a4."
        )
    reference, _, name = words
    if not is_registry_ref(reference):
        raise CommandError(
            f"{quote(reference, 80)} is not a registry reference. Give one such as "
            "nvcr.io/nvidia/nemo:26.02, nvcr.io#nvidia/nemo:26.02 or "
            "docker://nvcr.io#nvidia/nemo-rl:v0.5.0.",
            field="source",
        )
    try:
        check_image_name(name, profile)
    except ValueError as exc:
        raise CommandError(f"Cannot import as {quote(name)}: {exc}.", field="name") from None
    _may_write(profile, name, user, context)
    return ImagesRequest(cluster=profile.name, action="import", source=reference, name=name)


def _prebuilt_name(framework: str) -> str:
    return PREBUILT[framework].removesuffix(".sqsh")


def _may_write(profile: ClusterProfile, name: str, user: User, context: CommandContext) -> None:
    problem = write_problem(context.policy, profile, name, user)
    if problem:
        raise CommandError(problem)


def write_problem(policy: Policy, profile: ClusterProfile, name: str, user: User) -> str:
    """Why ``user`` may not have the image ``name`` made on ``profile``'s cluster ("": they
    may): they may launch there, and may run what lands in its image directory (the
    custom-image policy), else nothing is worth making for them. Asked when the command is
    typed and again by the worker before it submits (with the policy of then)."""
    admin = policy.is_admin(user.id, user.groups)
    if not admin and policy.rule_for(user.id, user.groups, profile.name) is None:
        return (
            f"You may not launch on {profile.name}, so /images cannot make images there for "
            "you. Ask a trainbot admin for access."
        )
    if not profile.allow_custom_images:
        return (
            f"{profile.name} runs only the images its config names "
            f"({join_names(list(profile.images))}); an imported or fetched image could not be "
            "used there. Ask a trainbot admin to add it to the cluster's images."
        )
    target = image_path(profile, name)
    decision, _ = may_use_image(
        policy, user_id=user.id, group_ids=user.groups, cluster=profile.name, image=target,
        cluster_images=list(profile.images),
    )  # fmt: skip
    if not decision.allowed:
        return f"The image would be {target}, which you could not then use: {decision.reason}"
    return ""
