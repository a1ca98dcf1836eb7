"""What comes back from the cluster: node names in logs, names that could ping. Through the
signed HTTP front end (tests.bot.security.kit)."""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from bot.lifecycle.events import Event
from bot.lifecycle.launch import Attempt, Launch, Phase
from cluster.watching.tracking import Tracking
from support.slack_standin import SlackStandin
from tests.bot.botkit import login_run, wait_delivered, wait_for_launch, wait_until
from tests.bot.security.kit import Secure, queued, secure_bot

pytestmark = pytest.mark.devcluster


# -- what comes back from the cluster --------------------------------------------


@asynccontextmanager
async def cluster_job(root: str, body: str, name: str) -> AsyncIterator[str]:
    """A real one-node job on the dev cluster (partition a4) running the bash ``body``,
    sbatch's output in ``root``; its id. Cancelled, and ``root`` removed, afterwards."""
    await asyncio.to_thread(login_run, f"mkdir -p {root}")
    out = await asyncio.to_thread(
        login_run,
        f"sbatch --parsable -p a4 -N 1 -J {name} -o {root}/sbatch_%j.out "
        f"--wrap {shlex.quote(body)}",
    )
    job_id = out.strip().split(";")[0]
    try:
        yield job_id
    finally:
        await asyncio.to_thread(login_run, f"scancel {job_id}; rm -rf {root}", check=False)


async def follow(s: Secure, launch_id: str, job_id: str, local_dir: str) -> Tracking:
    """Record ``job_id`` as the launch's submission, as a worker does once run.py printed
    nemo-run's status block: from now on the poller follows the job."""
    launch = await s.bot.store.launches.get(launch_id)
    assert launch is not None
    spec = s.bot.clusters.spec_for(launch).spec
    status = f"Task 0: {spec.job_name}\n- Job id: {job_id}\n- Local Directory: {local_dir}\n"
    tracking = spec.fw.tracking(spec, status)

    def submitted(stored: Launch) -> list[Event]:
        if not stored.attempts:
            stored.attempts.append(Attempt(number=1))
        attempt = stored.attempts[-1]
        attempt.job_id, attempt.submitted_at, attempt.tracking = job_id, time.time(), tracking
        stored.phase = Phase.SUBMITTED
        return [Event("update", stored.id)]

    await s.bot.store.launches.mutate(launch_id, submitted)
    return tracking


def posted(standin: SlackStandin) -> list[str]:
    """Everything the bot put in Slack: texts and blocks of messages, updates, ephemerals."""
    methods = ("chat.postMessage", "chat.update", "chat.postEphemeral")
    return [
        str(c.params.get("text", "")) + json.dumps(c.params.get("blocks", ""))
        for method in methods
        for c in standin.calls_to(method)
    ]


# the node a job's log says failed (bash, on the job's node) -> it is the job's own
NAMED_NODES = [
    ("login0", False),  # a valid host name, not a node of the job
    ("$other", False),  # a real node of the cluster, not this job's
    ("-$SLURMD_NODENAME", False),  # not a valid host name
    ("$SLURMD_NODENAME", True),  # the job's own node: the one case that counts
]


