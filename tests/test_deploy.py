"""deploy/: the Prometheus alert rules (against the metrics the code exports, and through
promtool), the systemd unit (systemd-analyze) and the Kubernetes manifests (the API's
schemas through kubernetes-validate; each role holds the secrets and files it needs, and
no others)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.runtime.metrics import Counts, Metrics
from bot.store.streams import Backlog

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "trainbot-alerts.yml"
UNIT = DEPLOY / "systemd" / "trainbot@.service"
KUBE = DEPLOY / "kubernetes"


def check_deploy(*files: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    return subprocess.run(
        [str(ROOT / "scripts" / "check-deploy"), *map(str, files)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


# -- alert rules ----------------------------------------------------------------


async def exported_names() -> set[str]:
    """Every sample name one bot's /metrics shows once each hook has fired."""

    async def backlog() -> Backlog:
        return Backlog(queue=1, queue_oldest=1.0, outbox=1, outbox_oldest=1.0)

    meters = Metrics(backlog, Counts(ssh_round_trips=lambda: {"a4": 1}))
    meters.add_dead_letters("queue", _zero)
    meters.observe_poll("a4", 0.1)
    meters.observe_ssh("a4", 0.1)
    meters.observe_slack_error("chat.postMessage", "not_in_channel")
    meters.observe_delivery("1-0")
    meters.observe_store_retry("connection", True)
    meters.launches.labels("COMPLETED", "none").inc()
    meters.retries.labels("manual").inc()
    meters.pages.labels("none").inc()
    text = await meters.expose()
    return {line.split("{")[0].split()[0] for line in text.splitlines() if line[:1].isalpha()}


async def _zero() -> int:
    return 0


async def test_every_metric_an_alert_reads_is_one_trainbot_exports() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    used = {name for expr in exprs for name in re.findall(r"\btrainbot_[a-z_]+", expr)}
    assert len(used) >= 10
    missing = used - await exported_names()
    assert not missing, f"alert rules read metrics trainbot does not export: {sorted(missing)}"


def test_alert_rules_pass_promtool_and_a_broken_rule_does_not(tmp_path: Path) -> None:
    result = check_deploy()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 12 rules found" in result.stdout  # promtool ran on them
    assert "Unit Testing:  trainbot-alerts.test.yml" in result.stdout
    broken = tmp_path / "rules.yml"
    broken.write_text(RULES.read_text().replace("for: 5m", "for: five minutes", 1))
    result = check_deploy(ROOT / "Dockerfile", ROOT / "docker-compose.yml", broken)
    assert result.returncode != 0
    assert "five minutes" in result.stdout + result.stderr


def test_every_alert_is_unit_tested_and_documented() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    names = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tests = (DEPLOY / "prometheus" / "trainbot-alerts.test.yml").read_text(encoding="utf-8")
    assert {name for name in names if f"alertname: {name}" not in tests} == set()
    page = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    assert {name for name in names if f"`{name}`" not in page} == set()


# -- systemd ------------------------------------------------------------------------


def unit_lines() -> list[tuple[str, str]]:
    lines = [line.strip() for line in UNIT.read_text(encoding="utf-8").splitlines()]
    return [
        (line.split("=", 1)[0], line.split("=", 1)[1])
        for line in lines
        if "=" in line and not line.startswith("#")
    ]


def test_the_systemd_unit_runs_one_role_and_reads_secrets_as_credentials() -> None:
    lines = unit_lines()
    assert ("ExecStart", "/opt/trainbot/bin/trainbot serve --role %i") in lines
    credentials = {value.split(":", 1)[0] for key, value in lines if key == "LoadCredential"}
    assert credentials == {
        "slack_bot_token", "slack_signing_secret", "slack_app_token", "redis_password",
        "trainbot_ask_key",
    }  # fmt: skip
    env = dict(value.split("=", 1) for key, value in lines if key == "Environment")
    for name in credentials:
        assert env[f"{name.upper()}_FILE"] == f"%d/{name}"
        assert name.upper() not in env  # a secret's value is never in the environment
    assert ("KillSignal", "SIGTERM") in lines and ("User", "trainbot") in lines


def test_a_broken_unit_fails_systemd_analyze(tmp_path: Path) -> None:
    broken = tmp_path / "trainbot@.service"
    broken.write_text(UNIT.read_text().replace("Restart=on-failure", "Restart=sometimes"))
    rules = ROOT / "deploy" / "prometheus" / "trainbot-alerts.yml"
    result = check_deploy(ROOT / "Dockerfile", ROOT / "docker-compose.yml", rules, broken)
    if "systemd-analyze not found" in result.stderr:
        pytest.skip("systemd-analyze is not installed")
    assert result.returncode != 0
    assert "sometimes" in result.stderr


