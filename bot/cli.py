"""The ``trainbot`` command line. Subcommands per INTERFACE.md."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainbot",
        description="Slack chat-ops for NeMo and NeMo-RL training on Slurm GPU clusters.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="run the bot: Slack front end (Socket Mode or HTTP), workers, status poller",
    )
    serve.add_argument("--config", metavar="PATH", help="config file (default: $TRAINBOT_CONFIG)")
    console = sub.add_parser("console", help="the same bot with a terminal chat instead of Slack")
    console.add_argument("--config", metavar="PATH", help="config file (default: $TRAINBOT_CONFIG)")
    console.add_argument("--user", metavar="NAME", help="who you are in the chat (default: $USER)")
    sub.add_parser(
        "demo", help="bring up the local dev cluster and Redis, then run a /train in the console"
    )
    doctor = sub.add_parser("doctor", help="check config, Redis, SSH, partitions, images, recipes")
    doctor.add_argument("--config", metavar="PATH", help="config file (default: $TRAINBOT_CONFIG)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    print(f"trainbot {args.command}: not built yet", file=sys.stderr)
    return 3


if __name__ == "__main__":
    raise SystemExit(main())
