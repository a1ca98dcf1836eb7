"""The words of a refusal that names whom to ask (bot/wording/refusals.py): the admins and
on-call as Slack mentions, the reason escaped, and a thread line written before refusals
carried facts (its ``refusal`` already worded) said as it was."""

from __future__ import annotations

from bot.lifecycle.events import Event
from bot.wording import refusals, thread

ASK = {"users": ["U0ADMIN"], "groups": ["S0ADMINS"], "oncall": "S0ONCALL", "cluster": "a4"}
REASON = "You have no user on a4: trainbot runs each person's jobs there as their own Unix user."


def test_whom_names_admins_groups_and_oncall_as_mentions() -> None:
    assert (
        refusals.whom(ASK) == "<@U0ADMIN> or <!subteam^S0ADMINS> or on-call (<!subteam^S0ONCALL>)"
    )
    assert refusals.whom({"oncall": "S0ONCALL"}) == "on-call (<!subteam^S0ONCALL>)"
    assert refusals.whom({"users": ["*"], "groups": [], "oncall": ""}) == "a trainbot admin"


def test_no_user_escapes_the_reason_and_asks_to_add_under_the_clusters_identity_map() -> None:
    said = refusals.no_user({"reason": "a <b> & c.", "ask": ASK})
    assert said == (
        "a &lt;b&gt; &amp; c. Ask <@U0ADMIN> or <!subteam^S0ADMINS> or on-call "
        "(<!subteam^S0ONCALL>) to add you under clusters.a4.identity.users."
    )


def test_refused_without_ask_is_the_escaped_reason() -> None:
    assert refusals.refused({"reason": "not in <a4-users>."}) == "not in &lt;a4-users&gt;."


def test_a_line_written_before_refusals_carried_facts_says_its_worded_refusal() -> None:
    old = {"move": "move_refused", "job": "41", "left": "a4", "cluster": "a3u",
           "refusal": "x <@U0ADMIN> y"}  # fmt: skip
    assert thread.line(Event("thread", "L-1", data=old)) == (
        "🔀 Still pending on a4; a3u would start it now, but it was not moved there: x <@U0ADMIN> y"
    )


def test_thread_lines_word_the_refusals_facts() -> None:
    def says(move: str, **facts: object) -> str:
        return thread.line(Event("thread", "L-1", data={"move": move, **facts}))

    no_user = says("not_started", why="no_longer_allowed", owner="U1", reason=REASON, ask=ASK)
    assert no_user == (
        f"⛔ <@U1>: not started now that it is due: {REASON} Ask <@U0ADMIN> or "
        "<!subteam^S0ADMINS> or on-call (<!subteam^S0ONCALL>) to add you under "
        "clusters.a4.identity.users. Nothing was submitted."
    )
    budget = says("not_started", why="over_budget", reason="the a4 budget is <spent>.")
    assert budget == "⛔ Not started now that it is due: the a4 budget is &lt;spent&gt;."
    moved = says("move_refused", job="41", left="a4", cluster="a3u", reason="not yours.")
    assert moved.endswith("it was not moved there: not yours.")
