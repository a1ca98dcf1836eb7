"""``trainbot doctor``: check what the bot depends on, one line per check.

Config (already loaded when this runs), Redis (with what the notifier still owes
and its dead letters, which do not fail the check), and for every cluster: SSH with
its host key (through its jump hosts), what Slurm says its GPUs are (GRES: GPUs per
node and model, against the config) and its partitions, whether its accounting
records jobs and their GPUs (what usage is counted from), the images, the catalog's
recipes, everything
pre-flight checks (directories, mounts, NeMo-RL's auth.sh), and which flags the
site's ``run.py`` lacks (read from its ``--help`` in the same round trip, and kept
in Redis for the workers). Exit 0 when everything passes.

``--known-hosts`` (:func:`run_known_hosts`) prints instead the host keys each cluster's
route shows, jump hosts first, as known_hosts lines for an admin to confirm.
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack
from typing import IO

from bot.gateway.on_cluster import Clusters
from bot.settings.config import Config
from bot.settings.env import Settings, Target
from bot.store.lanes import DEAD_LETTERS_AT, DeadLetter
from bot.store.store import Store
from cluster.errors import TrainbotError
from cluster.launching.spec import LaunchSpec
from cluster.preflight.checks import PreflightResult, preflight
from cluster.preflight.discovery import discover_recipes
from cluster.site.gres import (
    accounting_report,
    build_accounting_query,
    build_gres_query,
    gres_report,
    parse_gres_rows,
)
from cluster.site.login import LoginNode, cert_key_id
from cluster.site.profiles import ClusterProfile
from cluster.ssh.hostkeys import route_host_keys
from cluster.ssh.pool import SSHPool


class DoctorReport:
    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.failed = 0

    def line(self, ok: bool, what: str, detail: str = "") -> None:
        self.failed += not ok
        mark = "ok  " if ok else "FAIL"
        print(f"{mark} {what}{': ' + detail if detail else ''}", file=self.out, flush=True)

    def note(self, what: str, detail: str) -> None:
        """A line that is no failure but that an operator should read (an unset secret)."""
        print(f"note {what}: {detail}", file=self.out, flush=True)


async def can_log_in(
    report: DoctorReport,
    clusters: Clusters,
    login: LoginNode,
    cluster: str,
    what: str,
    ok: str = "",
) -> bool:
    """Run ``true`` on the login node as ``login`` says; one report line either way."""
    try:
        await clusters.pool.run(login, "true", timeout_s=20, cluster=cluster)
    except TrainbotError as exc:
        report.line(False, what, str(exc))
        return False
    report.line(True, what + ok)
    return True


async def check_cluster(report: DoctorReport, clusters: Clusters, profile: ClusterProfile) -> None:
    name = profile.name
    login = profile.login
    shared = f"{name}: ssh {login.route}"
    for note in clusters.secrets(profile)[1]:  # an {env: NAME} job secret the env lacks
        report.note(f"{name}: job secrets", f"{note}: its launches go without it")
    if not await can_log_in(report, clusters, login, name, shared, " (host keys verified)"):
        return
    await check_gres(report, clusters, profile)
    for user in sorted(set(profile.identity.users.values()) if profile.identity else ()):
        person = f"{name}: ssh {user}@{login.host} with a CA certificate"
        login = profile.as_user(user, cert_key_id("doctor", user, "doctor")).login
        await can_log_in(report, clusters, login, name, person)
    listing = await discover_recipes(clusters.pool, profile)
    entries = [e for e in clusters.config.catalog.entries]
    missing = [
        e.script_path for e in entries if e.script_file not in listing.scripts.get(e.framework, ())
    ]
    report.line(
        not missing,
        f"{name}: recipes in {profile.recipes_dir}",
        f"missing {', '.join(sorted(set(missing)))}"
        if missing
        else f"{len(entries)} catalog entries found",
    )
    seen: set[str] = set()
    for entry in entries:
        if entry.framework in seen:
            continue
        seen.add(entry.framework)
        secrets, _ = clusters.secrets(profile)  # what a launch exports (auth.sh must keep them)
        spec = LaunchSpec.from_recipe(
            profile, entry, launch_id="L-doctor", nodes=1, secrets=secrets
        )
        result = await preflight(clusters.pool, spec)  # reads run.py --help afresh
        for check in result.checks:
            report.line(check.ok, f"{name}: {entry.framework} {check.name}", check.message)
        if spec.fw.help_argv:
            report.line(*launcher_line(spec, result))
            await clusters.remember(spec, result)


async def check_gres(report: DoctorReport, clusters: Clusters, profile: ClusterProfile) -> None:
    """What Slurm says the cluster's GPUs are (GRES), against the config, and whether its
    accounting records jobs and their GPUs (what usage is counted from)."""
    what = f"{profile.name}: Slurm GRES ({profile.machine})"
    try:
        result = await clusters.pool.run(
            profile.login, build_gres_query(), timeout_s=30, cluster=profile.name
        )
    except TrainbotError as exc:
        report.line(False, what, str(exc))
        return
    ok, detail = gres_report(profile, parse_gres_rows(result.stdout))
    report.line(ok, what, detail)
    what = f"{profile.name}: Slurm accounting"
    try:
        result = await clusters.pool.run(
            profile.login, build_accounting_query(), timeout_s=30, cluster=profile.name
        )
    except TrainbotError as exc:
        report.line(False, what, str(exc))
        return
    ok, detail = accounting_report(result.stdout)
    report.line(ok, what, detail)


def launcher_line(spec: LaunchSpec, result: PreflightResult) -> tuple[bool, str, str]:
    """What the site's launcher lacks of the flags trainbot may send (from its --help)."""
    fw, options = spec.fw, result.launcher
    what = f"{spec.cluster}: {fw.name} {fw.launcher} --help"
    if options is None:
        return False, what, "printed no usage; every launch sends all the flags trainbot knows"
    lacks = [flag for flag in fw.launcher_flags if flag not in options.flags]
    if not options.positionals:
        lacks.append("-- overrides")
    if not lacks:
        return True, what, "has every flag trainbot sends"
    return True, what, f"lacks {', '.join(lacks)}: launches leave them out and say so"


