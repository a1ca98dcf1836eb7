"""The ``trainbot`` command line. Subcommands per INTERFACE.md: the service's own
(serve, console, demo, doctor, token) and the API's (train, jobs, logs, cancel,
checkpoints, usage, clusters: bot.runtime.client)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from bot import __version__
from bot.runtime import client as api_cli
from bot.runtime import tokens_cli
from bot.runtime.assembly import ROLES
from bot.settings.config import Config, load_config
from bot.settings.env import Settings
from bot.settings.logs import configure_logging
from cluster.errors import ConfigError, TrainbotError

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainbot",
        description="Slack chat-ops for NeMo and NeMo-RL training on Slurm GPU clusters.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="run the bot: Slack front end (Socket Mode or HTTP) and the HTTP API, workers, "
        "status poller",
    )
    serve.add_argument("--config", metavar="PATH", help="config file (default: $TRAINBOT_CONFIG)")
    serve.add_argument(
        "--role",
        choices=ROLES,
        default="all",
        help="which part to run: web (Slack and the HTTP API /api/v1/; it holds no SSH key and "
        "asks the workers "
        "for cluster work), worker (the launch queue and that work), poller (cluster "
        "polling and message delivery), or all of them (default: %(default)s); every role "
        "serves /healthz and /metrics",
    )
    console = sub.add_parser("console", help="the same bot with a terminal chat instead of Slack")
    console.add_argument("--config", metavar="PATH", help="config file (default: $TRAINBOT_CONFIG)")
    console.add_argument(
        "--user", metavar="NAME", help="who you are in the chat (default: your login name)"
    )
    demo = sub.add_parser(
        "demo", help="bring up the local dev cluster and Redis, then run a /train in the console"
    )
    demo.add_argument(
        "--train",
        metavar="TEXT",
        help="what to /train (default: sft llama3p1_8b nodes=2 cluster=a4, or cluster=hpc "
        "with --bastion)",
    )
    demo.add_argument(
        "--bastion",
        action="store_true",
        help="use .devcluster/trainbot-bastion.yaml: the dev cluster as a generic Slurm GPU "
        "cluster (no type preset) whose login node only its bastion reaches",
    )
    doctor = sub.add_parser(
        "doctor",
        help="check config, Redis, SSH (and as each mapped person), partitions, images, "
        "recipes and directories",
    )
    doctor.add_argument("--config", metavar="PATH", help="config file (default: $TRAINBOT_CONFIG)")
    doctor.add_argument(
        "--known-hosts",
        action="store_true",
        help="print the host keys each cluster's login node and jump hosts show, as "
        "known_hosts lines to confirm (nothing else is checked)",
    )
    backup = sub.add_parser(
        "backup",
        help="copy every trainbot key of Redis (REDIS_URL, or the sentinels) to a file: "
        "launches, queue, budgets, charges, history (docs/upgrade.md)",
    )
    backup.add_argument("file", metavar="FILE", help="where to write it (.gz: compressed)")
    restore = sub.add_parser(
        "restore", help="put a backup's keys back into Redis (an empty one, unless --replace)"
    )
    restore.add_argument("file", metavar="FILE", help="a file written by `trainbot backup`")
    restore.add_argument(
        "--replace",
        action="store_true",
        help="overwrite the keys the backup holds when Redis already has trainbot keys",
    )
    tokens_cli.add_parsers(sub)
    api_cli.add_parsers(sub)
    return parser


def load(args: argparse.Namespace, settings: Settings) -> tuple[Settings, Config]:
    """The settings (with ``--config`` applied) and the config file they name."""
    if getattr(args, "config", None):
        settings = settings.model_copy(update={"config_path": Path(args.config)})
    return settings, load_config(settings.config_path)


def log_level(args: argparse.Namespace, settings: Settings) -> str:
    """``-v`` or TRAINBOT_LOG_LEVEL; else INFO for ``serve`` and WARNING where the
    terminal is the interface (console, demo, doctor)."""
    if args.verbose:
        return "DEBUG"
    if settings.log_level:
        return settings.log_level
    return "INFO" if args.command == "serve" else "WARNING"


async def run_backup(args: argparse.Namespace, settings: Settings) -> int:
    """``trainbot backup FILE`` / ``trainbot restore FILE [--replace]``."""
    from bot.store.backup import backup, restore

    target, path = settings.redis_target(), Path(args.file)
    if args.command == "backup":
        done = await backup(target, path)
        print(f"backup: {done.keys} keys from {target.describe()} "
              f"(Redis {done.redis_version}) written to {path}")  # fmt: skip
        return 0
    done = await restore(target, path, replace=args.replace)
    expired = f"; {done.skipped} had expired since the backup" if done.skipped else ""
    print(f"restore: {done.keys} keys put back into {target.describe()}{expired}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:  # noqa: C901 - one branch a command
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        settings = Settings.from_environ()
        configure_logging(log_level(args, settings), settings.log_format)
        if args.command in api_cli.API_COMMANDS:
            return api_cli.run_command(args, settings)
        if args.command == "demo":
            from bot.runtime.demo import run_demo

            return asyncio.run(run_demo(settings, args.train, bastion=args.bastion))
        if args.command in ("backup", "restore"):
            return asyncio.run(run_backup(args, settings))
        settings, config = load(args, settings)
        if args.command == "console":
            from bot.runtime.console_main import run_console

            return asyncio.run(run_console(settings, config, user=args.user or getpass.getuser()))
        if args.command == "doctor":
            from bot.runtime.doctor import run_doctor, run_known_hosts

            if args.known_hosts:
                return asyncio.run(run_known_hosts(config))
            return asyncio.run(run_doctor(settings, config))
        if args.command == "token":
            return asyncio.run(tokens_cli.run_token(args, settings, config, sys.stdout))
        if args.command == "serve":
            from bot.runtime.serve import run_serve

            return asyncio.run(run_serve(settings, config, role=args.role))
    except ConfigError as exc:
        print(f"trainbot: configuration error: {exc}", file=sys.stderr)
        return 2
    except api_cli.ClientError as exc:
        print(f"trainbot: {exc}", file=sys.stderr)
        return 2
    except TrainbotError as exc:
        print(f"trainbot: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
