"""from=: whose checkpoints a person may start from, and from_running=, as tables."""

from __future__ import annotations

import pytest

from commands import CommandContext, TrainRequest, User
from commands.access import may_start_from
from commands.errors import CommandError
from commands.policy import Policy, Principals
from commands.rules import StartFromRule
from tests.commands.lines import parse_line

POLICY = Policy(
    admins=Principals(users=("U0ADMIN",)),
    start_from=(StartFromRule(groups=("S0ML",), clusters=("a4",)),),
)

# who, groups, owner, cluster -> allowed, words in the reason
TABLE = [
    ("U0ALICE", (), "U0ALICE", "a4", True, "it is your launch"),
    ("U0BOB", (), "U0ALICE", "a4", False, "L-1 is alice's: only its owner may start from"),
    ("U0ADMIN", (), "U0ALICE", "a4", False, "policy.start_from names for a4"),  # not named
    ("U0BOB", ("S0ML",), "U0ALICE", "a4", True, "policy.start_from names you on a4"),
    ("U0BOB", ("S0ML",), "U0ALICE", "a3u", False, "only its owner"),  # another cluster
]


@pytest.mark.parametrize(("who", "groups", "owner", "cluster", "allowed", "words"), TABLE)
def test_from_is_the_owners_or_whom_policy_names(
    who: str, groups: tuple[str, ...], owner: str, cluster: str, allowed: bool, words: str
) -> None:
    decision = may_start_from(
        POLICY,
        user_id=who,
        group_ids=groups,
        owner_id=owner,
        owner_name="alice",
        launch_id="L-1",
        cluster=cluster,
    )
    assert decision.allowed is allowed
    assert words in decision.reason


def test_from_running_is_read_and_written_back(context: CommandContext, user: User) -> None:
    line = "/train sft llama3p1_8b cluster=a4 from=L-7f3a9c2b41 from_running=yes"
    request = parse_line(line, user=user, context=context)
    assert isinstance(request, TrainRequest) and request.from_running
    assert "from=L-7f3a9c2b41 from_running=yes" in request.to_text()
    plain = parse_line("/train sft llama3p1_8b cluster=a4 from=L-7f3a9c2b41", user=user,
                       context=context)  # fmt: skip
    assert isinstance(plain, TrainRequest) and not plain.from_running
    assert "from_running" not in plain.to_text()


@pytest.mark.parametrize(
    ("tail", "words"),
    [
        ("from_running=yes", "from_running= goes with from=: give from=<launch> from_running=yes"),
        ("from=L-7f3a9c2b41 from_running=maybe", "from_running='maybe' is not valid"),
    ],
)
def test_from_running_mistakes_say_what_is_right(
    context: CommandContext, user: User, tail: str, words: str
) -> None:
    with pytest.raises(CommandError) as caught:
        parse_line(f"/train sft llama3p1_8b cluster=a4 {tail}", user=user, context=context)
    assert words in str(caught.value)
