"""What a careless or hostile person cannot do: borrow the bot's CA from a web process or
a loose key file, get the organisation's secrets into their own job, keep admin rights
while Slack cannot say they lost them, make the bot post a link to any site, or reach
/metrics through the port Slack talks to when it is set apart."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.console.chat import ConsoleFront
from bot.core import directory
from bot.engine.tracking import apply_snapshot
from bot.gateway.on_cluster import Clusters
from bot.lifecycle.launch import Launch
from bot.runtime.assembly import running
from bot.settings.config import parse_config
from bot.settings.env import Settings
from bot.settings.sections import Watch
from bot.slack.http import SlackParams, run_slack
from cluster.errors import ConfigError
from cluster.ssh.pool import SSHPool
from commands.requests import TrainRequest
from support.slack_standin import SlackStandin
from tests.bot.botkit import bot_settings, dev_config
from tests.bot.conftest import FakeHandler, healthy, some_metrics, standin_params
from tests.bot.engine.test_tracking import PROFILE, launch, snapshot, threads
from tests.bot.security.kit import REFUSED_LOGS, secure_bot, seed

CONFIG = """
clusters:
  a4:
    type: hcc-a4
    login: {host: h, user: trainer, key_file: /k, user_ca_key_file: /ca}
    partition: a4
    max_nodes: 1
    job_secrets:
      HF_TOKEN: {env: TRAINBOT_HF_TOKEN}
      WANDB_API_KEY: {env: TRAINBOT_WANDB_API_KEY}
      OWN_TOKEN: {file: ~/own}
    identity:
      users: {U0ALICE: alice}
