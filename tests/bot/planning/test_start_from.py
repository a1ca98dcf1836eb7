"""from=<job>: the parse, which framework pairs can start from which, the override each
framework gets, the newest complete checkpoint of a parent, and /jobs' chain text."""

from __future__ import annotations

import dataclasses

import pytest

from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.planning import start_from
from bot.wording import waits
from cluster.errors import ClusterError
from cluster.launching.launch import plan_launch
from cluster.launching.recipes import DEFAULT_CATALOG
from cluster.launching.spec import LaunchSpec, framework
from cluster.site.profiles import ClusterProfile
from cluster.ssh.remote import quote_path
from cluster.watching.tracking import Tracking
from commands import CommandError, TrainRequest, User
from tests.bot.botkit import ended_with, flush_test_redis, open_test_store
from tests.commands.conftest import build_context
from tests.commands.lines import parse_line

ALICE = User(id="U0ALICE", name="alice")
NEMO_DIR = "~/vertex-oss-training/nemo/logs/pretrain-L-0a1b2c3d4e/default/checkpoints"
NEMO_CKPT = "model_name=0--val_loss=0.00-step={}-consumed_samples=1280.0-last"


def profile() -> ClusterProfile:
    return ClusterProfile(
        name="a4",
        type="hcc-a4",
        login={"host": "127.0.0.1", "port": 2222, "user": "trainer"},
        partition="a4",
        max_nodes=4,
    )


def launch(request: TrainRequest, checkpoints: list[str], ckpt_dir: str) -> Launch:
    launch = Launch(request=request, user_id="U0ALICE", user_name="alice", channel="C1")
    tracking = Tracking(
        framework=request.framework,
        job_id="41",
        checkpoint_dir=ckpt_dir,
        checkpoint_pattern=r"-step=([0-9]+)(?:-|$)",
    )
    launch.attempts.append(Attempt(number=1, job_id="41", tracking=tracking))
    launch.checkpoints = checkpoints
    return launch


def train(workload: str, fw: str = "nemo", **extra: object) -> TrainRequest:
    return TrainRequest(workload=workload, model="llama3p1_8b", framework=fw, cluster="a4", **extra)


def test_from_parses_and_round_trips() -> None:
    context = build_context()
    request = parse_line(
        "/train sft llama3p1_8b cluster=a4 from=l-0A1b2c3d4e", user=ALICE, context=context
    )
    assert isinstance(request, TrainRequest) and request.start_from == "L-0a1b2c3d4e"
    assert "from=L-0a1b2c3d4e" in request.to_text()
    again = parse_line(request.to_text(), user=ALICE, context=context)
    assert again == request
    assert isinstance(
        parse_line("/train sft llama3p1_8b from=4187", user=ALICE, context=context), TrainRequest
    )
    with pytest.raises(CommandError, match=r"^from='?x;y'? is not a job\. Give the launch whose"):
        parse_line("/train sft llama3p1_8b from=x;y", user=ALICE, context=context)
    with pytest.raises(CommandError, match=r"Unknown key 'from' for /train interactive"):
        parse_line("/train interactive from=L-0a1b2c3d4e", user=ALICE, context=context)


@pytest.mark.parametrize(
    ("child", "parent", "key"),
    [
        (("sft", "nemo"), ("pretrain", "nemo"), "resume.restore_config.path"),
        (("cpt", "nemo"), ("pretrain", "nemo"), "resume.restore_config.path"),
        (("pretrain", "nemo"), ("pretrain", "nemo"), "resume.resume_from_path"),
        (("dpo", "nemo-rl"), ("dpo", "nemo-rl"), "checkpointing.checkpoint_dir"),
    ],
)
def test_the_override_for_each_pair_that_can(
    child: tuple[str, str], parent: tuple[str, str], key: str
) -> None:
    request = train(*child)
    ancestor = launch(train(*parent), [], NEMO_DIR)
    assert start_from.start_key(request, ancestor) == key


@pytest.mark.parametrize(
    ("child", "parent", "why"),
    [
        (
            ("dpo", "nemo-rl"),
            ("sft", "nemo-rl"),
            "NeMo-RL starts only from a run of the same algorithm",
        ),
        (
            ("dpo", "nemo-rl"),
            ("pretrain", "nemo"),
            "NeMo-RL starts only from a run of the same algorithm",
        ),
        (("sft", "nemo"), ("sft", "nemo-rl"), "a NeMo 2 recipe loads only NeMo 2 checkpoints"),
    ],
)
def test_pairs_that_cannot_are_refused_with_the_reason(
    child: tuple[str, str], parent: tuple[str, str], why: str
) -> None:
    ancestor = launch(train(*parent), [], NEMO_DIR)
    with pytest.raises(ValueError) as raised:
        start_from.start_key(train(*child), ancestor)
    text = str(raised.value)
    assert text.startswith(f"{child[0]} on {child[1]} cannot start from {ancestor.id} ")
    assert why in text


