"""What Slack saw in the soak: the Web API stand-in that keeps every posted message and
every update, and each launch's parent, thread and on-call pages read from that record."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bench import soak_slurm
from bench.soak_thread import LAUNCH_RE, PAGE_PREFIX, Plan, View, unmentioned
from support.slack_standin import SlackStandin

CHANNEL, ONCALL, USER = "C0TRAIN", "C0ONCALL", "U0ALICE"
CANCEL_ACTION = "trainbot_cancel"


@dataclass
class Msg:
    ts: str
    channel: str
    thread_ts: str
    text: str
    raw: str


class RecordingStandin(SlackStandin):
    """The Web API stand-in, also keeping each posted message's ts and every update."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.messages: list[Msg] = []
        self.updates: dict[str, list[str]] = {}
        self.parents: dict[str, str] = {}  # launch id -> its parent message's ts

    def _m_chat_postMessage(self, p: dict[str, Any]) -> dict[str, Any]:
        answer = super()._m_chat_postMessage(p)
        raw = json.dumps(p, default=str, ensure_ascii=False)
        channel, thread_ts = str(p.get("channel", "")), str(p.get("thread_ts") or "")
        self.messages.append(Msg(answer["ts"], channel, thread_ts, str(p.get("text", "")), raw))
        return answer

    def _m_chat_update(self, p: dict[str, Any]) -> dict[str, Any]:
        self.updates.setdefault(str(p.get("ts", "")), []).append(str(p.get("text", "")))
        return super()._m_chat_update(p)

    def launch_id_tagged(self, tag: str) -> str:
        """The launch id in the first parent message naming the tag, or ""."""
        for msg in self.messages:
            if msg.channel == CHANNEL and not msg.thread_ts and f"`{tag}`" in msg.raw:
                if match := LAUNCH_RE.search(msg.raw):
                    return match.group(0)
        return ""

    def parent_of(self, plan: Plan) -> str:
        if plan.launch_id and plan.launch_id not in self.parents:
            for msg in self.messages:
                if (
                    msg.channel == CHANNEL
                    and not msg.thread_ts
                    and f"`{plan.launch_id}`" in msg.raw
                ):
                    self.parents[plan.launch_id] = msg.ts
                    break
        return self.parents.get(plan.launch_id, "")

    def view(
        self, plan: Plan, jobs: list[soak_slurm.JobRow], incarnations: list[soak_slurm.JobRow]
    ) -> View:
        ts = self.parent_of(plan)
        first = [m.text for m in self.messages if m.ts == ts] if ts else []
        thread = [unmentioned(m.text) for m in self.messages if ts and m.thread_ts == ts]
        pages = [
            m.text
            for m in self.messages
            if m.channel == ONCALL
            and m.text.startswith(PAGE_PREFIX)
            and plan.launch_id
            and plan.launch_id in m.text
        ]
        parent_texts = first + self.updates.get(ts, [])
        return View(plan, parent_texts, thread, pages, jobs, incarnations)

    def final(self, plan: Plan) -> bool:
        return not plan.launch_id or self.view(plan, [], []).final

    def thread(self, plan: Plan) -> list[str]:
        return self.view(plan, [], []).thread
