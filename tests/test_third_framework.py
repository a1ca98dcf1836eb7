"""A third framework is one module: a toy framework, defined and registered here as a
new file in ``cluster/frameworks/`` would be, is chosen on the ``/train`` line,
planned, and tracked through a poll, with no other module changed for it."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.engine.tracking import apply_snapshot
from bot.lifecycle.launch import Attempt, Launch, Phase
from bot.wording import thread
from cluster.launching.launch import plan_launch
from cluster.launching.parts import STEPS_PATTERN
from cluster.launching.recipes import default_catalog
from cluster.launching.spec import Framework, LaunchSpec
from cluster.site import framework_registry
from cluster.site.framework_registry import RecipeFields, register
from cluster.site.profiles import ClusterProfile
from cluster.slurm.sbatch import parse_sbatch_parsable
from cluster.ssh.remote import RemoteArg, RPath, join_remote
from cluster.watching import collect_remote
from cluster.watching.collector import Checkpoint, parse_collect_output
from cluster.watching.progress import Point, Progress
from cluster.watching.tracking import Tracking, check_job_id
from commands import CommandContext, CommandError, TrainRequest, User, help_text
from commands.requests import REQUEST_ADAPTER
from tests.commands.lines import parse_line

_STEP_RE = re.compile(r"^step (\d+)/(\d+) loss ([0-9.]+)$", re.MULTILINE)


class Toy(Framework):
    """``sbatch submit.sh <config>`` in ``<recipes_dir>/toy``; the job writes
    ``runs/<job id>/train.log`` and ``runs/<job id>/ckpt/step<N>``."""

    name = "toy"
    label = "Toy"
    aliases = ("toy_fw",)
    image = "toy-1.sqsh"
    workloads = ("sft", "ppo")
    default_for = ("ppo",)
    launcher = "submit.sh"
    script_label = "config"
    subdir = "toy"
    recipe_field = "script"
    recipe_globs = ("*.yaml",)

    def default_recipes(self) -> tuple[RecipeFields, ...]:
        return tuple(
            {
                "workload": workload,
                "model": "tiny",
                "script": f"{workload}.yaml",
                "overrides": {"toy.steps": STEPS_PATTERN},
            }
            for workload in self.workloads
        )

    def argv(self, spec: LaunchSpec) -> list[RemoteArg]:
        argv: list[RemoteArg] = ["sbatch", "--parsable", "-N", str(spec.nodes)]
        argv += ["-p", spec.slurm_partition, "-J", spec.job_name, "submit.sh", spec.script or ""]
        return argv + [f"{key}={value}" for key, value in spec.overrides]

    def script_env(self, spec: LaunchSpec) -> dict[str, RemoteArg]:
        return {"TOY_IMAGE": RPath(spec.image_path)}

    def tracking(self, spec: LaunchSpec, output: str) -> Tracking:
        return self.found(spec, parse_sbatch_parsable(output).job_id)

    def found(self, spec: LaunchSpec, job_id: str) -> Tracking:
        job_dir = join_remote(spec.work_dir, "runs", check_job_id(job_id))
        return Tracking(
            framework=self.name,
            job_id=job_id,
            log_dir=job_dir,
            log_names=("train.log",),
            checkpoint_dir=join_remote(job_dir, "ckpt"),
            checkpoint_pattern=r"^step([0-9]+)$",
            evidence=("*.log",),
        )

    def parse_progress(self, text: str, carry: Point | None) -> Progress:
        points = tuple(
            Point(step=int(step), total=int(total), loss=float(loss))
            for step, total, loss in _STEP_RE.findall(text)
        )
        return Progress(points=points)


@pytest.fixture
def toy() -> Iterator[Framework]:
    fw = register(Toy())
    yield fw
    del framework_registry._REGISTERED[fw.name]


def test_a_registered_framework_is_chosen_planned_and_tracked(
    toy: Framework, tmp_path: Path
) -> None:
    profile = ClusterProfile(
        name="a4",
        type="hcc-a4",
        login={"host": "127.0.0.1", "port": 2222, "user": "trainer"},
        partition="a4",
        max_nodes=4,
        recipes_dir=str(tmp_path),
    )
    # The built-in catalog is made when cluster.launching.recipes is imported, after every module
    # of cluster/frameworks/ registered; the toy registered later, so make it again.
    context = CommandContext(clusters={"a4": profile}, catalog=default_catalog())
    user = User(id="U0ALICE")

    # Parsing: ppo is the toy's own workload and runs on it by default; sft needs framework=.
    request = parse_line("/train ppo tiny nodes=2 toy.steps=20", user=user, context=context)
    assert request == TrainRequest(
        workload="ppo",
        model="tiny",
        framework="toy",
        cluster="a4",
        nodes=2,
        overrides=(("toy.steps", "20"),),
    )
    assert REQUEST_ADAPTER.validate_json(REQUEST_ADAPTER.dump_json(request)) == request
    chosen = parse_line("/train sft tiny framework=TOY_FW", user=user, context=context)
    assert isinstance(chosen, TrainRequest) and chosen.framework == "toy"
    with pytest.raises(CommandError, match=r"Frameworks: nemo, nemo-rl, megatron-bridge, toy\.$"):
        parse_line("/train sft tiny framework=jax", user=user, context=context)
    train_help = help_text(context, "train")
    assert "ppo (Toy)" in train_help
    assert "framework=F      nemo or nemo-rl or megatron-bridge or toy" in train_help

    # Planning: the toy's argv, run in its directory, with its default image.
    assert isinstance(request, TrainRequest)
    recipe = context.catalog.find(request.workload, request.model, request.framework)
    assert recipe is not None and recipe.script_path == "toy/ppo.yaml"
    spec = LaunchSpec.from_recipe(
        profile, recipe, launch_id="L-0a1b2c", nodes=request.nodes, overrides=request.overrides
    )
    plan = plan_launch(spec)
    assert shlex.split(plan.command_line) == [
        "sbatch", "--parsable", "-N", "2", "-p", "a4", "-J", "ppo-L-0a1b2c",
        "submit.sh", "ppo.yaml", "toy.steps=20",
    ]  # fmt: skip
    work_dir = tmp_path / "toy"
    assert f"export TOY_IMAGE={work_dir}/toy-1.sqsh" in plan.script().splitlines()
    assert f"cd {work_dir}" in plan.script().splitlines()
    assert toy.preflight_files(spec) == {
        "image": f"{work_dir}/toy-1.sqsh",
        "launcher": f"{work_dir}/submit.sh",
        "recipe": f"{work_dir}/ppo.yaml",
    }

    # Tracking: the record as stored with the launch, one poll by the collector's remote
    # half (run here on local files), and what that poll means for the launch.
    tracking = toy.tracking(spec, "31\n")
    launch = Launch(
        id="L-0a1b2c", request=request, user_id=user.id, channel="C1", phase=Phase.SUBMITTED
    )
    launch.attempts.append(Attempt(number=1, job_id="31", tracking=tracking))
    launch = Launch.model_validate_json(launch.model_dump_json())
    job_dir = work_dir / "runs" / "31"
    (job_dir / "ckpt" / "step10").mkdir(parents=True)
    log = "step 5/20 loss 2.5\nstep 10/20 loss 1.5\n"
    (job_dir / "train.log").write_text(log)
    stored = launch.attempts[0].tracking
    assert stored is not None
    raw = {"jobs": {"31": collect_remote.collect_job(stored.payload(), 4096, 10)}}
    snapshot = parse_collect_output(raw).jobs["31"]
    assert snapshot.new_checkpoints == (Checkpoint(step=10, name="step10"),)

    events = apply_snapshot(launch, snapshot, profile, now=100.0)
    assert "💾 Checkpoint step 10 saved." in [thread.line(e) for e in events if e.kind == "thread"]
    assert (launch.progress.step, launch.progress.total, launch.progress.loss) == (10, 20, 1.5)
    moved = launch.attempts[0].tracking
    assert moved is not None
    assert (moved.log_path, moved.log_offset) == (str(job_dir / "train.log"), len(log))