def delivery_text(held: int, dead_total: int, newest: list[DeadLetter]) -> str:
    """What the notifier still owes and what it gave up on, e.g.
    ``2 waiting; 3 dead letters in trainbot:notify:dead, newest: L-7f3a thread in C0OUT:
    not_in_channel (8 tries)``."""
    text = f"{held} waiting"
    if not dead_total:
        return text + "; no dead letters"
    text += f"; {dead_total} dead letter{'s' if dead_total != 1 else ''} in {DEAD_LETTERS_AT}"
    if newest:
        last = newest[-1]
        where = f" in {last.channel}" if last.channel else ""
        text += (
            f", newest: {last.launch_id} {last.event.kind}{where}: {last.reason} "
            f"({last.tries} {'try' if last.tries == 1 else 'tries'})"
        )
    return text


def replicas_text(target: Target, replicas: int) -> str:
    """The replicas the primary has, against what ``REDIS_WAIT_REPLICAS`` asks for."""
    text = f"{replicas} replica{'' if replicas == 1 else 's'} connected"
    if target.wait_replicas > replicas:
        text += (
            f"; REDIS_WAIT_REPLICAS={target.wait_replicas} is more: every durable write "
            f"waits {target.wait_timeout_ms} ms"
        )
    return text


async def run_doctor(settings: Settings, config: Config, out: IO[str] | None = None) -> int:
    report = DoctorReport(out or sys.stdout)
    report.line(True, f"config {settings.config_path}", f"{len(config.clusters)} clusters")
    redis_ok = False
    try:
        target = settings.redis_target()
        async with Store.connect(target) as store:
            await store.ping()
            held, dead = await store.lanes.held_count(), await store.lanes.dead_letter_count()
            newest = await store.lanes.dead_letters(limit=1)
            replicas = await store.replicas()
        report.line(
            replicas >= target.wait_replicas,
            f"redis {target.describe()}",
            replicas_text(target, replicas),
        )
        report.line(True, "messages", delivery_text(held, dead, newest))
        redis_ok = True
    except TrainbotError as exc:
        report.line(False, "redis", str(exc))
    async with SSHPool() as pool, AsyncExitStack() as stack:
        kept = (
            await stack.enter_async_context(Store.connect(settings.redis_target()))
            if redis_ok
            else None
        )
        clusters = Clusters(config, settings, pool, kept)
        for profile in config.clusters.values():
            try:
                await check_cluster(report, clusters, profile)
            except TrainbotError as exc:
                report.line(False, f"{profile.name}", str(exc))
    print(
        f"{report.failed} check(s) failed" if report.failed else "all checks passed",
        file=report.out,
    )
    return 1 if report.failed else 0


async def run_known_hosts(config: Config, out: IO[str] | None = None) -> int:
    """Print each cluster's host keys, jump hosts first, as known_hosts lines with a
    comment saying whether its known_hosts file has it; exit 0 only when every key on
    every route is already trusted."""
    out = out or sys.stdout
    untrusted = 0
    for profile in config.clusters.values():
        print(f"# {profile.name}: {profile.login.route}", file=out)
        for seen in await route_host_keys(profile.login, profile.name):
            if seen.known is None:
                untrusted += 1
                print(f"# {seen.hop}: {seen.note}", file=out)
                continue
            if seen.known:
                print(f"# {seen.hop}: {seen.fingerprint}, already in its known_hosts", file=out)
            else:
                untrusted += 1
                print(
                    f"# {seen.hop}: {seen.fingerprint}, NOT in its known_hosts: confirm this "
                    "fingerprint with the host's admin (ssh-keygen -lf on its host key) "
                    "before adding the line below",
                    file=out,
                )
            print(seen.line, file=out)
    print(
        f"# {untrusted} host key(s) to confirm" if untrusted else "# every host key is trusted",
        file=out,
        flush=True,
    )
    return 1 if untrusted else 0
