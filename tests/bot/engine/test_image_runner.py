"""The image runner believes a record only as far as the config of now allows: a Unix user
the config does not give the person, or an image the policy no longer lets them run, ends
the run unsubmitted, said in its thread; nothing reaches the cluster."""

from __future__ import annotations

import io
import time

import pytest

from bot.console.chat import ConsoleFront
from bot.engine.image_runner import ImageRunner
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.image_run import ImageRun, new_run_id
from bot.wording import image_run as image_words
from cluster.ssh.pool import SSHPool
from commands.requests import ImagesRequest
from tests.bot.botkit import bot_settings, dev_config, open_test_store

pytestmark = pytest.mark.usefixtures("clean_redis")
IMAGE_DIR = "/home/alice/images"
REQUEST = ImagesRequest(
    cluster="a4", action="import", source="nvcr.io/nvidia/nemo:26.02", name="nemo-26.02"
)


def allowing(text: str) -> str:
    return text.replace(
        "  approval_above_nodes: null\n",
        "  approval_above_nodes: null\n  custom_images:\n"
        f'    - {{users: ["*"], groups: [], clusters: ["*"], dirs: [{IMAGE_DIR}]}}\n',
    ).replace("    data_dir: ~/data\n", f"    data_dir: ~/data\n    image_dir: {IMAGE_DIR}\n")


async def run_once(record: ImageRun, *, allow: bool) -> tuple[ImageRun, list[str], int]:
    config = dev_config(people={"alice": "alice"}, edit=allowing if allow else None)
    front = ConsoleFront(io.StringIO(), color=False)
    async with open_test_store() as store, SSHPool(act_as_people=True) as pool:
        clusters = Clusters(config, bot_settings(), pool)
        runner = ImageRunner(store, clusters, front, name="t", words=image_words)
        await store.image_runs.save(record)
        await runner.pass_once()
        after = await store.image_runs.get(record.id)
        assert after is not None
        return after, front.lines, pool.stats.round_trips


async def test_a_record_naming_another_unix_user_is_refused_and_nothing_runs() -> None:
    forged = ImageRun(
        id=new_run_id(), user_id="alice", channel="console", request=REQUEST, cluster_user="bob"
    )
    run, lines, commands = await run_once(forged, allow=True)
    assert run.phase == "done" and run.cause == "not_submitted" and not run.job_id
    assert commands == 0
    text = "\n".join(lines)
    assert f"❌ Not submitted: {run.id} is not run: its record names the Unix user bob" in text
    assert "❌ FAILED  image · import" in text


async def test_the_policy_of_now_is_asked_before_the_submit() -> None:
    record = ImageRun(
        id=new_run_id(), user_id="alice", channel="console", request=REQUEST, cluster_user="alice"
    )
    run, lines, commands = await run_once(record, allow=False)  # custom images no longer allowed
    assert run.phase == "done" and run.cause == "not_submitted" and commands == 0
    assert (
        "Not submitted: The image would be ~/vertex-oss-training/images/nemo-26.02.sqsh, which "
        "you could not then use: Custom images are not allowed for you on a4"
    ) in "\n".join(lines)


@pytest.mark.devcluster
async def test_a_job_slurm_never_heard_of_ends_lost_instead_of_being_followed_for_ever() -> None:
    record = ImageRun(
        id=new_run_id(), user_id="alice", channel="console", request=REQUEST, cluster_user="alice",
        phase="submitted", job_id="987654321", submitted_at=time.time() - 3600, parent_ts="1",
        posted=["queued", "submitted"],
    )  # fmt: skip
    run, lines, commands = await run_once(record, allow=True)
    # one sacct as alice (and, the first time, the CA asks the login node her uid)
    assert run.phase == "done" and run.cause == "lost" and 1 <= commands <= 2
    assert "Slurm has no word of job 987654321 10 min after it was submitted" in "\n".join(lines)
