"""The entry point of the command language: command name and text in, request out."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError

from commands.context import CommandContext, User
from commands.errors import CommandError
from commands.images import parse_images
from commands.job_commands import (
    parse_attach,
    parse_cancel,
    parse_checkpoints,
    parse_clusters,
    parse_jobs,
    parse_logs,
    parse_unwatch,
    parse_watch,
)
from commands.parse import Args, normalise, parse_args
from commands.registry import COMMAND_NAMES
from commands.requests import Request
from commands.suggest import did_you_mean, join_names, quote
from commands.train import parse_train
from commands.usage import parse_usage

Parser = Callable[[Args, User, CommandContext], Request]

_PARSERS: dict[str, Parser] = {
    "/train": parse_train,
    "/attach": parse_attach,
    "/jobs": parse_jobs,
    "/cancel": parse_cancel,
    "/logs": parse_logs,
    "/clusters": parse_clusters,
    "/usage": parse_usage,
    "/watch": parse_watch,
    "/unwatch": parse_unwatch,
    "/checkpoints": parse_checkpoints,
    "/images": parse_images,
}
# One parser for each command of the registry, in its order (a KeyError here at import: a
# command listed without a parser; the test of the registry catches a parser not listed).
COMMANDS: dict[str, Parser] = {name: _PARSERS[name] for name in COMMAND_NAMES}


def parse_command(command: str, text: str, *, user: User, context: CommandContext) -> Request:
    """Parse a slash command (``/train``, ``/logs``, ...) and its text.

    Returns a request model or raises :class:`CommandError` whose text tells
    the user what was wrong and what is valid. Nothing else escapes.
    """
    name = normalise(command).strip().lower()
    if name and not name.startswith("/"):
        name = "/" + name
    parser = COMMANDS.get(name)
    if parser is None:
        raise CommandError(
            f"Unknown command {quote(name or command)}. Commands: {join_names(list(COMMANDS))}."
            f"{did_you_mean(name, list(COMMANDS))}"
        )
    args = parse_args(text)
    try:
        return parser(args, user, context)
    except ValidationError as exc:  # a model refused what the checks let through
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or name
        raise CommandError(f"{where}: {first['msg']}. See /train help.") from None