def test_the_newest_complete_checkpoint_is_the_highest_step() -> None:
    parent = launch(
        train("pretrain"),
        [NEMO_CKPT.format(9), NEMO_CKPT.format(29), NEMO_CKPT.format(19)],
        NEMO_DIR,
    )
    tracking, name, step = start_from.newest_checkpoint(parent) or (None, "", 0)
    assert (name, step) == (NEMO_CKPT.format(29), 29)
    assert tracking is not None and tracking.checkpoint_dir == NEMO_DIR
    assert start_from.newest_checkpoint(launch(train("pretrain"), [], NEMO_DIR)) is None


def test_the_nemo_command_line_names_the_checkpoint_with_home_kept() -> None:
    recipe = DEFAULT_CATALOG.find("sft", "llama3p1_8b", "nemo")
    assert recipe is not None
    spec = LaunchSpec.from_recipe(profile(), recipe, launch_id="L-0a1b2c3d4f", nodes=1)
    path = f"{NEMO_DIR}/{NEMO_CKPT.format(29)}"
    spec = dataclasses.replace(spec, start_from=("resume.restore_config.path", path))
    line = plan_launch(spec).command_line
    assert line.endswith(f" -- resume.restore_config.path={quote_path(path)}"), line
    assert quote_path(path).startswith('"$HOME"/')
    with pytest.raises(ValueError, match="checkpoint path"):
        dataclasses.replace(spec, start_from=("resume.restore_config.path", "~/a;b"))
    with pytest.raises(ValueError, match="checkpoint path"):
        dataclasses.replace(spec, start_from=("resume.restore_config.path", "~/a/../b"))


async def test_nemo_rl_starts_from_a_copy_in_a_directory_of_its_own() -> None:
    """NeMo-RL resumes, saves and prunes in its checkpoint_dir: the child gets a copy of
    the parent's step_N in from-<its id>/checkpoints, never the parent's directory; a
    copy that cannot be made ends the child, nothing submitted."""
    await flush_test_redis()
    fw = framework("nemo-rl")
    where = profile()
    parent_dir = fw.work_dir(where) + "/41/checkpoints"
    async with open_test_store() as store:
        parent = launch(train("dpo", "nemo-rl"), ["step_10", "step_30"], parent_dir)
        parent.phase, parent.outcome = Phase.DONE, "COMPLETED"
        tracking = parent.attempts[0].tracking
        assert tracking is not None
        parent.attempts[0].tracking = tracking.model_copy(
            update={"checkpoint_pattern": r"^step_([0-9]+)$"}
        )
        await store.launches.create(parent, [], enqueue=False)
        asked: list[tuple[str, str]] = []

        async def copy(source: str, target: str) -> str:
            asked.append((source, target))
            return "linked"

        child = launch(train("dpo", "nemo-rl", start_from=parent.id), [], "")
        child.attempts, child.starts_from = [], parent.id
        await store.launches.create(child, [], enqueue=False)
        went = await start_from.start_point(store, child, store.launches.mutate, where, None, copy)
        assert went is not None
        own = f"from-{child.id}/checkpoints"
        assert (went.start_key, went.start_path) == ("checkpointing.checkpoint_dir", own)
        assert asked == [(f"{parent_dir}/step_30", f"{fw.work_dir(where)}/{own}/step_30")]

        async def cannot(source: str, target: str) -> str:
            raise ClusterError("copying checkpoint failed: No space left on device")

        other = launch(train("dpo", "nemo-rl", start_from=parent.id), [], "")
        other.attempts, other.starts_from = [], parent.id
        await store.launches.create(other, [], enqueue=False)
        assert (
            await start_from.start_point(store, other, store.launches.mutate, where, None, cannot)
            is None
        )
        ended = await store.launches.get(other.id)
        assert ended is not None and ended.outcome == "NO_CHECKPOINT" and not ended.attempts
        said = ended_with(ended)
        assert "No space left on device" in said or said.startswith("Could not")


def test_chains_show_in_jobs_lines() -> None:
    first = launch(train("pretrain"), [], NEMO_DIR)
    first.phase = Phase.RUNNING
    second = launch(train("sft"), [], NEMO_DIR)
    second.waits_for, second.starts_from = first.id, first.id
    assert waits.chain_text(first, [first, second]) == f" · chain: {first.id} -> {second.id}"
    assert waits.chain_text(second, [first, second]) == (
        f" · ⏳ waits until {first.id} completes · from {first.id}'s checkpoint"
    )


def test_an_at_time_is_shown_in_each_readers_zone_and_in_the_owners_to_the_owner() -> None:
    waiting = launch(train("sft"), [], NEMO_DIR)
    waiting.request = waiting.request.model_copy(update={"at": "2026-12-24T07:00:00Z"})
    waiting.tz = "Europe/Berlin"
    due = 1798095600  # 2026-12-24 07:00 UTC
    assert waits.chain_text(waiting, [waiting]) == (
        f" · ⏳ starts at <!date^{due}^{{date_short_pretty}} {{time}}|2026-12-24 07:00 UTC>"
    )
    assert waits.waits_text(waiting, own_zone=True) == "starts at 2026-12-24 08:00 Europe/Berlin"
