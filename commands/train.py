"""``/train``: launches, interactive allocations, help and the recipe list."""

from __future__ import annotations

import time as clock
from collections.abc import Callable

from cluster.launching.recipes import RecipeEntry
from cluster.site.framework_registry import default_framework, workloads
from cluster.site.profiles import ClusterProfile
from commands.access import may_use_image
from commands.after_training import THEN_KEY, check_then, parse_then
from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.help import USAGE
from commands.parse import Args
from commands.placement import AUTO, Fit, fits
from commands.request_fields import HELP_TOPICS, HelpTopic
from commands.requests import (
    HelpRequest,
    InteractiveRequest,
    RecipesRequest,
    Request,
    ShellRequest,
    SweepRequest,
    TrainRequest,
)
from commands.schedule import join_at_words, parse_after, parse_at, parse_from
from commands.suggest import did_you_mean, join_names, quote
from commands.sweep import SEEDS_KEY, expand, parse_seeds, sweep_axes
from commands.values import (
    check_image,
    check_name,
    check_partition,
    check_time,
    parse_bool,
    parse_framework,
    parse_node,
    parse_nodes,
)

FROM_RUNNING_KEY = "from_running"  # from= a launch still running: said on purpose
LAUNCH_KEYS = (
    "cluster", "nodes", "partition", "time", "name", "image", "dry_run", "over_budget",
    "at", "after",
)  # fmt: skip
TRAIN_KEYS = (*LAUNCH_KEYS, "framework", "from", FROM_RUNNING_KEY, SEEDS_KEY, THEN_KEY)
SUBCOMMANDS = ("interactive", "help", "recipes")


def parse_train(args: Args, user: User, context: CommandContext) -> Request:
    """``/train ...`` text (already split) to a request."""
    args = join_at_words(args)
    if not args.words:
        if args.pairs:
            raise CommandError(
                f"Say what to train first: {USAGE['train']}, for example "
                "/train sft llama3p1_8b nodes=2. /train help lists everything."
            )
        return HelpRequest()
    first = args.words[0].lower()
    if first == "help":
        return _parse_help(args)
    if first == "recipes":
        return _parse_recipes(args)
    if first == "interactive" and "node" in args.pairs:
        _no_more_words(args.words[1:], "interactive")
        check_keys(args, ("node", "cluster"), "/train interactive node=")
        cluster = args.pairs.get("cluster")
        return ShellRequest(
            node=parse_node(args.pairs["node"]),
            cluster=None if cluster is None else context.profile(cluster).name,
        )
    if first == "interactive":
        _no_more_words(args.words[1:], "interactive")
        check_keys(args, LAUNCH_KEYS, "/train interactive")
        return _launch_fields(args, user, context, default_nodes=1)
    return _parse_launch(args, user, context)


def check_keys(
    args: Args, allowed: tuple[str, ...], where: str, overrides: tuple[str, ...] = ()
) -> None:
    """CommandError for the first key not allowed, with the closest valid key."""
    extra = f"; recipe overrides: {join_names(overrides)}" if overrides else ""
    for key in args.pairs:
        if key not in allowed and key not in overrides:
            raise CommandError(
                f"Unknown key {quote(key)} for {where}. Keys: {join_names(allowed)}{extra}."
                f"{did_you_mean(key, (*allowed, *overrides))}",
                field=key,
            )


def _no_more_words(extra: tuple[str, ...], topic: HelpTopic) -> None:
    if extra:
        raise CommandError(
            f"Unexpected {quote(extra[0])}. Usage: {USAGE[topic]} "
            "(options are key=value, for example nodes=2).",
            field=extra[0],
        )


def _parse_help(args: Args) -> HelpRequest:
    check_keys(args, (), "/train help")
    if len(args.words) == 1:
        return HelpRequest()
    _no_more_words(args.words[2:], "train")
    topic = args.words[1].lower().lstrip("/")
    for known in HELP_TOPICS:
        if topic == known:
            return HelpRequest(topic=known)
    raise CommandError(
        f"No help on {quote(topic)}. Topics: {join_names(HELP_TOPICS)}."
        f"{did_you_mean(topic, HELP_TOPICS)}",
        field="topic",
    )


def _parse_recipes(args: Args) -> RecipesRequest:
    check_keys(args, (), "/train recipes")
    if len(args.words) == 1:
        return RecipesRequest()
    _no_more_words(args.words[2:], "recipes")
    return RecipesRequest(workload=_workload(args.words[1]))