@pytest.mark.parametrize(("named", "own"), NAMED_NODES)
async def test_a_node_a_log_names_counts_only_if_it_is_the_jobs_own(
    standin: SlackStandin, unique: str, named: str, own: bool
) -> None:
    """A running launch's log says ``Node failure on <name>``, then the job fails. Only its
    own node is excluded on retry or paged for; any other name changes nothing."""
    home = (await asyncio.to_thread(login_run, "echo $HOME")).strip()
    root = f"{home}/vertex-oss-training/nemo/logs/sectest-{unique}"  # where logs are read
    body = (
        "other=$(for n in dev0 dev1 dev2 dev3; do [ $n = $SLURMD_NODENAME ] || echo $n; done "
        "| head -n 1)\n"
        f'echo "srun: error: Node failure on {named}" >> {root}/log-x_${{SLURM_JOB_ID}}_0.out\n'
        "sleep 4\nexit 1\n"
    )
    async with secure_bot(standin, watch={"evidence_reread_s": 0}) as s:
        launch_id = await queued(s, f"sft llama3p1_8b cluster=a4 name=sec{unique}")
        async with cluster_job(root, body, f"sec{unique}") as job_id:
            await follow(s, launch_id, job_id, root)

            async def read_while_running() -> Launch | None:
                got = await s.bot.store.launches.get(launch_id)
                seen = (
                    got and got.phase == Phase.RUNNING and "Node failure" in got.attempts[-1].tail
                )
                return got if seen else None

            running_launch = await wait_until(read_while_running, "the log read while running")

            async def ended() -> Launch | None:
                got = await s.bot.store.launches.get(launch_id)
                return got if got and got.phase in (Phase.DONE, Phase.RETRYING) else None

            launch = await wait_until(ended, "the failure handled", timeout_s=90)
        await wait_delivered(s.bot.store)
    assert running_launch.open_alerts == [] and len(running_launch.attempts) == 1
    node = launch.attempts[0].node_list
    paged = [c for c in standin.calls_to("chat.postMessage") if c.params["channel"] == "C0ONCALL"]
    if own:
        assert launch.phase == Phase.RETRYING and launch.attempts[-1].exclude == node
        assert launch.open_alerts and paged
        return
    assert (launch.phase, launch.outcome, len(launch.attempts)) == (Phase.DONE, "FAILED", 1)
    assert launch.attempts[0].cause_key == "unknown" and not launch.attempts[0].exclude
    assert launch.open_alerts == [] and paged == []
    assert not any("without" in text or "Retrying" in text for text in posted(standin))


async def test_names_and_lines_from_the_cluster_never_ping_anyone(
    standin: SlackStandin, unique: str
) -> None:
    """A job writes a checkpoint directory named ``<!channel>-step=1-`` (NeMo's pattern
    takes it) and log lines full of Slack markup, then fails: what Slack receives pings
    no one, yet says what happened."""
    home = (await asyncio.to_thread(login_run, "echo $HOME")).strip()
    root = f"{home}/vertex-oss-training/nemo/logs/sectest-{unique}"  # where logs are read
    async with secure_bot(standin, watch={"evidence_reread_s": 0}) as s:
        launch_id = await queued(s, f"sft llama3p1_8b cluster=a4 name=sec{unique}")
        log_dir = s.bot.clusters.profile("a4").log_dir.replace("~", home, 1)
        checkpoints = f"{log_dir}/sec{unique}-{launch_id}"
        hostile = "<!channel> <!here|here> <!everyone> <@U0BOB> <https://evil.example|click>"
        body = (
            f"log={root}/log-x_${{SLURM_JOB_ID}}_0.out\n"
            f"echo {shlex.quote('step 1: ' + hostile)} >> $log\n"
            f"mkdir -p {shlex.quote(checkpoints + '/default/checkpoints/<!channel>-step=1-')}\n"
            "sleep 4\n"
            f"echo {shlex.quote('RuntimeError: ' + hostile)} >> $log\n"
            "exit 1\n"
        )
        try:
            async with cluster_job(root, body, f"sec{unique}") as job_id:
                await follow(s, launch_id, job_id, root)
                await wait_for_launch(s.bot.store, launch_id, timeout_s=90)
                await wait_delivered(s.bot.store)
        finally:
            await asyncio.to_thread(login_run, f"rm -rf {checkpoints}", check=False)
        launch = await s.bot.store.launches.get(launch_id)
    texts = posted(standin)
    assert launch is not None and launch.checkpoints == ["<!channel>-step=1-"]
    assert any("💾 Checkpoint step 1 saved." in text for text in texts), texts
    assert any("RuntimeError: &lt;!channel&gt;" in text for text in texts), texts
    for text in texts:
        for markup in ("<!channel", "<!here", "<!everyone", "<@U0BOB", "<https://evil"):
            assert markup not in text, text
