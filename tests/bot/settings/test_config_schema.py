"""The JSON Schema of trainbot.yaml (docs/reference/trainbot.schema.json, written by
scripts/gen-config-docs from the settings models): check-jsonschema accepts the configs
trainbot accepts, and refuses what trainbot refuses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bot.settings.config import load_config
from cluster.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "docs" / "reference" / "trainbot.schema.json"
EXAMPLE = ROOT / "trainbot.example.yaml"


def check_jsonschema(*files: Path) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).parent / "check-jsonschema"
    assert tool.exists(), "check-jsonschema is not installed: run scripts/bootstrap"
    return subprocess.run(
        [str(tool), "--schemafile", str(SCHEMA), *map(str, files)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_schema_is_a_valid_json_schema() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    tool = Path(sys.executable).parent / "check-jsonschema"
    proc = subprocess.run(
        [str(tool), "--check-metaschema", str(SCHEMA)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_example_and_the_dev_cluster_config_pass(tmp_path: Path) -> None:
    files = [EXAMPLE]
    for name in ("trainbot.yaml", "trainbot-bastion.yaml"):  # behind the bastion: login.jump
        dev = ROOT / ".devcluster" / name
        if dev.is_file():
            files.append(dev)
    proc = check_jsonschema(*files)
    assert proc.returncode == 0, proc.stdout + proc.stderr


BROKEN = [
    ("a key trainbot does not know", lambda c: c.update(clusterz={})),
    ("a port that is not a number", lambda c: c["clusters"]["a4"]["login"].update(port="ssh")),
    ("a channel name instead of its id", lambda c: c["report"].update(channel="#usage")),
    ("a cluster key of its own invention", lambda c: c["clusters"]["a4"].update(gpus=8)),
]


@pytest.mark.parametrize(("what", "breaks"), BROKEN, ids=[b[0] for b in BROKEN])
def test_what_trainbot_refuses_the_schema_refuses(tmp_path: Path, what: str, breaks) -> None:  # type: ignore[no-untyped-def]
    config = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    breaks(config)
    path = tmp_path / "trainbot.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(ConfigError):
        load_config(path)
    proc = check_jsonschema(path)
    assert proc.returncode == 1, f"{what}: {proc.stdout}"
    assert "Schema validation errors" in proc.stdout + proc.stderr


def test_a_stale_schema_is_caught(tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    for name in ("bot", "commands", "cluster", "scripts"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "docs" / "reference", copy / "docs" / "reference")
    schema = copy / "docs" / "reference" / "trainbot.schema.json"
    schema.write_text(schema.read_text().replace('"clusters"', '"clusterz"', 1))
    gen = copy / "scripts" / "gen-config-docs"
    proc = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "trainbot.schema.json is stale: run scripts/gen-config-docs" in proc.stderr
