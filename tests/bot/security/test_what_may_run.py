"""What may run: custom images, job secrets and Slurm accounts per policy. Through the signed
HTTP front end (tests.bot.security.kit)."""

from __future__ import annotations

import pytest

from cluster.launching.launch import plan_launch
from commands.rules import AccountRule
from support.slack_standin import SlackStandin
from tests.bot.security.kit import GROUPS, secure_bot

pytestmark = pytest.mark.devcluster


# -- what may run --------------------------------------------------------------

# user, image -> queued?, job secrets in the spec, text
IMAGES = [
    ("U0ALICE", "/tmp/evil.sqsh", False, None, "Custom images are not allowed for you on a4"),
    (
        "U0ALICE",
        "/opt/images/reviewed/x.sqsh",
        False,
        None,
        "Use one of its images: megatron-bridge, nemo, nemo-rl",
    ),
    ("U0IMG", "/opt/images/reviewed/x.sqsh", True, False, "Queued"),
    ("U0IMG", "~/images/reviewed/x.sqsh", False, None, "(/opt/images/reviewed). Put it there"),
    ("U0IMG", "/opt/images/elsewhere/x.sqsh", False, None, "(/opt/images/reviewed). Put it"),
    ("U0CHIEF", "/opt/images/trusted/x.sqsh", True, True, "Queued"),
    ("U0ALICE", "nemo", True, True, "Queued"),  # the cluster's own image, by name
]


@pytest.mark.parametrize(("user", "image", "queued", "secrets", "says"), IMAGES)
async def test_custom_images_only_where_policy_allows(
    standin: SlackStandin,
    user: str,
    image: str,
    queued: bool,
    secrets: bool | None,
    says: str,
) -> None:
    async with secure_bot(standin) as s:
        said = await s.command("/train", f"sft llama3p1_8b cluster=a4 image={image}", user=user)
        ids = await s.bot.store.history.active_ids(user)
        specs = [
            s.bot.clusters.spec_for(launch)
            for i in ids
            if (launch := await s.bot.store.launches.get(i))
        ]
    assert says in said, said
    assert len(ids) == (1 if queued else 0)
    if queued:
        spec = specs[0].spec
        assert bool(spec.secrets) is secrets
        if not secrets:
            assert spec.secret_files() == {} and spec.profile.job_secrets == {}


async def test_a_custom_image_reaches_a_nemo_rl_job(standin: SlackStandin) -> None:
    """NeMo-RL takes its image as CONTAINER (launch.sh reads it; sbatch exports the
    submitting shell's environment): an allowed image= is what the submission exports."""
    image = "/opt/images/reviewed/rl-custom.sqsh"
    async with secure_bot(standin) as s:
        said = await s.command("/train", f"dpo llama3p1_8b cluster=a4 image={image}", user="U0IMG")
        (launch_id,) = await s.bot.store.history.active_ids("U0IMG")
        launch = await s.bot.store.launches.get(launch_id)
        assert launch is not None
        plan = plan_launch(s.bot.clusters.spec_for(launch).spec)
        default = s.bot.clusters.profile("a4").image_for("nemo-rl")
    assert said.startswith("Queued"), said
    script = plan.script()
    assert plan.spec.framework == "nemo-rl" and plan.argv[0] == "sbatch"
    assert f"\nexport CONTAINER={image}\n" in script, script
    assert script.index("export CONTAINER=") < script.index("\nexec sbatch ")
    assert default not in script


async def test_a_groups_launches_run_under_its_slurm_account(standin: SlackStandin) -> None:
    """policy.accounts by user group: the member's /train is planned with that --account
    (the group's members come from Slack, as for every other rule)."""
    accounts = (AccountRule(groups=("S0VISION",), clusters=("a4",), account="vision"),)
    async with secure_bot(standin, accounts=accounts) as s:
        said = {
            u: await s.command("/train", "sft llama3p1_8b cluster=a4", user=u)
            for u in GROUPS["S0VISION"] + ["U0ALICE"]
        }
        argv = {}
        for user in said:
            (launch_id,) = await s.bot.store.history.active_ids(user)
            launch = await s.bot.store.launches.get(launch_id)
            assert launch is not None
            argv[user] = [str(a) for a in plan_launch(s.bot.clusters.spec_for(launch).spec).argv]
    assert all(text.startswith("Queued") for text in said.values()), said
    vic = argv["U0VIC"]
    assert vic[vic.index("--account") + 1] == "vision"
    assert "vision" not in argv["U0ALICE"]