def _workload(raw: str) -> str:
    lowered = raw.lower()
    known = workloads()
    if lowered in known:
        return lowered
    raise CommandError(
        f"Unknown workload {quote(raw)}. Workloads: {join_names(known)}; "
        f"or /train {' | '.join(SUBCOMMANDS)}.{did_you_mean(lowered, (*known, *SUBCOMMANDS))}",
        field="workload",
    )


def _parse_launch(args: Args, user: User, context: CommandContext) -> TrainRequest | SweepRequest:
    """One launch, or a sweep when a value is a comma list or ``seeds=N`` is given."""
    entry = _entry(args, context)
    axes = sweep_axes(args, entry, TRAIN_KEYS)
    seeds = parse_seeds(args, entry)
    if not axes and seeds is None:
        return _parse_one(args, user, context, entry)
    check_keys(args, TRAIN_KEYS, f"{entry.workload} {entry.model}", tuple(entry.overrides))
    if "after" in args.pairs:
        raise CommandError(
            "after= does not go with a sweep: its members already start in turn. "
            "Leave after= out, or launch the sweep once the job it waits for has ended.",
            field="after",
        )
    limit = context.policy.max_sweep
    members = expand(args, axes, seeds, max_members=limit, describe=lambda: "policy max_sweep")
    requests = tuple(_parse_one(member, user, context, entry) for _, member in members)
    all_axes = [*axes, *([(seeds[0], tuple(map(str, range(1, seeds[1] + 1))))] if seeds else [])]
    return SweepRequest(
        members=requests, axes=tuple(all_axes), seed_key=seeds[0] if seeds else None
    )


def _entry(args: Args, context: CommandContext) -> RecipeEntry:
    workload = _workload(args.words[0])
    catalog = context.catalog
    if len(args.words) < 2:
        raise CommandError(
            f"Which model? Usage: /train {workload} <model> [key=value ...]. "
            f"Models for {workload}: {join_names(catalog.models(workload))}.",
            field="model",
        )
    _no_more_words(args.words[2:], "train")
    return _recipe(context, workload, args.words[1].lower(), args.pairs.get("framework"))


def _parse_one(args: Args, user: User, context: CommandContext, entry: RecipeEntry) -> TrainRequest:
    workload = entry.workload
    check_keys(args, TRAIN_KEYS, f"{workload} {entry.model}", tuple(entry.overrides))
    base = _launch_fields(args, user, context, default_nodes=entry.default_nodes)
    pairs = sorted((k, v) for k, v in args.pairs.items() if k not in TRAIN_KEYS)
    for key, value in pairs:
        if not entry.check_override(key, value):
            raise CommandError(
                f"{key}={quote(value)} is not allowed for {workload} {entry.model}: "
                f"the value must match {entry.overrides[key]}.",
                field=key,
            )
    raw_from = args.pairs.get("from")
    start_from, start_step = (None, None) if raw_from is None else parse_from(raw_from)
    running = args.pairs.get(FROM_RUNNING_KEY)
    if running is not None and start_from is None:
        raise CommandError(
            f"{FROM_RUNNING_KEY}= goes with from=: give from=<launch> {FROM_RUNNING_KEY}=yes "
            f"to start from a launch that still runs, or leave {FROM_RUNNING_KEY}= out.",
            field=FROM_RUNNING_KEY,
        )
    raw_then = args.pairs.get(THEN_KEY)
    then = None if raw_then is None else parse_then(raw_then)
    if then is not None:
        check_then(then, entry.framework, context.profile(base.cluster))
    return TrainRequest(
        then=then,
        workload=workload,
        model=entry.model,
        framework=entry.framework,
        overrides=tuple(pairs),
        start_from=start_from,
        start_step=start_step,
        from_running=running is not None and parse_bool(FROM_RUNNING_KEY, running),
        **base.model_dump(exclude={"kind"}),
    )


