"""``trainbot demo`` finds the dev cluster's scripts in trainbot's checkout (they are
not part of the product) and says clearly when there is none."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bot.runtime.demo import DEV_CONFIG, ENSURE, bring_up, find_checkout
from cluster.errors import TrainbotError

PROJECT = Path(__file__).resolve().parents[3]


def fake_checkout(root: Path, script: str) -> Path:
    (root / "devcluster").mkdir(parents=True)
    (root / "devcluster" / "up").write_text("#!/bin/sh\nexit 0\n")
    ensure = root / ENSURE
    ensure.parent.mkdir(parents=True)
    ensure.write_text("#!/bin/sh\n" + script)
    ensure.chmod(ensure.stat().st_mode | stat.S_IXUSR)
    return root


def test_the_checkout_beside_the_package_is_found() -> None:
    assert find_checkout() == PROJECT
    assert os.access(PROJECT / ENSURE, os.X_OK)


def test_without_a_checkout_the_demo_says_what_it_needs(tmp_path: Path) -> None:
    with pytest.raises(TrainbotError) as err:
        find_checkout(tmp_path / "site-packages", tmp_path)
    message = str(err.value)
    assert "needs a checkout of trainbot's repository" in message
    assert str(tmp_path) in message and "scripts/demo" in message


def test_the_first_place_with_the_scripts_wins(tmp_path: Path) -> None:
    checkout = fake_checkout(tmp_path / "checkout", "exit 0\n")
    assert find_checkout(tmp_path / "site-packages", checkout) == checkout


def test_bring_up_runs_the_checkouts_script_and_returns_its_config(tmp_path: Path) -> None:
    script = f"mkdir -p .devcluster && touch {DEV_CONFIG} marker-$(basename $0)\n"
    checkout = fake_checkout(tmp_path / "checkout", 'cd "$(dirname "$0")/.."\n' + script)
    assert bring_up(checkout) == checkout / DEV_CONFIG
    assert (checkout / "marker-devcluster-ensure").exists()


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("exit 3\n", "scripts/devcluster-ensure failed (exit 3)"),
        ("exit 0\n", "trainbot.yaml is missing after scripts/devcluster-ensure"),
    ],
)
def test_bring_up_failures_are_explained(tmp_path: Path, script: str, message: str) -> None:
    with pytest.raises(TrainbotError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bring_up(fake_checkout(tmp_path / "checkout", script))
