"""The console front end: the same conversation as Slack, as text in a terminal.

The parent line is printed again whenever it changes; thread lines are
indented below it; replies meant only for the asker are marked, errors in red
when the terminal supports colour.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import sys
from pathlib import Path
from typing import IO

from bot.text.front import Blocks, Handler, Incoming, MessageRef, Reply
from bot.text.mrkdwn import date_fallbacks, unescape

_MENTION_RE = re.compile(r"<@([A-Za-z0-9._-]+)>")
_GROUP_RE = re.compile(r"<!subteam\^([A-Za-z0-9]+)(?:\|[^>]*)?>")
_LINK_RE = re.compile(r"<([^|>]+)\|([^>]+)>")
_BOLD_RE = re.compile(r"(?<![\w*])\*([^*\n]+)\*(?![\w*])")


def plain(text: str) -> str:
    """Slack mrkdwn as terminal text: times in UTC, mentions and links shown, bold
    marks and entities undone."""
    text = date_fallbacks(text)  # <!date^...|2026-12-24 08:00 UTC>: the UTC text
    text = _MENTION_RE.sub(r"@\1", text)
    text = _GROUP_RE.sub(r"@\1", text)
    text = _LINK_RE.sub(r"\2 (\1)", text)
    text = _BOLD_RE.sub(r"\1", text)
    return unescape(text)


class ConsoleFront:
    """A ``Front`` that prints. Message refs are console-local counters."""

    def __init__(
        self,
        out: IO[str] | None = None,
        *,
        files_dir: Path | None = None,
        color: bool | None = None,
    ) -> None:
        self.out = out or sys.stdout
        self.files_dir = files_dir or Path("trainbot-files")
        self.color = self.out.isatty() if color is None else color
        self._ts = itertools.count(1)
        self._parents: dict[str, str] = {}  # ts -> last text printed
        self.lines: list[str] = []  # everything printed, for tests and the demo

    def _print(self, line: str) -> None:
        self.lines.append(line)
        print(line, file=self.out, flush=True)

    def _red(self, text: str) -> str:
        return f"\033[31m{text}\033[0m" if self.color else text

    async def post(
        self, channel: str, text: str, *, blocks: Blocks | None = None, thread_ts: str = ""
    ) -> MessageRef:
        ts = f"{next(self._ts)}.000000"
        if thread_ts:
            for index, line in enumerate(plain(text).splitlines() or [""]):
                self._print(("  └ " if index == 0 else "    ") + line)
        else:
            self._parents[ts] = text
            self._print_parent(text)
        return MessageRef(channel, ts)

    def _print_parent(self, text: str) -> None:
        lines = plain(text).splitlines() or [""]
        self._print(lines[0])
        for line in lines[1:]:
            self._print("  " + line)

    async def update(self, ref: MessageRef, text: str, *, blocks: Blocks | None = None) -> None:
        if self._parents.get(ref.ts) != text:
            self._parents[ref.ts] = text
            self._print_parent(text)

    async def post_ephemeral(
        self, channel: str, user: str, text: str, *, blocks: Blocks | None = None
    ) -> None:
        self._print(f"(only you) {plain(text)}")

    async def upload(
        self, channel: str, thread_ts: str, *, filename: str, content: bytes, title: str
    ) -> None:
        self.files_dir.mkdir(parents=True, exist_ok=True)
        path = self.files_dir / Path(filename).name
        path.write_bytes(content)
        self._print(f"  └ {title or filename}: saved to {path}")

    async def permalink(self, ref: MessageRef) -> str:
        return f"console:{ref.channel}/{ref.ts}"

    async def usergroup_members(self, usergroup_id: str) -> list[str]:
        return []

    async def user_email(self, user_id: str) -> str | None:
        return None  # the console has no profiles: config maps console names

    async def post_to_user(self, user: str, text: str) -> None:
        self._print(f"(to @{user}) {plain(text)}")

    async def can_post(self, channel: str) -> str:
        return ""  # the terminal is the only channel, and it is always there

    def echo(self, line: str) -> None:
        """Show what was typed (when it was not typed at this terminal)."""
        self._print(line)

    def show_reply_text(self, text: str) -> None:
        self._print(plain(text))

    def show_reply(self, reply: Reply) -> None:
        text = plain(reply.text)
        self._print(self._red(text) if reply.error else text)
        if reply.file_content:
            self.files_dir.mkdir(parents=True, exist_ok=True)
            path = self.files_dir / Path(reply.file_name or "reply.txt").name
            path.write_bytes(reply.file_content)
            self._print(f"(file saved to {path})")


async def read_lines(stream: IO[str] | None = None) -> asyncio.Queue[str | None]:
    """Lines typed on stdin, fed into a queue by a reader thread (None at end of input)."""
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    source = stream or sys.stdin

    def reader() -> None:
        for line in source:
            loop.call_soon_threadsafe(queue.put_nowait, line.rstrip("\n"))
        loop.call_soon_threadsafe(queue.put_nowait, None)

    loop.run_in_executor(None, reader)
    return queue


async def handle_line(
    line: str, handler: Handler, front: ConsoleFront, *, user: str, channel: str = "console"
) -> Reply | None:
    """One typed line: a slash command goes to the handler, its reply is shown and returned."""
    line = line.strip()
    if not line:
        return None
    if not line.startswith("/"):
        reply = Reply("Type a command such as /train help, /jobs, /clusters or /usage.", error=True)
    else:
        command, _, text = line.partition(" ")
        incoming = Incoming(
            user_id=user, user_name=user, channel_id=channel, command=command, text=text
        )
        reply = await handler(incoming)
    front.show_reply(reply)
    return reply
