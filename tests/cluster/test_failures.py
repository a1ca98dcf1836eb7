"""The failure catalog's site entries (``failures:`` in the config): checked at start-up
with a message naming the entry and what would be right; applied over the built-in
catalog (shipped as package data); their reactions and caps in the retry decision."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from bot.settings.config import parse_config
from cluster.errors import ConfigError
from cluster.watching.diagnosis import CATALOG, Diagnosis, RetryDecision, retry_decision
from cluster.watching.failures import (
    CATALOG_FILE,
    FailureRule,
    Reaction,
    build_catalog,
    builtin_rules,
)

ROOT = Path(__file__).resolve().parents[2]
BASE = """
clusters:
  a4: {type: hcc-a4, login: {host: login.example, user: trainer}, partition: a4, max_nodes: 4}
"""


def load(failures: str) -> tuple[str, ...]:
    config = parse_config(BASE + f"failures: {failures}\n", source="trainbot.yaml")
    return tuple(kind.key for kind in config.failure_catalog)


@pytest.mark.parametrize(
    ("failures", "message"),
    [
        ("[{key: gpu_oom, reaction: retyr}]",
         "trainbot.yaml: failures[0].reaction: must be one of 'retry', 'retry_with_fix', "
         "'retry_resume', 'retry_if_progress', 'retry_without_node', 'tell_user' or 'page' "
         "(got 'retyr')"),
        ("[{key: gpu_oom, max_retries: -1}]",
         "trainbot.yaml: failures[0].max_retries: must be >= 0 (got -1)"),
        ("[{key: gpu_oom, max_retries: 50}]",
         "trainbot.yaml: failures[0].max_retries: must be <= 20 (got 50)"),
        ("[{key: gpu_oom}, {key: mine, cause: x, reaction: page, patterns: ['ok', 'CUDA (']}]",
         "trainbot.yaml: failures[1]: entry 'mine': patterns[1]: 'CUDA (' is not a valid "
         "regular expression (missing ), unterminated subpattern at position 5); write a "
         "Python regular expression"),
        ("[{key: mine, cause: x, reaction: page, states: [FAILD]}]",
         "trainbot.yaml: failures[0]: entry 'mine': states[0]: 'FAILD' is not a Slurm state "
         "(known: PENDING,"),
        ("[{key: mine, cause: x, reaction: page, xids: [0]}]",
         "trainbot.yaml: failures[0].xids[0]: must be >= 1 (got 0)"),
        ("[{key: mine, cause: x, reaction: page, exit_codes: [300]}]",
         "trainbot.yaml: failures[0].exit_codes[0]: must be <= 255 (got 300)"),
        ("[{key: mine, patterns: [x]}]",
         "trainbot.yaml: failures[0]: 'mine' is not a built-in entry (built in: xid_hardware, "),
        ("[{key: mine, cause: x, reaction: page}]",
         "so it is a new one and needs cause:, reaction: and at least one of patterns:, xids:, "
         "exit_codes: or states:"),
        ("[{key: gpu_oom, page: always}]",
         "trainbot.yaml: failures[0].page: must be one of 'never', 'first' or 'repeat' "
         "(got 'always')"),
        ("[{key: gpu_oom, reaction: retry}, {key: gpu_oom, max_retries: 1}]",
         "trainbot.yaml: failures[1]: 'gpu_oom' is given twice; merge the two entries"),
        ("[{key: gpu_oom, patern: x}]",
         "trainbot.yaml: failures[0].patern: is not a known field; did you mean patterns?"),
        ("[{key: mine, cause: 'x.', reaction: page, patterns: [x]}]",
         "cause: end it without a full stop (got 'x.')"),
        ("[{key: cancelled, reaction: retry}]",
         "trainbot.yaml: failures[0]: 'cancelled' cannot be changed here: a cancelled job is "
         "never retried"),
        ("[{key: silent_hang, reaction: retry}]",
         "failures[0]: 'silent_hang' cannot be changed here: the progress watcher finds it; "
         "set watch.hang_min_s and watch.hang_step_factor instead"),
    ],
)  # fmt: skip
def test_bad_site_rules_stop_the_start_with_a_clear_message(failures: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(failures)
    assert message in str(caught.value)


def test_site_entries_change_and_add() -> None:
    keys = load(
        "[{key: gpu_oom, reaction: retry, max_retries: 1},"
        " {key: lustre, cause: the node lost its Lustre mount, reaction: retry_without_node,"
        "  patterns: ['Lustre: .*evicted'], names_node: true, page: first},"
        " {key: killed, cause: the job was killed by signal 9, reaction: tell_user,"
        "  exit_codes: [137]}]"
    )
    assert keys[:2] == ("lustre", "killed")  # new entries first, then the built-in ones
    assert keys[2:] == tuple(kind.key for kind in CATALOG)
    catalog = build_catalog([FailureRule(key="gpu_oom", reaction=Reaction.RETRY, max_retries=1)])
    oom = next(kind for kind in catalog if kind.key == "gpu_oom")
    builtin = next(kind for kind in CATALOG if kind.key == "gpu_oom")
    assert (oom.reaction, oom.max_retries) == (Reaction.RETRY, 1)
    assert oom.patterns == builtin.patterns and oom.hint == builtin.hint  # the rest kept
    assert builtin.reaction is Reaction.TELL_USER  # the built-in catalog is unchanged
    assert load("[]") == tuple(kind.key for kind in CATALOG)


def decide(
    kind_key: str, previous: tuple[str, ...] = (), failed_node: str | None = None, attempt: int = 1
) -> RetryDecision:
    kind = next(k for k in CATALOG if k.key == kind_key)
    return decide_on(Diagnosis(kind, ("x",), failed_node=failed_node), previous, attempt)


def decide_on(found: Diagnosis, previous: tuple[str, ...] = (), attempt: int = 0) -> RetryDecision:
    """The retry decision for ``found`` after the attempts that ended ``previous`` (its
    attempt number: one after them, unless given), with a newer checkpoint saved."""
    return retry_decision(
        found, attempt=attempt or 1 + len(previous), max_attempts=3, previous_keys=previous,
        newer_checkpoint=True,
    )  # fmt: skip


def test_xid_hardware_retries_without_the_node_and_pages() -> None:
    decision = decide("xid_hardware", failed_node="dev2")
    assert decision.retry and decision.resume and decision.page
    assert decision.exclude_node == "dev2"
    assert "Retrying from the newest checkpoint without dev2" in decision.reason


def test_a_cause_is_retried_no_more_than_its_cap() -> None:
    first = decide("ray_actor_died")
    assert first.retry and not first.page
    again = decide("ray_actor_died", previous=("ray_actor_died",), attempt=2)
    assert not again.retry and again.page
    assert again.reason == ("Not retrying: this cause is retried at most once per launch.")


@pytest.mark.parametrize(
    "key", ["nccl_config", "cuda_illegal_memory", "import_error", "vllm_kv_cache", "nan_loss"]
)
def test_configuration_and_program_errors_are_told_not_retried(key: str) -> None:
    decision = decide(key)
    assert not decision.retry and not decision.page
    assert decision.reason.startswith("Not retrying: ")


def test_the_built_in_catalog_ships_as_package_data() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = pyproject["tool"]["setuptools"]["package-data"]["cluster.watching"]
    assert any(fnmatch(CATALOG_FILE, pattern) for pattern in data)
    assert (ROOT / "cluster" / "watching" / CATALOG_FILE).is_file()
    assert [rule.key for rule in builtin_rules()] == [kind.key for kind in CATALOG]
