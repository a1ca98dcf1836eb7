"""Pages for on-call: a message in the on-call channel mentioning the on-call
user group, and (when configured) a PagerDuty Events API v2 alert with the same
dedup key, resolved when the launch recovers.

The two are separate steps (:meth:`Pager.steps`): the notifier records each as
done on its own and retries only the one that failed, so PagerDuty is paged
while Slack is down, and a PagerDuty failure never posts the Slack page twice.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from bot.lifecycle.launch import Launch
from bot.notify import alerts
from bot.settings.sections import Alerts
from bot.text.front import Front
from bot.wording import pages

log = logging.getLogger(__name__)

Step = Callable[[str, Launch, dict[str, Any], str], Awaitable[None]]
PAGE_KINDS = ("oncall", "resolve")


def said_cause(data: dict[str, Any], *, plain: bool = False) -> str:
    """The page's cause: worded from its facts (mrkdwn, or ``plain`` for PagerDuty); an
    entry written before pages carried facts holds it worded already (escaped)."""
    facts = data.get("facts")
    if isinstance(facts, dict):
        return pages.cause(str(data.get("cause_key", "")), facts, plain=plain)
    return str(data.get("cause", ""))


def said_action(data: dict[str, Any]) -> str:
    facts = data.get("facts")
    if isinstance(facts, dict):
        return pages.action(str(data.get("cause_key", "")), facts)
    return str(data.get("action", ""))


class Pager:
    def __init__(
        self, front: Front, config: Alerts, pagerduty: alerts.PagerDuty | None = None
    ) -> None:
        self.front = front
        self.config = config
        self.pagerduty = pagerduty
        self.sent = 0

    def steps(self) -> dict[str, Step]:
        """The configured steps of a page or its resolution, by name:
        ``step(kind, launch, data, permalink)`` with ``kind`` "oncall" or "resolve"."""
        found: dict[str, Step] = {}
        if self.pagerduty is not None:
            found["pagerduty"] = self.page
        if self.config.oncall_channel:
            found["slack"] = self.post
        return found

    async def post(self, kind: str, launch: Launch, data: dict[str, Any], permalink: str) -> None:
        """The Slack step: the page (or its resolution) in the on-call channel."""
        channel = self.config.oncall_channel
        if not channel:
            return
        if kind == "oncall":
            text = alerts.oncall_text(
                usergroup_id=self.config.oncall_usergroup or "",
                job_id=launch.job_id,
                launch_id=launch.id,
                title=launch.words,
                user_id=launch.user_id,
                cluster=launch.cluster,
                cause=said_cause(data),
                action=said_action(data),
                permalink=permalink,
            )
        else:
            text = alerts.resolved_text(
                job_id=launch.job_id,
                launch_id=launch.id,
                title=launch.words,
                cluster=launch.cluster,
                outcome=str(data.get("outcome", "")),
                permalink=permalink,
            )
        await self.front.post(channel, text)
        if kind == "oncall":
            self.sent += 1
            log.warning(
                "job=%s cluster=%s paged on-call in Slack: %s",
                launch.job_id,
                launch.cluster,
                data.get("cause_key"),
            )

    async def page(self, kind: str, launch: Launch, data: dict[str, Any], permalink: str) -> None:
        """The PagerDuty step: trigger (or resolve) the alert of this launch and cause."""
        if self.pagerduty is None:
            return
        if kind != "oncall":
            await self.pagerduty.resolve(str(data["dedup_key"]))
            return
        await self.pagerduty.trigger(
            str(data["dedup_key"]),
            f"{launch.cluster} job {launch.job_id or launch.id}: {said_cause(data, plain=True)}",
            source=f"trainbot/{launch.cluster}",
            custom_details={"launch": launch.id, "job": launch.job_id, "user": launch.user_id},
            links=[{"href": permalink, "text": "Slack thread"}]
            if permalink.startswith("http")
            else [],
        )
        log.warning(
            "job=%s cluster=%s paged on-call in PagerDuty: %s",
            launch.job_id,
            launch.cluster,
            data.get("cause_key"),
        )