# -- Kubernetes --------------------------------------------------------------------

ROLE_SECRETS = {
    "web": {
        "slack_bot_token",
        "slack_signing_secret",
        "slack_app_token",
        "redis_url",
        "redis_password_web",
        "trainbot_ask_key",
    },  # fmt: skip
    "worker": {"redis_url", "redis_password_worker", "trainbot_ask_key"},  # the web's asks
    "poller": {"slack_bot_token", "redis_url", "redis_password_poller"},
}


def documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((KUBE / name).read_text()) if doc]


def test_kustomization_lists_every_manifest_and_makes_the_config_map() -> None:
    kustomization = documents("kustomization.yaml")[0]
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in KUBE.glob("*.yaml") if p.name != "kustomization.yaml"
    )
    assert kustomization["configMapGenerator"][0]["files"] == ["trainbot.yaml"]


@pytest.mark.parametrize("role", sorted(ROLE_SECRETS))
def test_each_role_is_a_deployment_with_only_its_secrets(role: str) -> None:
    deployment = next(d for d in documents(f"{role}.yaml") if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"] == ["serve", "--role", role]
    assert pod["securityContext"]["runAsUser"] == 10001  # the image's user
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {item["name"]: item["value"] for item in container["env"]}
    files = {Path(path).name: path for name, path in env.items() if name.endswith("_FILE")}
    assert set(files) == ROLE_SECRETS[role]
    # Each role logs in to Redis as its own ACL user, with its own password.
    assert env["REDIS_USERNAME"] == role
    assert Path(env["REDIS_PASSWORD_FILE"]).name == f"redis_password_{role}"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    projected = {
        item["key"]
        for source in volumes["secrets"]["projected"]["sources"]
        for item in source["secret"]["items"]
    }
    assert projected == ROLE_SECRETS[role]
    for key, path in files.items():
        assert path == f"{mounts['secrets']}/{key}"
    example = yaml.safe_load((ROOT / "trainbot.example.yaml").read_text(encoding="utf-8"))
    wanted = {
        str(value)
        for cluster in example["clusters"].values()
        for name, value in cluster["login"].items()
        if name.endswith("_file") and value
    }
    if role == "web":  # no SSH key, no user CA: it asks the workers
        assert "ssh" not in volumes and "ssh-secret" not in volumes
        return
    assert {str(Path(path).parent) for path in wanted} == {mounts["ssh"]}
    assert volumes["ssh"]["emptyDir"]["medium"] == "Memory"
    init = pod["initContainers"][0]
    assert "chmod 600" in " ".join(init["command"])  # the CA key is trainbot's alone


def test_the_kubernetes_redis_has_one_acl_user_per_role_from_its_secret() -> None:
    """redis.yaml writes a `user` line per role (trainbot's keys only, no admin or
    dangerous commands, no pub/sub), each password read from the mounted Secret."""
    server = next(d for d in documents("redis.yaml") if d["kind"] == "StatefulSet")
    pod = server["spec"]["template"]["spec"]
    script = " ".join(pod["containers"][0]["command"])
    assert "for role in web worker poller" in script
    assert "~trainbot:* resetchannels +@all -@admin -@dangerous -@pubsub" in script
    assert "/run/secrets/redis/redis_password_$role" in script
    items = {i["key"] for v in pod["volumes"] if "secret" in v for i in v["secret"]["items"]}
    assert items == {"redis_password"} | {f"redis_password_{r}" for r in ROLE_SECRETS}


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("  replicas: 2", "  replica: 2", "'replica' was unexpected"),
        ("periodSeconds: 10", "periodSeconds: ten", "'ten' is not of type 'integer'"),
    ],
)
def test_a_broken_manifest_fails_the_kubernetes_schemas(
    tmp_path: Path, old: str, new: str, says: str
) -> None:
    broken = tmp_path / "kubernetes"
    shutil.copytree(KUBE, broken)
    worker = broken / "worker.yaml"
    assert old in worker.read_text()
    worker.write_text(worker.read_text().replace(old, new, 1))
    rest = (ROOT / "deploy" / "prometheus" / "trainbot-alerts.yml", UNIT, broken)
    result = check_deploy(ROOT / "Dockerfile", ROOT / "docker-compose.yml", *rest)
    assert result.returncode != 0
    assert says in result.stdout + result.stderr


def test_no_secret_value_is_written_in_the_deploy_files() -> None:
    for path in DEPLOY.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"xox[bpa]-|xapp-|BEGIN OPENSSH PRIVATE KEY", text), path
