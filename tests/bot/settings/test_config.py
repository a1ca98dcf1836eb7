"""The config file: the contract shape, the example, and every kind of error."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.runtime.assembly import check_role_config, role_parts
from bot.settings.config import Config, load_config, parse_config
from cluster.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]

# Exactly what devcluster/up writes into .devcluster/trainbot.yaml (one cluster shown
# per type; paths are absolute there).
DEVCLUSTER_SHAPE = """
clusters:
{clusters}
policy:
  admins: {{users: [], groups: []}}
  rules:
    - users: ["*"]
      groups: []
      clusters: ["*"]
      max_nodes: 4
      max_concurrent: 4
  approval_above_nodes: null
alerts:
  oncall_channel: C0ONCALL
  oncall_usergroup: S0ONCALL
  webhook: null
"""
CLUSTER = """
  {name}:
    type: {type}
    description: "{name} (dev cluster)"
    login:
      host: 127.0.0.1
      port: 2222
      user: trainer
      key_file: /work/.devcluster/id_ed25519
      known_hosts_file: /work/.devcluster/known_hosts
    partition: {name}
    max_nodes: 4
    recipes_dir: ~/vertex-oss-training
    nemorun_home: ~/vertex-oss-training/nemo
    images:
      nemo: ~/vertex-oss-training/nemo/nemo-20250721.sqsh
      nemo-rl: ~/vertex-oss-training/nemo_rl/nemo_rl-h20250923.sqsh
    cache_dir: ~/.cache
    data_dir: ~/data
    log_dir: ~/vertex-oss-training/nemo/logs
    poll_interval_s: 2
    time_limit: "01:00:00"
    job_secrets:
      HF_TOKEN: {{env: TRAINBOT_HF_TOKEN}}
      WANDB_API_KEY: {{env: TRAINBOT_WANDB_API_KEY}}
"""


def devcluster_text() -> str:
    clusters = "".join(
        CLUSTER.format(name=name, type=f"hcc-{name}") for name in ("a3m", "a3u", "a4", "a3h")
    )
    return DEVCLUSTER_SHAPE.format(clusters=clusters.rstrip("\n"))


def test_devcluster_shape_loads(tmp_path: Path) -> None:
    path = tmp_path / "trainbot.yaml"
    path.write_text(devcluster_text())
    config = load_config(path)
    assert list(config.clusters) == ["a3m", "a3u", "a4", "a3h"]
    a4 = config.clusters["a4"]
    assert (a4.name, a4.type, a4.partition, a4.max_nodes) == ("a4", "hcc-a4", "a4", 4)
    assert a4.login.key_file == Path("/work/.devcluster/id_ed25519")
    assert a4.time_limit == "01:00:00" and a4.poll_interval_s == 2
    assert config.alerts.oncall_usergroup == "S0ONCALL"
    context = config.command_context()
    assert context.default_profile().name == "a3m"
    assert context.catalog == config.catalog
    assert len(config.catalog.entries) == 17 + 8  # NeMo, NeMo-RL, Megatron-Bridge


def test_running_devcluster_config_loads_when_present() -> None:
    path = ROOT / ".devcluster" / "trainbot.yaml"
    if not path.exists():
        pytest.skip("no .devcluster/trainbot.yaml (devcluster/up not run)")
    assert list(load_config(path).clusters) == ["a3m", "a3u", "a4", "a3h"]


def test_example_file_loads_and_documents_every_field() -> None:
    path = ROOT / "trainbot.example.yaml"
    config = load_config(path)
    assert config.default_cluster == "a4"
    assert config.alerts.webhook is not None
    assert config.alerts.webhook.routing_key is not None
    assert config.policy.admins.users == ("U0ADMIN",)
    text = path.read_text()
    documented = {
        line.strip().lstrip("#").strip().removeprefix("- ").split(":")[0]
        for line in text.splitlines()
    }
    fields = set(Config.model_fields) | {"approval_above_nodes"}
    for model in (config.clusters["a4"], config.clusters["a4"].login, config.recipes[0]):
        fields |= set(type(model).model_fields)
    fields |= set(type(config.policy).model_fields) | set(type(config.alerts).model_fields)
    fields -= {"name"}  # a cluster's name is its key
    assert fields - documented == set()


def test_relative_local_paths_start_at_the_config_file(tmp_path: Path) -> None:
    text = devcluster_text().replace("/work/.devcluster/id_ed25519", "keys/id_ed25519")
    path = tmp_path / "trainbot.yaml"
    path.write_text(text)
    assert load_config(path).clusters["a4"].login.key_file == tmp_path / "keys" / "id_ed25519"


def test_defaults_when_optional_sections_are_absent() -> None:
    config = parse_config(
        "clusters:\n  a4: {type: hcc-a4, login: {host: h, user: u}, partition: a4, max_nodes: 2}"
    )
    assert config.policy.rules == () and config.alerts.webhook is None
    assert config.clusters["a4"].recipes_dir == "~/vertex-oss-training"


def test_recipes_replace_or_add_and_can_stand_alone() -> None:
    base = (
        "clusters:\n  a4: {type: hcc-a4, login: {host: h, user: u}, partition: a4, max_nodes: 2}\n"
    )
    extra = "recipes: [{workload: sft, model: mistral_7b, framework: nemo, script: sft/m.py}]\n"
    assert len(parse_config(base + extra).catalog.entries) == 18 + 8
    alone = parse_config(base + extra + "default_recipes: false\n")
    assert [e.model for e in alone.catalog.entries] == ["mistral_7b"]


BASE = """
clusters:
  a4:
    type: hcc-a4
    login: {host: 127.0.0.1, port: 2222, user: trainer}
    partition: a4
    max_nodes: 4
