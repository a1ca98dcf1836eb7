"""Fixtures for the command language: a four-cluster world like the dev cluster's."""

from __future__ import annotations

import pytest

from cluster.site.profiles import ClusterProfile
from commands import CommandContext, Policy, PolicyRule, Principals, Request, User
from tests.commands.lines import parse_line

CLUSTER_TYPES = {"a3m": "hcc-a3m", "a3u": "hcc-a3u", "a4": "hcc-a4", "a3h": "hcc-a3h"}


def build_profile(name: str, max_nodes: int = 4, **extra: object) -> ClusterProfile:
    return ClusterProfile.model_validate(
        {
            "name": name,
            "type": CLUSTER_TYPES.get(name, "hcc-a4"),
            "login": {"host": "127.0.0.1", "port": 2222, "user": "trainer"},
            "partition": name,
            "max_nodes": max_nodes,
            **extra,
        }
    )


def build_context(**overrides: object) -> CommandContext:
    clusters = {name: build_profile(name) for name in CLUSTER_TYPES}
    policy = Policy(
        admins=Principals(users=("U0ADMIN",)),
        rules=(
            PolicyRule(users=("U0SMALL",), clusters=("a4",), max_nodes=2),
            PolicyRule(users=("*",), max_nodes=4, max_concurrent=3),
        ),
    )
    fields: dict[str, object] = {"clusters": clusters, "policy": policy, **overrides}
    return CommandContext.model_validate(fields)


@pytest.fixture
def make_profile():  # type: ignore[no-untyped-def]
    return build_profile


@pytest.fixture
def make_context():  # type: ignore[no-untyped-def]
    return build_context


@pytest.fixture
def context() -> CommandContext:
    return build_context()


@pytest.fixture
def user() -> User:
    return User(id="U0ALICE", name="alice")


@pytest.fixture
def parse(context: CommandContext, user: User):  # type: ignore[no-untyped-def]
    def run(line: str, who: User = user) -> Request:
        return parse_line(line, user=who, context=context)

    return run
