"""Answers that only read: /jobs, /clusters, /logs, /logs plot, /attach, a shell on a node
of an interactive job (/train interactive node=), and the
/cancel confirmation. What changes a launch is in bot.core.decisions and bot.core.train."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Sequence

from bot.gateway.asks import ClusterCalls
from bot.gateway.on_cluster import Clusters
from bot.lifecycle import measures
from bot.lifecycle.launch import Launch, Phase, Sweep
from bot.planning.cost import wait_words
from bot.store.store import Store
from bot.text.front import Reply
from bot.text.mrkdwn import actions, cancel_button, code_block, escape, section
from bot.wording import render, waits
from cluster.launching.spec import framework
from cluster.preflight.discovery import ClusterCapacity
from cluster.slurm.base import expand_hostlist
from commands.context import User
from commands.requests import ShellRequest

INLINE_LOG_CHARS = 2800


async def jobs(
    store: Store,
    user: User,
    *,
    all_users: bool,
    cluster: str | None = None,
    visible: Collection[str] | None = None,
) -> Reply:
    """/jobs: active launches (on ``cluster`` only, when given), one line each. Others'
    launches only on the ``visible`` clusters (None: every cluster): /jobs all shows no
    more than /clusters would."""
    ids = await store.history.active_ids(None if all_users else user.id)
    launches = [
        launch for launch in await asyncio.gather(*(store.launches.get(i) for i in ids)) if launch
    ]
    launches = [one for one in launches if cluster is None or one.cluster == cluster]
    if visible is not None:
        launches = [i for i in launches if i.user_id == user.id or i.cluster in visible]
    if not launches:
        where = f" on {cluster}" if cluster else ""
        return Reply(
            f"No active launches{where}."
            if all_users
            else f"You have no active launches{where}. /jobs all shows everyone's."
        )
    now = time.time()
    lines = []
    sweeps_seen: dict[str, list[Launch]] = {}
    for launch in sorted(launches, key=lambda one: one.created_at):
        if launch.sweep:
            if launch.sweep not in sweeps_seen:
                sweeps_seen[launch.sweep] = []
                lines.append(launch.sweep)  # the sweep's lines go here, grouped
            sweeps_seen[launch.sweep].append(launch)
            continue
        lines.append(_job_line(launch, now, all_users, launches))
    for sweep_id, members in sweeps_seen.items():
        sweep = await store.launches.get_sweep(sweep_id)
        at = lines.index(sweep_id)
        lines[at : at + 1] = sweep_lines(sweep_id, sweep, members, now, all_users, launches)
    return Reply("\n".join(lines))


def _job_line(launch: Launch, now: float, all_users: bool, others: Sequence[Launch]) -> str:
    _, word = render.status_label(launch)
    step = (
        f" · step {launch.progress.step}/{launch.progress.total}" if launch.progress.total else ""
    )
    job = f" · job {launch.job_id}" if launch.job_id else ""
    who = f" · <@{launch.user_id}>" if all_users else ""
    chain = waits.chain_text(launch, others)  # mrkdwn: ids and a <!date>
    return (
        f"`{launch.id}` {launch.title} · {launch.cluster}{job} · {word}{step}{chain} · "
        f"{measures.duration(now - launch.created_at)} old{who}"
    )


def sweep_lines(
    sweep_id: str,
    sweep: Sweep | None,
    members: list[Launch],
    now: float,
    all_users: bool,
    others: Sequence[Launch] = (),
) -> list[str]:
    """A sweep's active members under one line for the sweep, each with its values."""
    first = members[0]
    total = len(sweep.members) if sweep else len(members)
    head = (
        f"🧪 `{sweep_id}` sweep · {first.title} · {first.cluster} · "
        f"{len(members)} of {total} members active"
    )
    lines = [head]
    for member in members:
        index = sweep.members.index(member.id) if sweep and member.id in sweep.members else -1
        values = f" #{index + 1} ({escape(sweep.label(index))})" if sweep and index >= 0 else ""
        lines.append(f"    ↳{values} {_job_line(member, now, all_users, others)}")
    return lines


