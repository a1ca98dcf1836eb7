"""``trainbot token create|revoke``: operators mint a person's (or a service account's)
API token, or revoke one, where the bot's config and Redis are. The token is printed
once, on the last line; Redis keeps only its sha256."""

from __future__ import annotations

import argparse
import time
from typing import IO, Any

from bot.settings.config import Config
from bot.settings.env import Settings
from bot.store.store import Store
from bot.store.tokens import DEFAULT_TTL_S, SCOPES, check_scopes, parse_ttl
from cluster.errors import ConfigError


def add_parsers(sub: Any) -> None:
    token = sub.add_parser("token", help="mint or revoke a person's API token (operators)")
    verbs = token.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = verbs.add_parser("create", help="a new token; printed once, on the last line")
    create.add_argument("--user", required=True, metavar="ID", help="the Slack user id it acts as")
    create.add_argument("--ttl", default="30d", help="how long it lives (default: %(default)s)")
    create.add_argument(
        "--scope",
        action="append",
        choices=SCOPES,
        help="read (list, logs, usage) or launch (also /train and cancel); default: both",
    )
    create.add_argument("--name", default="", help="a name for the person or service account")
    revoke = verbs.add_parser("revoke", help="revoke a token by its id (T-...)")
    revoke.add_argument("token_id", metavar="TOKEN_ID")
    for parser in (create, revoke):
        parser.add_argument(
            "--config", metavar="PATH", help="config file (default: $TRAINBOT_CONFIG)"
        )


async def run_token(
    args: argparse.Namespace, settings: Settings, config: Config, out: IO[str]
) -> int:
    """Mint or revoke; the exit code."""
    async with Store.connect(settings.redis_target(), retention=config.retention.store()) as store:
        if args.verb == "revoke":
            record = await store.tokens.revoke_token(args.token_id)
            if record is None:
                print(f"trainbot: no token {args.token_id} (revoked already, or expired)", file=out)
                return 1
            print(f"Revoked {record.id} of {record.user_id}.", file=out)
            return 0
        try:
            ttl_s = parse_ttl(args.ttl) if args.ttl else DEFAULT_TTL_S
            scopes = check_scopes(tuple(args.scope or SCOPES))
            record, token = await store.tokens.mint_token(
                args.user, user_name=args.name, scopes=scopes, ttl_s=ttl_s, by="operator"
            )
        except ValueError as exc:
            raise ConfigError(str(exc), source="command line") from None
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(record.expires_at))
        print(
            f"Token {record.id} for {record.user_id} ({', '.join(record.scopes)}), valid until "
            f"{until}. It is shown only now; revoke it with: trainbot token revoke {record.id}",
            file=out,
        )
        print(token, file=out)
        return 0
