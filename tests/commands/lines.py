"""Whole typed lines for the command tests: ``/train sft llama3p1_8b nodes=2``."""

from __future__ import annotations

from commands import CommandContext, Request, User, parse_command
from commands.parse import normalise


def parse_line(line: str, *, user: User, context: CommandContext) -> Request:
    """Split a line into command and text, as a front end does, and parse them."""
    command, text = ([*normalise(line).split(None, 1), "", ""])[:2]
    return parse_command(command, text, user=user, context=context)
