"""The stand-in workspace and app: its ids, tokens, signing secret and the bot's scopes
(made-up values that only the stand-in accepts), and the key the bot's processes sign
their asks with in tests and benchmarks (drawn afresh by each run)."""

import secrets

ASK_KEY = secrets.token_hex(32)  # TRAINBOT_ASK_KEY: every process a run starts shares it
BOT_TOKEN = "xoxb-standin-bot-token"
APP_TOKEN = "xapp-standin-app-token"
SIGNING_SECRET = "standin-signing-secret"
TEAM_ID = "T0STANDIN"
BOT_USER_ID = "U0TRAINBOT"
APP_ID = "A0TRAINBOT"
BOT_SCOPES = (
    "commands",
    "chat:write",
    "files:write",
    "im:write",
    "usergroups:read",
    "users:read",
    "users:read.email",
)