async def history(
    store: Store, user: User, *, all_users: bool, cluster: str | None, days: int
) -> Reply:
    """/jobs history: finished launches of the last ``days`` days, newest first."""
    since = time.time() - days * 86400
    entries = await store.history.entries(
        user_id="" if all_users else user.id, cluster=cluster or "", since=since, limit=50
    )
    where = f" on {cluster}" if cluster else ""
    if not entries:
        who = "No launches" if all_users else "You have no launches that"
        return Reply(f"{who} finished{where} in the last {days} days.")
    lines = [f"Finished in the last {days} days{where} (newest first):"]
    now = time.time()
    for entry in entries:
        ran = f" · ran {measures.duration(entry.run_s)}" if entry.run_s else ""
        hours = f" · {entry.gpu_hours:.2g} GPU-hours" if entry.gpu_hours else ""
        link = f" · <{entry.permalink}|thread>" if entry.permalink.startswith("https://") else ""
        who = f" · <@{entry.user_id}>" if all_users else ""
        lines.append(
            f"`{entry.id}` {escape(entry.title.replace(' · ', ' '))} · {entry.cluster} · "
            f"{escape(entry.outcome or entry.phase)}{ran}{hours} · "
            f"{measures.duration(now - entry.ended_at)} ago{link}{who}"
        )
    if len(entries) == 50:
        lines.append("(the 50 newest; days=N or cluster=C narrows it)")
    return Reply("\n".join(lines))


async def cluster_list(
    clusters: Clusters,
    names: list[str],
    *,
    ask: Callable[[str], Awaitable[ClusterCapacity]] | None = None,
) -> Reply:
    """/clusters: per cluster in ``names``, its partitions with nodes, free GPUs, the
    queue, and when a 1-, 2- and 4-node job would start there (Slurm's estimate).
    ``ask`` answers a cluster's capacity (default: ask it now)."""
    ask = ask or clusters.capacity
    results = await asyncio.gather(*(ask(n) for n in names), return_exceptions=True)
    lines = []
    for name, result in zip(names, results, strict=True):
        profile = clusters.profile(name)
        what = f"{profile.type}, {profile.machine}" if profile.type else profile.machine
        head = f"*{name}* ({escape(what)})"
        if isinstance(result, BaseException):
            lines.append(f"{head}: unreachable: {escape(str(result))}")
        else:
            lines.append(head)
            for info in result.partitions:
                pending, running = result.queued(info.name)
                mark = " (default for /train)" if info.name == profile.partition else ""
                state = "" if info.up else " · DOWN"
                waits = ", ".join(
                    f"{nodes} node{'s' if nodes != 1 else ''} {wait_words(estimate)}"
                    for nodes, estimate in result.waits_in(info.name)
                )
                lines.append(
                    f"• `{escape(info.name)}`{mark}: {info.nodes_usable}/{info.nodes} nodes "
                    f"usable · {info.gpus_idle}/{info.gpus_total} GPUs free · "
                    f"{running} running, {pending} pending{state}"
                    + (f" · a job would start: {waits}" if waits else "")
                )
    return Reply("\n".join(lines))


def confirm_cancel(launch: Launch) -> Reply:
    """/cancel asks first: the button carries a confirm dialog."""
    if not launch.active:
        return Reply(
            f"{launch.id} has already ended ({render.status_label(launch)[1]}).", error=True
        )
    label = f"job {launch.job_id}" if launch.job_id else f"launch {launch.id}"
    text = f"Cancel {label} ({launch.title} on {launch.cluster})?"
    blocks = [
        section(text),
        actions(cancel_button(launch.id, job_label=label)),
    ]
    return Reply(text, blocks=blocks)


async def logs(calls: ClusterCalls, launch: Launch, lines: int) -> Reply:
    """/logs: the tail, escaped in a code block, or a file when long."""
    attempt = launch.attempt
    if attempt is None or not attempt.job_id:
        return Reply(
            f"{launch.id} has no Slurm job yet ({render.status_label(launch)[1]}).", error=True
        )
    log_path = attempt.tracking.log_path if attempt.tracking else ""
    if not log_path:
        return Reply(f"Job {attempt.job_id} has not written a log yet.", error=True)
    text = await calls.tail(launch, log_path, lines)  # as its person, by a worker if need be
    if not text.strip():
        return Reply(f"The log of job {attempt.job_id} is empty so far (`{escape(log_path)}`).")
    count = len(text.splitlines())
    head = f"Last {count} lines of job {attempt.job_id} (`{escape(log_path)}`):"
    if len(text) <= INLINE_LOG_CHARS:
        return Reply(f"{head}\n{code_block(text)}")
    return Reply(
        head + " (attached as a file)",
        file_name=f"{launch.id}-{attempt.job_id}.log",
        file_content=text.encode(),
    )


