"""``/attach``, ``/cancel``, ``/logs``, ``/jobs`` and ``/clusters``."""

from __future__ import annotations

import re

from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.help import USAGE
from commands.parse import Args
from commands.request_fields import HelpTopic, JobRef
from commands.requests import (
    AttachRequest,
    CancelRequest,
    CheckpointsRequest,
    ClustersRequest,
    JobsRequest,
    LogsRequest,
    UnwatchRequest,
    WatchRequest,
)
from commands.suggest import did_you_mean, quote
from commands.sweep import SWEEP_ID_PATTERN
from commands.train import check_keys
from commands.values import (
    LAUNCH_ID_PATTERN,
    SLURM_JOB_ID_PATTERN,
    parse_days,
    parse_keep,
    parse_lines,
)


def parse_job_ref(raw: str, cluster: str | None, context: CommandContext) -> JobRef:
    """A launch id (any case) or a Slurm job id, with an optional known cluster."""
    value = raw.lower()
    if value.startswith(("l-", "s-")):
        value = value[0].upper() + value[1:]
    if not any(
        re.fullmatch(p, value) for p in (LAUNCH_ID_PATTERN, SLURM_JOB_ID_PATTERN, SWEEP_ID_PATTERN)
    ):
        raise CommandError(
            f"{quote(raw)} is not a job: give a launch id such as L-7f3a9c, "
            "a sweep id such as S-41c2aa or a Slurm job id such as 4187.",
            field="job",
        )
    profile = None if cluster is None else context.profile(cluster)
    return JobRef(id=value, cluster=None if profile is None else profile.name)


def _one_job(args: Args, context: CommandContext, topic: HelpTopic) -> JobRef:
    if not args.words:
        raise CommandError(f"Which job? Usage: {USAGE[topic]}. /jobs lists yours.", field="job")
    if len(args.words) > 1:
        raise CommandError(
            f"Unexpected {quote(args.words[1])}. Usage: {USAGE[topic]}.", field=args.words[1]
        )
    return parse_job_ref(args.words[0], args.pairs.get("cluster"), context)


def parse_watch(args: Args, user: User, context: CommandContext) -> WatchRequest:
    check_keys(args, ("cluster",), "/watch")
    return WatchRequest(job=_one_job(args, context, "watch"))


def parse_unwatch(args: Args, user: User, context: CommandContext) -> UnwatchRequest:
    check_keys(args, ("cluster",), "/unwatch")
    return UnwatchRequest(job=_one_job(args, context, "unwatch"))


def parse_checkpoints(args: Args, user: User, context: CommandContext) -> CheckpointsRequest:
    check_keys(args, ("cluster", "keep"), "/checkpoints")
    keep = args.pairs.get("keep")
    job = _one_job(args, context, "checkpoints")
    return CheckpointsRequest(job=job, keep=1 if keep is None else parse_keep(keep))


def parse_attach(args: Args, user: User, context: CommandContext) -> AttachRequest:
    check_keys(args, ("cluster",), "/attach")
    return AttachRequest(job=_one_job(args, context, "attach"))


def parse_cancel(args: Args, user: User, context: CommandContext) -> CancelRequest:
    check_keys(args, ("cluster",), "/cancel")
    return CancelRequest(job=_one_job(args, context, "cancel"))


def parse_logs(args: Args, user: User, context: CommandContext) -> LogsRequest:
    check_keys(args, ("lines", "cluster"), "/logs")
    words = args.words
    plot = len(words) > 1 and words[-1].lower() == "plot"
    if plot:
        words = words[:-1]
        if "lines" in args.pairs:
            raise CommandError(
                "lines= does not go with plot: the plot shows the whole run. "
                f"Usage: {USAGE['logs']}.",
                field="lines",
            )
    elif len(words) > 1:
        raise CommandError(
            f"Unexpected {quote(words[1])}. Usage: {USAGE['logs']}."
            f"{did_you_mean(words[1], ['plot'])}",
            field=words[1],
        )
    job = _one_job(Args(words=words, pairs=args.pairs), context, "logs")
    lines = args.pairs.get("lines")
    return LogsRequest(job=job, lines=None if lines is None else parse_lines(lines), plot=plot)


def parse_jobs(args: Args, user: User, context: CommandContext) -> JobsRequest:
    check_keys(args, ("cluster", "days"), "/jobs")
    everyone = history = False
    if [w.lower() for w in args.words] == ["watching"]:
        if args.pairs:
            raise CommandError(
                f"/jobs watching takes no keys. Usage: {USAGE['jobs']}.", field="watching"
            )
        return JobsRequest(watching=True)
    for word in args.words:
        lowered = word.lower()
        if lowered in ("all", "mine"):
            everyone = everyone or lowered == "all"
            continue
        if lowered == "history":
            history = True
            continue
        raise CommandError(
            f"Unexpected {quote(word)}. Usage: {USAGE['jobs']}."
            f"{did_you_mean(lowered, ['all', 'mine', 'history', 'watching'])}",
            field=word,
        )
    days = args.pairs.get("days")
    if days is not None and not history:
        raise CommandError(
            f"days= goes with history: /jobs history days={quote(days)}.", field="days"
        )
    cluster = args.pairs.get("cluster")
    return JobsRequest(
        all_users=everyone,
        cluster=None if cluster is None else context.profile(cluster).name,
        history=history,
        days=7 if days is None else parse_days(days),
    )


def parse_clusters(args: Args, user: User, context: CommandContext) -> ClustersRequest:
    check_keys(args, ("cluster",), "/clusters")
    names = list(args.words)
    if "cluster" in args.pairs:
        names.append(args.pairs["cluster"])
    if len(names) > 1:
        raise CommandError(
            f"Give one cluster at most. Usage: {USAGE['clusters']}.", field="cluster"
        )
    return ClustersRequest(cluster=context.profile(names[0]).name if names else None)
