"""A worker's main path: a launch that may go is pre-flighted and submitted, exactly once
per attempt.

The launch is marked SUBMITTING before the launcher runs; from then on a worker that
finds it so looks the launch id up in Slurm before anything is submitted again
(:mod:`bot.engine.recovery`). A launch never runs without a thread anyone can see.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence

from bot.engine import recovery
from bot.engine.holding import Hold, log
from bot.engine.recovery import submit_deadline
from bot.lifecycle import phases
from bot.lifecycle.launch import Launch, Phase
from bot.planning import pipelines, start_from
from bot.settings.logs import launch_fields
from cluster.errors import ClusterError, ClusterUnreachable, CommandTimeout, SlurmCommandFailed
from cluster.launching.spec import LaunchSpec
from cluster.launching.start_copy import copy_start
from cluster.preflight.checks import PreflightResult
from cluster.site.image_refs import is_registry_ref, pyxis_image
from commands.access import is_custom_image, may_use_image, slurm_account

THREAD_WAIT_S = 1.0  # a launch whose thread is not posted yet: look again this much later,
THREAD_WAIT_MAX_S = 60.0  # twice as long each time up to this


async def run(hold: Hold, launch: Launch) -> None:
    """The held launch, looked up first if a submit of it may have run, then readied,
    pre-flighted and submitted (or its dry run told)."""
    if launch.phase == Phase.SUBMITTING and not await recovery.look_up(hold, launch):
        return  # found and recorded, or the cluster did not answer: looked up again later
    if not await ready(hold, launch):
        return
    profile = hold.clusters.profile_for(launch)  # its Unix user checked against the config
    started = await start_from.start_point(
        hold.store,
        launch,
        hold.mutate,
        profile,
        hold.authority,
        lambda source, target: copy_start(hold.clusters.pool, profile, source, target),
    )
    if started is None:
        return  # from=: the parent has no checkpoint to start from
    launch = started
    built = hold.clusters.spec_for(derived(hold, launch))
    spec = built.spec
    launch, _ = await hold.move(launch.id, phases.preflight, phases.Facts())
    if launch.phase != Phase.PREFLIGHT:
        return  # cancelled meanwhile
    if launch.request.dry_run:
        await dry_run(hold, launch, spec)
        return
    result = await hold.clusters.preflight(spec)
    if not result.ok:
        await hold.reject(launch, "PREFLIGHT", **refusal(result, spec))
        return
    if not await thread_is_up(hold, launch):
        return
    facts = phases.Facts(now=time.time(), data=preflight_facts(result, spec, built.notes))
    launch, _ = await hold.move(launch.id, phases.submitting, facts)
    if launch.phase != Phase.SUBMITTING:
        return
    # Last word before Slurm: the fence this worker raised must still be the launch's
    # (a successor raised it past ours) and no other worker may hold the lock (one that
    # has not raised it yet). Nothing is re-acquired here: a worker that stalled past
    # its lock must not take it back. The login node holds the submit to its deadline.
    await hold.check_still_ours(launch.id)
    spec = dataclasses.replace(spec, submit_by=math.ceil(submit_deadline(launch)))
    try:
        submission = await hold.clusters.submit(spec)
    except (CommandTimeout, ClusterUnreachable) as exc:
        # The launcher may or may not have run: never conclude without Slurm's word.
        await recovery.outcome_unknown(hold, launch, exc)
        return
    except SlurmCommandFailed as exc:
        await recovery.failed_submit(hold, launch, exc)
        return
    await hold.record(launch, submission=submission)


def derived(hold: Hold, launch: Launch) -> Launch:
    """The launch no further than the config and the policy give its person, whatever its
    record in Redis says: a custom image only where ``policy.custom_images`` allows it
    (else ClusterError: the launch ends with the reason, nothing run); job secrets only
    where both the record and the policy give them; the record's Slurm account only if
    the policy gives it them or it is the cluster's own (""), else the policy's. (A
    move's re-admission may have narrowed the record with fresher groups: never widened
    here. ``profile_for`` checks its Unix user, and the CA the name it signs for.)"""
    policy = hold.clusters.config.policy
    profile = hold.clusters.profile(launch.cluster)
    req, fields = launch.request, launch_fields(launch.id, cluster=launch.cluster)
    secrets = True
    if is_custom_image(req.image, {*profile.images, *profile.images.values()}):
        decision, secrets = may_use_image(
            policy, user_id=launch.user_id, group_ids=launch.groups, cluster=launch.cluster,
            image=str(req.image), cluster_images=list(profile.images),
        )  # fmt: skip
        if not decision.allowed:
            log.warning(
                "launch %s refused: its record asks for image %s, which %s may not run "
                "on %s", launch.id, req.image, launch.user_id, launch.cluster, extra=fields,
            )  # fmt: skip
            raise ClusterError(
                f"the launch's record asks for image={req.image}, which the policy does "
                f"not let {launch.user_id} run on {launch.cluster} ({decision.reason})",
                cluster=launch.cluster,
            )
    given = slurm_account(
        policy, user_id=launch.user_id, group_ids=launch.groups, cluster=launch.cluster
    )
    account = launch.slurm_account if launch.slurm_account in ("", given) else given or ""
    secrets = secrets and launch.image_secrets
    if account != launch.slurm_account:
        log.warning(
            "launch %s: its record says Slurm account %r, which the policy does not give "
            "%s; %r is used", launch.id, launch.slurm_account, launch.user_id, account,
            extra=fields,
        )  # fmt: skip
    return launch.model_copy(update={"slurm_account": account, "image_secrets": secrets})


async def dry_run(hold: Hold, launch: Launch, spec: LaunchSpec) -> None:
    """A dry run ends here: what would have run (the remote command, the script, each
    pre-flight check), as facts."""
    dry = await hold.clusters.dry_run(spec)
    said: dict[str, object] = {"shell": dry.remote_shell, "script": dry.script}
    said["checks"] = [[c.ok, c.message] for c in dry.preflight.checks]
    if launch.cluster_user:
        said["user"] = launch.cluster_user
    await hold.move(launch.id, phases.dry_run, phases.Facts(outcome="DRY_RUN", data=said))


def refusal(result: PreflightResult, spec: LaunchSpec) -> dict[str, object]:
    """Why pre-flight refused, and the partition to go to where the asked one is wrong."""
    facts: dict[str, object] = {"why": "preflight", "error": result.message()}
    partition_ok = all(c.ok for c in result.checks if c.name == "partition")
    default = spec.profile.partition
    if not partition_ok and spec.slurm_partition != default:
        facts |= {"buttons": ["use_partition"], "partition": default}
    return facts


async def ready(hold: Hold, launch: Launch) -> bool:
    """A retry's old job is gone, and a launch that already waited for its thread
    looks at it first: no pre-flight over SSH on each look while it waits. A launch
    waiting for a time or for another launch (at=, after=) goes back until then."""
    if await pipelines.must_wait(hold.store, launch, hold.mutate, hold.authority):
        return False
    if launch.phase == Phase.RETRYING and not await recovery.prepare_retry(hold, launch):
        return False
    return not await hold.store.marks.thread_waits(launch.id) or await thread_is_up(hold, launch)


async def thread_is_up(hold: Hold, launch: Launch) -> bool:
    """A launch never runs without a thread anyone can see: submit only once its
    parent message is posted. While it is not, look again shortly (a deferred entry);
    when the channel refuses the bot (the notifier gave up and told the person by
    DM), the launch ends here with nothing submitted."""
    current = await hold.store.launches.get(launch.id)
    if current is not None and current.parent_ts:
        return True
    refused = await hold.store.marks.bad_channel(launch.id) or await hold.store.lanes.no_thread(
        launch.id
    )
    if refused:
        await hold.reject(
            launch, "NO_THREAD", why="no_thread", channel=launch.channel, refused=refused
        )
        return False
    if current is None or current.phase not in (Phase.QUEUED, Phase.PREFLIGHT):
        return False  # cancelled or ended meanwhile: nothing to wait for
    waits = await hold.store.marks.count_thread_wait(launch.id)
    wait_s = min(THREAD_WAIT_MAX_S, THREAD_WAIT_S * 2.0 ** min(waits - 1, 10))
    log.info("launch %s: its thread is not posted yet; looking again in %.0f s", launch.id, wait_s)
    await hold.store.queue.requeue(launch.id, after_s=wait_s)
    return False


def preflight_facts(
    result: PreflightResult, spec: LaunchSpec, notes: Sequence[str]
) -> dict[str, object]:
    """What pre-flight found, for its thread line: the partition's nodes and GPUs, the
    image (a registry's or a file), the recipe or script, and the notes of what the
    launcher lacks."""
    facts: dict[str, object] = {}
    info = next((p for p in result.partitions if p.name == spec.slurm_partition), None)
    if info is not None:
        facts["partition"] = {
            "name": info.name,
            "usable": info.nodes_usable,
            "nodes": info.nodes,
            "gpus_idle": info.gpus_idle,
        }
    if is_registry_ref(spec.image_path):
        facts["registry_image"] = pyxis_image(spec.image_path)
    else:
        facts["image"] = spec.image_path.rsplit("/", 1)[-1]
    if spec.script:
        facts["script_label"], facts["script"] = spec.fw.script_label, spec.script
    facts["notes"] = [*notes, *result.notes]
    return facts