"""


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "max_nodes: 4",
            "max_nodes: 0",
            "trainbot.yaml: clusters.a4.max_nodes: must be >= 1 (got 0)",
        ),
        (
            "max_nodes: 4",
            "max_nodes: four",
            "trainbot.yaml: clusters.a4.max_nodes: must be a whole number (got 'four')",
        ),
        (
            "type: hcc-a4",
            "type: hcc-a5",
            "trainbot.yaml: clusters.a4.type: must be one of 'hcc-a3m', 'hcc-a3u', 'hcc-a4' or "
            "'hcc-a3h' (got 'hcc-a5')",
        ),
        ("    partition: a4\n", "", "trainbot.yaml: clusters.a4.partition: is required"),
        (
            "max_nodes: 4",
            "max_nodes: 4\n    recipes_dir: vertex",
            "trainbot.yaml: clusters.a4.recipes_dir: must be absolute or start with '~/' "
            "(got 'vertex')",
        ),
        (
            "max_nodes: 4",
            "max_nodes: 4\n    job_secrets: {HF_TOKEN: {env: A, file: ~/a}}",
            "trainbot.yaml: clusters.a4.job_secrets.HF_TOKEN: give exactly one of env: NAME or "
            "file: PATH",
        ),
        (
            "max_nodes: 4",
            "max_nodes: 4\n    maxnodes: 3",
            "trainbot.yaml: clusters.a4.maxnodes: is not a known field; did you mean max_nodes?",
        ),
        (
            "port: 2222",
            "port: 99999",
            "trainbot.yaml: clusters.a4.login.port: must be <= 65535 (got 99999)",
        ),
        (
            "max_nodes: 4",
            "max_nodes: 4\ndefault_cluster: a5",
            "trainbot.yaml: default_cluster: 'a5' is not a cluster (known: a4)",
        ),
        (
            "max_nodes: 4",
            "max_nodes: 4\npolicy: {rules: [{users: ['*'], clusters: [a9]}]}",
            "trainbot.yaml: policy.rules[0].clusters: 'a9' is not a cluster (known: a4, or \"*\")",
        ),
        (
            "max_nodes: 4",
            "max_nodes: 4\npolicy: {rules: [{users: ['*'], max_nodes: 0}]}",
            "trainbot.yaml: policy.rules[0].max_nodes: must be >= 1 (got 0)",
        ),
        (
            "max_nodes: 4",
            "max_nodes: 4\nrecipes: [{workload: sft, model: x, framework: nemo}]",
            "trainbot.yaml: recipes[0]: a nemo recipe needs 'script' (and no 'job_script')",
        ),
        (
            "max_nodes: 4",
            "max_nodes: 4\nalerts: {oncall_channel: general}",
            "trainbot.yaml: alerts.oncall_channel: must match ^[CG][A-Z0-9]{2,}$ (got 'general')",
        ),
        (
            "max_nodes: 4",
            "max_nodes: 4\nalerts: {webhook: {url: x, routing_key: {file: ~/k}}}",
            "trainbot.yaml: alerts.webhook.url: must match",
        ),
        (
            "max_nodes: 4",
            "max_nodes: 4\n    identity: {users: {U1: Alice}}",
            "trainbot.yaml: clusters.a4.identity.users.U1: must match ^[a-z_]",
        ),
        (
            "max_nodes: 4",
            "max_nodes: 4\n    identity: {unmapped: maybe}",
            "trainbot.yaml: clusters.a4.identity.unmapped: must be one of 'refuse' or 'shared'",
        ),
        ("  a4:", "  A4:", "trainbot.yaml: clusters.A4: 'A4' is not a valid name"),
        ("clusters:", "clusters: {}\nx:", "trainbot.yaml: clusters: must not be empty"),
        ("type: hcc-a4", "type: [", "trainbot.yaml: line 6, column 5: not valid YAML"),
    ],
)
def test_errors_name_file_field_and_problem(old: str, new: str, message: str) -> None:
    text = BASE.replace(old, new, 1)
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="trainbot.yaml")
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "trainbot.yaml: clusters: is required"),
        ("- a\n- b\n", "trainbot.yaml: must be a mapping with clusters:"),
    ],
)
def test_whole_file_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="trainbot.yaml")
    assert str(caught.value).startswith(message)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "nope.yaml")
    assert str(caught.value).startswith(f"{tmp_path / 'nope.yaml'}: file not found")


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (
            '{approvers: [{groups: ["*"]}]}',
            'policy.approvers[0].groups: approvers must be named users or user groups, not "*"',
        ),
        (
            "{custom_images: [{users: [U1]}]}",
            "policy.custom_images[0]: name the dirs or the registries",
        ),
        (
            "{custom_images: [{users: [U1], dirs: [tmp]}]}",
            "policy.custom_images[0].dirs[0]: must be absolute or start with '~/'",
        ),
        (
            "{custom_images: [{users: [U1], dirs: [/opt/ok, ~/images]}]}",
            "policy.custom_images[0].dirs[1]: '~/images' is in the home of whoever launches, "
            "and on a4 (identity) each person launches as themselves and can write their own "
            "home; use an absolute directory only trainbot's admins can write",
        ),
        (
            "{custom_images: [{users: [U1], clusters: [a4], dirs: ['~']}]}",
            "policy.custom_images[0].dirs[0]: '~' is in the home of whoever launches",
        ),
        (
            "{log_viewers: [{groups: [S1], clusters: [a5]}]}",
            "policy.log_viewers[0].clusters: 'a5' is not a cluster (known: a4",
        ),
        ("{workspaces: [bad]}", "policy.workspaces[0]: must match"),
    ],
)
def test_access_rules_are_checked(policy: str, message: str) -> None:
    text = (
        "clusters:\n  a4: {type: hcc-a4, login: {host: h, user: u, user_ca_key_file: ca},"
        " partition: a4, max_nodes: 2, identity: {}}\n"
        "  a3m: {type: hcc-a3m, login: {host: h, user: u}, partition: a3m, max_nodes: 2}\n"
        f"policy: {policy}\n"
    )
    with pytest.raises(ConfigError) as raised:
        parse_config(text)
    assert message in str(raised.value)


def test_home_image_dirs_are_fine_where_everyone_runs_as_the_shared_account() -> None:
    """Without identity, ~ is the shared account's home: only who holds that account writes it."""
    text = (
        "clusters:\n  a3m: {type: hcc-a3m, login: {host: h, user: u}, partition: a3m,"
        " max_nodes: 2}\n"
        "policy: {custom_images: [{users: [U1], dirs: [~/images/reviewed]}]}\n"
    )
    (rule,) = parse_config(text).policy.custom_images
    assert rule.dirs == ("~/images/reviewed",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            BASE.replace("clusters:", "clustrs:"),
            "trainbot.yaml: clustrs: is not a known field; did you mean clusters?",
        ),
        (
            BASE.replace("port: 2222", "prot: 2222"),
            "trainbot.yaml: clusters.a4.login.prot: is not a known field; did you mean port?",
        ),
        (
            BASE + "policy: {rules: [{users: ['*'], max_node: 3}]}\n",
            "trainbot.yaml: policy.rules[0].max_node: is not a known field; "
            "did you mean max_nodes?",
        ),
        (BASE + "zzz: 1\n", "trainbot.yaml: zzz: is not a known field (trainbot.example"),
    ],
)
def test_a_misspelt_key_is_named_with_the_closest_known_one(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(text, source="trainbot.yaml")
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            BASE + "policy: {team_budgets: [{gpu_hours: 10}]}\n",
            "give one of group (a Slack user group id) or account (Slurm)",
        ),
        (
            BASE + "policy: {team_budgets: [{group: S0ML, gpu_hours: 10, clusters: [a9]}]}\n",
            "policy.team_budgets[0].clusters: 'a9' is not a cluster (known: a4",
        ),
        (
            BASE + "policy: {team_budgets: [{group: S0ML, gpu_hours: 10, window: day}]}\n",
            "policy.team_budgets[0].window",
        ),
        (
            BASE + "report: {channel: C0USAGE, cron: 'every monday'}\n",
            "not a crontab schedule",
        ),
        (BASE + "report: {channel: general}\n", "report.channel"),
    ],
)
def test_team_budget_and_report_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="trainbot.yaml")
    assert message in str(caught.value)


def test_only_the_roles_that_log_in_as_people_need_the_user_ca() -> None:
    """A cluster with identity: the worker and poller roles sign people's certificates
    and need its CA key; the web role asks them for cluster work and starts without it."""
    text = BASE.replace("max_nodes: 4", "max_nodes: 4\n    identity: {users: {U1: alice}}", 1)
    config = parse_config(text, source="trainbot.yaml")
    assert config.clusters["a4"].login.user_ca_key_file is None
    check_role_config(config, role_parts("web"))  # no error: the web role needs no CA
    for role in ("worker", "poller", "all"):
        with pytest.raises(ConfigError) as caught:
            check_role_config(config, role_parts(role))
        assert str(caught.value) == (
            "clusters.a4: identity needs login.user_ca_key_file (the CA key the bot signs each "
            "person's short-lived SSH certificate with) in the worker and poller roles; only "
            "--role web runs without it"
        )
