"""Pages for on-call: which steps a configuration makes (Slack, PagerDuty, both, none),
what each says for a page and for its resolution, and that only the Slack page counts
as a post in the on-call channel."""

from __future__ import annotations

from typing import Any

from bot.lifecycle.launch import Attempt, Launch
from bot.notify.paging import Pager
from bot.settings.sections import Alerts
from bot.text.front import MessageRef
from commands.requests import TrainRequest

DATA = {
    "dedup_key": "trainbot/a4/L-7f3a/node_fail",
    "cause_key": "node_fail",
    "cause": "node dev1 failed (NODE_FAIL)",
    "action": "Retried without it as job 4192",
}
PERMALINK = "https://slack.example/archives/C0TRAIN/p1"


class Posts:
    """The one thing a pager asks of the front end: posts."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, str]] = []

    async def post(self, channel: str, text: str, **_: Any) -> MessageRef:
        self.posts.append((channel, text))
        return MessageRef(channel=channel, ts=str(len(self.posts)))


class Alarms:
    """A PagerDuty that records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def trigger(self, dedup_key: str, summary: str, **fields: Any) -> None:
        self.calls.append(("trigger", dedup_key, summary, fields))

    async def resolve(self, dedup_key: str) -> None:
        self.calls.append(("resolve", dedup_key))


def launch(job_id: str = "4187") -> Launch:
    request = TrainRequest(
        workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4", nodes=2
    )
    attempts = [Attempt(number=1, job_id=job_id)]
    return Launch(request=request, user_id="U0ALICE", channel="C0TRAIN", attempts=attempts)


def pager(alerts: Alerts, pagerduty: Alarms | None = None) -> tuple[Pager, Posts]:
    front = Posts()
    return Pager(front, alerts, pagerduty), front  # type: ignore[arg-type]


def test_the_steps_follow_the_configuration() -> None:
    channel = Alerts(oncall_channel="C0ONCALL", oncall_usergroup="S0ONCALL")
    assert list(pager(channel)[0].steps()) == ["slack"]
    assert list(pager(Alerts(), Alarms())[0].steps()) == ["pagerduty"]
    assert list(pager(channel, Alarms())[0].steps()) == ["pagerduty", "slack"]
    assert pager(Alerts())[0].steps() == {}


async def test_the_slack_page_mentions_on_call_and_its_resolution_mentions_no_one() -> None:
    paging, front = pager(Alerts(oncall_channel="C0ONCALL", oncall_usergroup="S0ONCALL"))
    stored = launch()
    await paging.post("oncall", stored, DATA, PERMALINK)
    await paging.post("resolve", stored, {"outcome": "recovered as job 4192"}, PERMALINK)
    (page_at, page), (resolved_at, resolved) = front.posts
    assert page_at == resolved_at == "C0ONCALL"
    assert page.startswith(f"<!subteam^S0ONCALL> job 4187 ({stored.id}: sft llama3p1_8b")
    assert "node dev1 failed (NODE_FAIL)." in page and "Retried without it as job 4192" in page
    assert PERMALINK in page
    assert resolved.startswith("✅ Resolved: job 4187") and "<!subteam" not in resolved
    assert "recovered as job 4192" in resolved
    assert paging.sent == 1  # a resolution is no page


async def test_without_an_oncall_channel_the_slack_step_posts_nothing() -> None:
    paging, front = pager(Alerts())
    await paging.post("oncall", launch(), DATA, PERMALINK)
    assert front.posts == [] and paging.sent == 0


async def test_pagerduty_is_triggered_and_resolved_under_the_same_dedup_key() -> None:
    alarms = Alarms()
    paging, front = pager(Alerts(), alarms)
    stored = launch()
    await paging.page("oncall", stored, DATA, PERMALINK)
    await paging.page("resolve", stored, {"dedup_key": DATA["dedup_key"]}, PERMALINK)
    (trigger, key, summary, fields), resolve = alarms.calls
    assert (trigger, key) == ("trigger", DATA["dedup_key"])
    assert summary == "a4 job 4187: node dev1 failed (NODE_FAIL)"
    assert fields == {
        "source": "trainbot/a4",
        "custom_details": {"launch": stored.id, "job": "4187", "user": "U0ALICE"},
        "links": [{"href": PERMALINK, "text": "Slack thread"}],
    }
    assert resolve == ("resolve", DATA["dedup_key"])
    assert front.posts == []


async def test_a_launch_without_a_job_or_a_thread_link_is_still_paged() -> None:
    alarms = Alarms()
    paging, _ = pager(Alerts(), alarms)
    stored = launch(job_id="")
    await paging.page("oncall", stored, DATA, "(no thread yet)")
    ((_, _, summary, fields),) = alarms.calls
    assert summary == f"a4 job {stored.id}: node dev1 failed (NODE_FAIL)"
    assert fields["links"] == []


# A page written since pages carry facts: bot.wording.pages words it, escaped for Slack
# and plain for PagerDuty (DATA above is an entry written before: posted as it holds it).
FACTS = {
    "dedup_key": "trainbot/a4/L-7f3a/job_held",
    "cause_key": "job_held",
    "facts": {"job": "4187", "words": "held by <an admin>", "code": "JobHeldAdmin"},
}


async def test_a_page_of_facts_is_worded_escaped_for_slack_and_plain_for_pagerduty() -> None:
    alarms = Alarms()
    paging, front = pager(Alerts(oncall_channel="C0ONCALL", oncall_usergroup="S0ONCALL"), alarms)
    stored = launch()
    await paging.post("oncall", stored, FACTS, PERMALINK)
    await paging.page("oncall", stored, FACTS, PERMALINK)
    ((_, page),) = front.posts
    assert page.startswith(f"<!subteam^S0ONCALL> job 4187 ({stored.id}: sft llama3p1_8b")
    assert (
        "on a4: job 4187 is held by &lt;an admin&gt; (Slurm: JobHeldAdmin). "
        "Release it (scontrol release) or cancel it."
    ) in page
    ((_, _, summary, _),) = alarms.calls
    assert summary == "a4 job 4187: job 4187 is held by <an admin> (Slurm: JobHeldAdmin)"
