"""Pages for on-call: a message in the on-call channel mentioning the on-call
user group, and (when configured) a PagerDuty Events API v2 alert with the same
dedup key, resolved when the launch recovers."""

from __future__ import annotations

import logging
from typing import Any

from bot import alerts
from bot.config import Alerts
from bot.front import Front
from bot.launches import Launch

log = logging.getLogger(__name__)


class Pager:
    def __init__(
        self, front: Front, config: Alerts, pagerduty: alerts.PagerDuty | None = None
    ) -> None:
        self.front = front
        self.config = config
        self.pagerduty = pagerduty
        self.sent = 0

    async def trigger(self, launch: Launch, data: dict[str, Any], permalink: str) -> None:
        text = alerts.oncall_text(
            usergroup_id=self.config.oncall_usergroup or "",
            job_id=launch.job_id,
            launch_id=launch.id,
            title=launch.words,
            user_id=launch.user_id,
            cluster=launch.cluster,
            cause=str(data.get("cause", "")),
            action=str(data.get("action", "")),
            permalink=permalink,
        )
        if self.config.oncall_channel:
            await self.front.post(self.config.oncall_channel, text)
        if self.pagerduty is not None:
            await self.pagerduty.trigger(
                str(data["dedup_key"]),
                f"{launch.cluster} job {launch.job_id or launch.id}: {data.get('cause', '')}",
                source=f"trainbot/{launch.cluster}",
                custom_details={"launch": launch.id, "job": launch.job_id, "user": launch.user_id},
                links=[{"href": permalink, "text": "Slack thread"}]
                if permalink.startswith("http")
                else [],
            )
        self.sent += 1
        log.warning(
            "job=%s cluster=%s paged on-call: %s",
            launch.job_id,
            launch.cluster,
            data.get("cause_key"),
        )

    async def resolve(self, launch: Launch, data: dict[str, Any], permalink: str) -> None:
        text = alerts.resolved_text(
            job_id=launch.job_id,
            launch_id=launch.id,
            title=launch.words,
            cluster=launch.cluster,
            outcome=str(data.get("outcome", "")),
            permalink=permalink,
        )
        if self.config.oncall_channel:
            await self.front.post(self.config.oncall_channel, text)
        if self.pagerduty is not None:
            await self.pagerduty.resolve(str(data["dedup_key"]))