def _recipe(context: CommandContext, workload: str, model: str, raw: str | None) -> RecipeEntry:
    catalog = context.catalog
    frameworks = catalog.frameworks(workload, model)
    if not frameworks:
        models = catalog.models(workload)
        raise CommandError(
            f"Unknown model {quote(model)} for {workload}. Models for {workload}: "
            f"{join_names(models)}.{did_you_mean(model, models)}",
            field="model",
        )
    default = default_framework(workload)
    if raw is not None:
        framework = parse_framework(raw)
    elif default is not None and default in frameworks:
        framework = default
    else:
        framework = frameworks[0]
    entry = catalog.find(workload, model, framework)
    if entry is None:
        others = catalog.models(workload, framework)
        raise CommandError(
            f"{workload} {model} has no {framework} recipe (it runs on {join_names(frameworks)}). "
            f"{framework} {workload} models: {join_names(others)}.",
            field="framework",
        )
    return entry


def _launch_fields(
    args: Args, user: User, context: CommandContext, *, default_nodes: int
) -> InteractiveRequest:
    """The checked fields shared by launches and interactive allocations."""
    pairs = args.pairs
    wanted = pairs.get("cluster") or context.policy.placement.default_for(user.id, user.groups)
    if wanted is not None and wanted.lower() == AUTO:
        profile = _auto_profile(pairs, user, context, default_nodes)
        cluster = AUTO
    else:
        profile = context.profile(wanted)
        cluster = profile.name
    user_max = context.policy.max_nodes_for(user.id, user.groups, profile.name)
    nodes = parse_nodes(pairs.get("nodes", str(default_nodes)), profile, user_max)
    image = pairs.get("image")
    after = None if pairs.get("after") is None else parse_after(pairs["after"])
    at = pairs.get("at")
    return InteractiveRequest(
        cluster=cluster,
        nodes=nodes,
        partition=_maybe(check_partition, pairs.get("partition")),
        time=_maybe(check_time, pairs.get("time")),
        name=_maybe(check_name, pairs.get("name")),
        image=None if image is None else check_image(image, profile),
        dry_run=parse_bool("dry_run", pairs.get("dry_run", "false")),
        over_budget=parse_bool("over_budget", pairs.get("over_budget", "false")),
        at=None if at is None else parse_at(at, tz=user.tz, now=clock.time()),
        after=None if after is None else after[0],
        after_any=after is not None and after[1] == "any",
    )


def auto_fits(context: CommandContext, user: User, *, nodes: int, image: str | None) -> list[Fit]:
    """``cluster=auto``: every cluster, in config order, with why it cannot take a launch
    of this shape and image by ``user`` ("" when it can)."""
    policy = context.policy
    profiles = list(context.clusters.values())
    admin = policy.is_admin(user.id, user.groups)
    allowed = [p.name for p in profiles if admin or policy.rule_for(user.id, user.groups, p.name)]
    custom = [
        p.name
        for p in profiles
        if image is not None
        and p.allow_custom_images
        and may_use_image(
            policy,
            user_id=user.id,
            group_ids=user.groups,
            cluster=p.name,
            image=image,
            cluster_images=list(p.images),
        )[0].allowed
    ]
    return fits(
        profiles,
        allowed=allowed,
        nodes=nodes,
        user_max={p.name: policy.max_nodes_for(user.id, user.groups, p.name) for p in profiles},
        image=image,
        custom_image_ok=custom,
    )


def _auto_profile(
    pairs: dict[str, str], user: User, context: CommandContext, default_nodes: int
) -> ClusterProfile:
    """``cluster=auto``: the first cluster that could take the launch, to check its keys
    against (the choice among them is made when Slurm is asked), or CommandError."""
    if "partition" in pairs:
        raise CommandError(
            "partition= names a partition of one cluster; with cluster=auto leave it out "
            "(each cluster's own partition is used), or give cluster=<name>.",
            field="partition",
        )
    if not context.clusters:
        return context.default_profile()  # "No clusters are configured"
    biggest = max(context.clusters.values(), key=lambda p: p.max_nodes)
    nodes = parse_nodes(pairs.get("nodes", str(default_nodes)), biggest)
    found = auto_fits(context, user, nodes=nodes, image=pairs.get("image"))
    for fit in found:
        if not fit.why:
            return context.clusters[fit.cluster]
    why = "; ".join(f"{f.cluster}: {f.why}" for f in found)
    raise CommandError(
        f"cluster=auto: no cluster can take this launch ({why}). "
        "Ask for fewer nodes or another image, or give cluster=<name>.",
        field="cluster",
    )


def _maybe(check: Callable[[str], str], raw: str | None) -> str | None:
    return None if raw is None else check(raw)
