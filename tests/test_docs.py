"""The documentation: the site builds with ``mkdocs build --strict``, the configuration
reference matches the models it is generated from, and README stays a front page."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "scripts" / "gen-config-docs"


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", **env},
    )


def test_the_configuration_reference_is_current() -> None:
    proc = run([sys.executable, str(GEN), "--check"])
    assert proc.returncode == 0, proc.stderr


def test_a_stale_configuration_reference_is_caught(tmp_path: Path) -> None:
    """A copy of the checkout whose page lacks a key: --check fails and says what to run."""
    copy = tmp_path / "checkout"
    for name in ("bot", "commands", "cluster", "scripts"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    page = copy / "docs" / "reference" / "configuration.md"
    page.parent.mkdir(parents=True)
    text = (ROOT / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    page.write_text(text.replace("| `dead_letter_retry_max_s` |", "| `gone` |"), encoding="utf-8")
    proc = run([sys.executable, str(copy / "scripts" / "gen-config-docs"), "--check"])
    assert proc.returncode == 1
    assert "configuration.md is stale: run scripts/gen-config-docs" in proc.stderr


def test_every_config_key_is_in_the_reference() -> None:
    from bot.settings.config import Config
    from bot.settings.sections import Delivery, Watch
    from cluster.site.login import Identity, LoginNode
    from cluster.site.profiles import ClusterProfile

    text = (ROOT / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    for model in (Config, Watch, Delivery, ClusterProfile, LoginNode, Identity):
        for name, field in model.model_fields.items():
            assert f"| `{field.alias or name}` |" in text, (model.__name__, name)


def test_every_config_key_has_a_description_from_its_model() -> None:
    """One source: each key's meaning is the docstring under it in its model, which the
    reference and the JSON Schema both show."""
    from pydantic import BaseModel

    from bot.settings.config import Config

    def models(tp: object) -> list[type[BaseModel]]:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return [tp]
        return [m for arg in getattr(tp, "__args__", ()) for m in models(arg)]

    seen: set[type[BaseModel]] = set()
    todo: list[type[BaseModel]] = [Config]
    missing = []
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            if not (field.description or "").strip():
                missing.append(f"{model.__module__}.{model.__name__}.{name}")
            todo.extend(models(field.annotation))
    assert len(seen) >= 25
    assert not missing, f"keys without a docstring under them in their model: {missing}"


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    proc = run([str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "reference" / "configuration" / "index.html").is_file()


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    (docs / "index.md").write_text("# x\n\n[gone](no-such-page.md)\n", encoding="utf-8")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    mkdocs = Path(sys.executable).parent / "mkdocs"
    proc = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode != 0
    assert "no-such-page.md" in proc.stdout + proc.stderr


def test_the_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 150
    for page in ("docs/index.md", "docs/configuration.md", "docs/security.md"):
        assert f"]({page})" in readme and (ROOT / page).is_file()