async def plot(launch: Launch) -> Reply:
    """/logs <job> plot: the loss curve as a PNG file (drawn off the event loop)."""
    try:
        png = await asyncio.to_thread(render.loss_curve, launch)
    except ValueError as exc:
        return Reply(f"No loss curve for {launch.id} yet: {escape(str(exc))}.", error=True)
    return Reply(
        f"Loss curve of {launch.id} ({len(launch.progress_history)} points).",
        file_name=f"{launch.id}-loss.png",
        file_content=png,
    )


async def shell(store: Store, clusters: Clusters, user: User, request: ShellRequest) -> Reply:
    """/train interactive node=<n>: the guide's ``nemorlinteractive <n>`` for the person's
    newest running interactive job (on ``cluster=`` when given): ``srun`` into that job,
    on its n-th node (counted from 0), only for a job that is theirs and running there."""
    ids = await store.history.active_ids(user.id)
    mine = [launch for launch in await store.launches.get_many(ids) if launch is not None]
    where = f" on {request.cluster}" if request.cluster else ""
    running = [
        launch
        for launch in mine
        if launch.interactive
        and launch.user_id == user.id
        and launch.phase == Phase.RUNNING
        and launch.attempt is not None
        and launch.attempt.job_id
        and request.cluster in (None, launch.cluster)
    ]
    if not running:
        return Reply(
            f"You have no running interactive job{where}: `/train interactive` starts one, "
            "and this opens a shell on one of its nodes once it runs.",
            error=True,
        )
    launch = max(running, key=lambda one: one.created_at)
    job_id = launch.attempt.job_id if launch.attempt else ""
    nodes = launch.request.nodes
    if request.node >= nodes:
        last = "node=0" if nodes == 1 else f"node=0 to node={nodes - 1}"
        return Reply(
            f"Job {job_id} ({launch.id}) has {nodes} node{'s' if nodes > 1 else ''}: "
            f"give {last} (counted from 0, as nemorlinteractive counts).",
            error=True,
        )
    hosts = expand_hostlist(launch.attempt.node_list) if launch.attempt else ()
    host = f" ({hosts[request.node]})" if request.node < len(hosts) else ""
    profile = clusters.profile_for(launch)  # the person's own user: their own key works
    login = profile.login
    remote = (
        f"srun --jobid={job_id} --overlap --nodes=1 --ntasks=1 --relative={request.node} "
        "--pty bash -l"
    )
    command = f"ssh -t -p {login.port} {login.user}@{login.host} {remote}"
    return Reply(
        f"A shell on node {request.node}{escape(host)} of your job {job_id} ({launch.id}, "
        f"{launch.cluster}), as the guide's `nemorlinteractive {request.node}` opens it "
        f"(re-run it after a lost connection):\n```{escape(command)}```"
    )


def attach(clusters: Clusters, launch: Launch) -> Reply:
    """/attach: the exact command for the owner (the caller checks who asks)."""
    if not launch.interactive:
        return Reply(
            f"{launch.id} is not an interactive job; /train interactive starts one.", error=True
        )
    attempt = launch.attempt
    if not launch.active or attempt is None:
        return Reply(f"{launch.id} is not running ({render.status_label(launch)[1]}).", error=True)
    tracking = attempt.tracking
    remote = framework(tracking.framework).attach_command(tracking) if tracking else None
    if not attempt.attach_ready or not remote:
        return Reply(
            f"Job {attempt.job_id or '(not submitted yet)'} is not ready to attach yet; "
            "the thread will say when."
        )
    profile = clusters.profile_for(launch)  # the person's own user: their own key works
    login = profile.login
    command = f"{login.ssh_command()} {remote}"
    text = (
        f"Attach to job {attempt.job_id} (re-run it after a lost connection):\n"
        f"```{escape(command)}```"
    )
    url = profile.attach_url(job_id=attempt.job_id)
    if url:
        text += f"\nOr open <{url}|the web terminal>."
    return Reply(text)
