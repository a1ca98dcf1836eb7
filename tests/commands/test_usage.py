"""/usage: who (me, @person, team=, cluster=), which window, and csv=; bad input named."""

from __future__ import annotations

import pytest

from commands import CommandError
from commands.help import help_text
from commands.requests import REQUEST_ADAPTER, UsageRequest

ACCEPTED = [
    ("/usage", UsageRequest(target="U0ALICE")),
    ("/usage me", UsageRequest(target="U0ALICE")),
    ("/usage me month", UsageRequest(target="U0ALICE", window="month")),
    ("/usage <@U0BOB|bob> week", UsageRequest(target="U0BOB")),
    ("/usage @bob days=30", UsageRequest(target="bob", window="days", days=30)),
    ("/usage @Alice", UsageRequest(target="U0ALICE")),  # one's own name: one's own id
    ("/usage team=S0ML month", UsageRequest(scope="team", target="S0ML", window="month")),
    ("/usage team=<!subteam^S0ML|ml>", UsageRequest(scope="team", target="S0ML")),
    ("/usage cluster=A4 csv=true", UsageRequest(scope="cluster", target="a4", csv=True)),
    ("/usage MONTH csv=false", UsageRequest(target="U0ALICE", window="month")),
]

REJECTED = [
    ("/usage yesterday", "Unexpected 'yesterday'. Usage: /usage [me|@person|team=<group>"),
    ("/usage week month", "Give one window: week, month or days=N."),
    ("/usage month days=3", "Give one window: week, month or days=N."),
    ("/usage days=0", "days=0 is out of range"),
    ("/usage @bob team=S0ML", "Give one of me, @person, team=<group> or cluster=C."),
    ("/usage team=S0ML cluster=a4", "Give one of me, @person, team=<group> or cluster=C."),
    ("/usage team=ml-people", "team='ml-people' is not a Slack user group: give its id"),
    ("/usage cluster=zz", "zz"),
    ("/usage csv=yes", "csv='yes': give csv=true or csv=false."),
    ("/usage since=monday", "Unknown key 'since' for /usage."),
]


@pytest.mark.parametrize(("line", "expected"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted(parse, line: str, expected: UsageRequest) -> None:  # type: ignore[no-untyped-def]
    request = parse(line)
    assert request == expected
    assert parse(request.to_text()) == request  # the canonical text parses back the same
    assert REQUEST_ADAPTER.validate_json(request.model_dump_json()) == request


@pytest.mark.parametrize(("line", "message"), REJECTED, ids=[r[0] for r in REJECTED])
def test_rejected(parse, line: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError) as caught:
        parse(line)
    assert message in str(caught.value)


def test_help_lists_usage(context) -> None:  # type: ignore[no-untyped-def]
    assert "`/usage [me|@person|team=<group>|cluster=C] [week|month|days=N] [csv=true]`" in (
        help_text(context)
    )
    assert "Team leads see their team" in help_text(context, "usage")