"""


pytestmark = pytest.mark.usefixtures("clean_redis")


# -- organisation secrets and people's jobs -------------------------------------------


def spec_secrets(config_text: str, cluster_user: str) -> tuple[set[str], list[str]]:
    config = parse_config(config_text, base_dir=Path("."))
    env = {"TRAINBOT_HF_TOKEN": "hf_org_secret_value", "TRAINBOT_WANDB_API_KEY": "w" * 24}
    clusters = Clusters(config, Settings.from_environ(env), SSHPool())
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    who = "U0ALICE" if cluster_user else "U0BOB"  # the config maps alice; bob is unmapped
    launch = Launch(request=request, user_id=who, channel="C1", cluster_user=cluster_user)
    built = clusters.spec_for(launch)
    return {*built.spec.secrets, *built.spec.profile.job_secrets}, built.notes


def test_an_organisation_secret_reaches_a_persons_job_only_where_allowed() -> None:
    got, notes = spec_secrets(CONFIG, "alice")  # fail closed: no org_secrets
    assert got == {"OWN_TOKEN"}, got  # her own file's secret, none of the bot's
    assert any("HF_TOKEN is the organisation's" in n for n in notes), notes
    allowed = CONFIG.replace(
        "users: {U0ALICE: alice}", "users: {U0ALICE: alice}\n      org_secrets: [WANDB_API_KEY]"
    )
    got, _ = spec_secrets(allowed, "alice")
    assert got == {"OWN_TOKEN", "WANDB_API_KEY"}, got
    shared = CONFIG.replace(
        "users: {U0ALICE: alice}", "users: {U0ALICE: alice}\n      unmapped: shared"
    )
    got, notes = spec_secrets(shared, "")  # the shared account's job, as before
    assert got == {"OWN_TOKEN", "HF_TOKEN", "WANDB_API_KEY"} and notes == []


def test_org_secrets_must_name_env_job_secrets() -> None:
    bad = CONFIG.replace(
        "users: {U0ALICE: alice}", "users: {U0ALICE: alice}\n      org_secrets: [OWN_TOKEN]"
    )
    with pytest.raises(ConfigError, match="OWN_TOKEN is not a job_secrets entry given as"):
        parse_config(bad, base_dir=Path("."))


@pytest.mark.parametrize("name", ["root", "trainer"])
def test_users_never_maps_anyone_to_root_or_the_shared_account(name: str) -> None:
    text = CONFIG.replace("users: {U0ALICE: alice}", f"users: {{U0ALICE: alice, U0EVE: {name}}}")
    with pytest.raises(ConfigError, match=f"U0EVE: {name} is root or the shared account"):
        parse_config(text, base_dir=Path("."))


def test_from_email_without_domains_is_refused_at_start() -> None:
    text = CONFIG.replace("users: {U0ALICE: alice}", "users: {}\n      from_email: true")
    with pytest.raises(ConfigError, match="from_email: true needs email_domains"):
        parse_config(text, base_dir=Path("."))


# -- the CA key: owner-only, and only where people are acted as -------------------------


@pytest.mark.devcluster
async def test_a_loose_ca_key_stops_worker_and_poller_start_and_web_never_reads_it(
    tmp_path: Path,
) -> None:
    config = dev_config()
    loose = tmp_path / "user_ca"
    source = config.clusters["a4"].login.user_ca_key_file
    assert source is not None
    shutil.copyfile(source, loose)
    loose.chmod(0o644)
    clusters = {
        name: p.model_copy(update={"login": p.login.model_copy(update={"user_ca_key_file": loose})})
        for name, p in config.clusters.items()
    }
    config = config.model_copy(update={"clusters": clusters})
    front = ConsoleFront(color=False)
    for role in ("worker", "poller", "all"):
        with pytest.raises(ConfigError, match="must be owned by the user trainbot runs as"):
            async with running(bot_settings(), config, front, role=role):
                pass
    async with running(bot_settings(), config, front, role="web") as bot:
        assert not bot.clusters.pool.act_as_people  # it never signs: nothing to read


# -- stale privileged groups -----------------------------------------------------------


@pytest.mark.devcluster
async def test_admin_rights_are_not_kept_while_slack_cannot_confirm_them(
    standin: SlackStandin, log_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(directory, "PRIVILEGED_GROUPS_TTL_S", 0.3)
    async with secure_bot(standin) as s:
        launch_ = await seed(s.bot, log_path=log_file)
        assert REFUSED_LOGS not in await s.command("/logs", launch_.id, user="U0DAVE")
        standin.fail_next("usergroups.users.list", status=500, times=10_000)
        await asyncio.sleep(0.5)  # the admin group's membership is due to be asked again
        said = await s.command("/logs", launch_.id, user="U0DAVE")
        assert REFUSED_LOGS in said, said
        assert "could not confirm your group membership" in said and "try again" in said
        standin.fail_next("usergroups.users.list", times=0)  # Slack answers again
        await asyncio.sleep(0.5)
        again = await s.command("/logs", launch_.id, user="U0DAVE")
    assert REFUSED_LOGS not in again and "could not confirm" not in again, again


# -- links from job output -------------------------------------------------------------


def test_only_links_to_configured_hosts_are_posted() -> None:
    stored = launch()
    lines = (
        "wandb: 🚀 View run at https://evil.example/team/llama/runs/ab12cd\n"
        "wandb: 🚀 View run at https://wandb.ai.evil.example/x/runs/1\n"
        "wandb: 🚀 View run at https://wandb.ai/team/llama/runs/ok1\n"
    )
    said = threads(apply_snapshot(stored, snapshot("RUNNING", lines), PROFILE, Watch(), now=1.0))
    assert not any("evil" in t for t in said), said
    assert any("<https://wandb.ai/team/llama/runs/ok1|ok1>" in t for t in said), said
    assert stored.run_links == ["https://wandb.ai/team/llama/runs/ok1"]
    own = Watch(link_hosts=("wandb.example.com",))
    stored = launch()
    line = "wandb: View run at https://wandb.example.com/team/p/runs/z9\n"
    said = threads(apply_snapshot(stored, snapshot("RUNNING", line), PROFILE, own, now=1.0))
    assert any("<https://wandb.example.com/team/p/runs/z9|z9>" in t for t in said), said


# -- /metrics apart from Slack's listener ----------------------------------------------


async def get(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(url) as answer:
        await answer.read()
        return answer.status


@asynccontextmanager
async def serve(standin: SlackStandin, **params: Any) -> AsyncIterator[tuple[int, int | None]]:
    async with run_slack(
        standin_params(standin, **params), FakeHandler(), health=healthy, metrics=some_metrics
    ) as service:
        yield service.http_port, service.metrics_port


async def test_metrics_can_listen_apart_from_slacks_port(standin: SlackStandin) -> None:
    async with serve(standin, metrics_port=0) as (main, apart):
        assert apart is not None and apart != main
        assert await get(f"http://127.0.0.1:{main}/metrics") == 404
        assert await get(f"http://127.0.0.1:{main}/healthz") == 200
        assert await get(f"http://127.0.0.1:{apart}/metrics") == 200
        assert await get(f"http://127.0.0.1:{apart}/slack/events") == 404
    async with serve(standin) as (main, apart):  # unset: on the main port, as before
        assert apart is None
        assert await get(f"http://127.0.0.1:{main}/metrics") == 200


def test_metrics_host_without_port_is_refused() -> None:
    with pytest.raises(ConfigError, match="TRAINBOT_METRICS_HOST needs TRAINBOT_METRICS_PORT"):
        Settings.from_environ({"TRAINBOT_METRICS_HOST": "10.0.0.5"})
    settings = Settings.from_environ({"TRAINBOT_METRICS_PORT": "9100"})
    assert SlackParams.from_settings(settings).metrics_apart == ("127.0.0.1", 9100)
