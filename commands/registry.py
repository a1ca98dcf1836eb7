"""The slash commands trainbot answers, in one place: name, usage hint and one-line
description. The parsers (``commands.dispatch``), the Slack app's listeners
(``bot.slack.app``) and the mention hint are derived from this list, and
tests/test_manifest.py fails when slack-manifest.yml disagrees with it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SlashCommand:
    """One slash command as Slack shows it: ``usage_hint`` after the name while typing,
    ``description`` in the command picker."""

    name: str
    usage_hint: str
    description: str


SLASH_COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand(
        "/train",
        "sft llama3p1_8b nodes=2 cluster=a4 | interactive | help | recipes",
        "Launch a NeMo or NeMo-RL training run",
    ),
    SlashCommand("/attach", "<job>", "How to attach to your interactive job"),
    SlashCommand(
        "/jobs",
        "[all] [history [days=N]] [cluster=C] | watching",
        "Your active launches (all, history, cluster=C)",
    ),
    SlashCommand(
        "/cancel", "<job or sweep id>", "Cancel a launch or a whole sweep (asks to confirm)"
    ),
    SlashCommand(
        "/logs", "<job> [lines=N] | <job> plot", "The end of a launch's log, or its loss curve"
    ),
    SlashCommand("/clusters", "[cluster=C]", "Partitions, free GPUs and queues of each cluster"),
    SlashCommand(
        "/usage",
        "[me|@person|team=<group>|cluster=C] [week|month|days=N] [csv=true]",
        "GPU-hours (and cost) used, with a chart or a CSV file",
    ),
    SlashCommand("/watch", "<job>", "Follow a launch by DM (as your App Home settings say)"),
    SlashCommand("/unwatch", "<job>", "Stop following a launch"),
    SlashCommand("/checkpoints", "<job>", "A launch's checkpoints, with step and validation loss"),
    SlashCommand(
        "/images",
        "[fetch <framework> | import <docker-uri> as <name>] [cluster=C]",
        "Each cluster's container images; fetch the guide's prebuilt ones, import from a registry",
    ),
)

COMMAND_NAMES: tuple[str, ...] = tuple(c.name for c in SLASH_COMMANDS)
