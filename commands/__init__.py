"""The command language: parsing, validation, policy and help. No I/O here.

``parse_command(command, text, user=, context=)`` turns a slash command into a
request model or raises :class:`CommandError` with the text to show.
"""

from __future__ import annotations

from commands.access import may_approve
from commands.context import CommandContext, User
from commands.dispatch import COMMANDS, parse_command
from commands.errors import CommandError
from commands.help import help_text, recipes_text
from commands.policy import (
    Decision,
    Policy,
    PolicyRule,
    Principals,
    decide,
    may_manage,
)
from commands.request_fields import JobRef
from commands.requests import (
    REQUEST_ADAPTER,
    AttachRequest,
    CancelRequest,
    ClustersRequest,
    HelpRequest,
    InteractiveRequest,
    JobsRequest,
    LogsRequest,
    RecipesRequest,
    Request,
    ShellRequest,
    TrainRequest,
    UnwatchRequest,
    WatchRequest,
)

__all__ = [
    "COMMANDS",
    "REQUEST_ADAPTER",
    "AttachRequest",
    "CancelRequest",
    "ClustersRequest",
    "CommandContext",
    "CommandError",
    "Decision",
    "HelpRequest",
    "InteractiveRequest",
    "ShellRequest",
    "JobRef",
    "JobsRequest",
    "LogsRequest",
    "Policy",
    "PolicyRule",
    "Principals",
    "RecipesRequest",
    "Request",
    "TrainRequest",
    "UnwatchRequest",
    "WatchRequest",
    "User",
    "decide",
    "help_text",
    "may_approve",
    "may_manage",
    "parse_command",
    "recipes_text",
]
