"""Personal API tokens: minted for one person, scoped, with an expiry, kept hashed.

A token is ``tbt_`` and 43 URL-safe characters (256 random bits). Redis keeps only its
sha256 (``keys.token``), so neither Redis nor a backup of it can give a token back: the
person sees it once, when it is made. The record says whose it is, what it may do
(``read``: list, logs, checkpoints, usage, clusters; ``launch``: also /train and cancel)
and until when; it stays in Redis a week past its expiry, so that a late request hears
"expired" rather than "unknown".
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.store import keys
from bot.store.base import Section, rides

TOKEN_PREFIX = "tbt_"
TOKEN_RE = re.compile(r"^tbt_[A-Za-z0-9_-]{43}$")
SCOPES = ("read", "launch")
DEFAULT_TTL_S = 30 * 86400
MAX_TTL_S = 365 * 86400
KEPT_AFTER_EXPIRY_S = 7 * 86400  # an expired token is still recognised (and said so) this long
USER_ID_RE = re.compile(r"^[UW][A-Z0-9]{2,20}$")  # a Slack user id
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class TokenRecord(BaseModel):
    """What Redis keeps about one token (never the token)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^T-[0-9a-f]{10}$")
    user_id: str = Field(pattern=USER_ID_RE.pattern)
    user_name: str = Field(default="", max_length=80)
    scopes: tuple[str, ...]
    created_at: float
    expires_at: float
    created_by: str = Field(default="", max_length=80)  # "app-home" or "operator"

    def expired(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) >= self.expires_at

    def allows(self, scope: str) -> bool:
        """``launch`` includes ``read``."""
        return scope in self.scopes or (scope == "read" and "launch" in self.scopes)


def digest(token: str) -> str:
    """The sha256 (hex) a token is kept under."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def parse_ttl(text: str) -> int:
    """``30d``, ``12h``, ``90m``, ``2w`` or plain seconds, as seconds; ValueError saying
    what would be right."""
    found = re.fullmatch(r"\s*(\d+)\s*([smhdw]?)\s*", text.lower())
    if found is None:
        raise ValueError(
            f"ttl {text!r} is not a duration; give a number with s, m, h, d or w (e.g. 30d)"
        )
    seconds = int(found.group(1)) * _UNITS[found.group(2) or "s"]
    if not 60 <= seconds <= MAX_TTL_S:
        raise ValueError(f"ttl {text!r} must be between 1 minute and {MAX_TTL_S // 86400} days")
    return seconds


def check_scopes(scopes: tuple[str, ...]) -> tuple[str, ...]:
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise ValueError(
            f"unknown scope {', '.join(unknown) or '(none)'}; known: {', '.join(SCOPES)}"
        )
    return tuple(s for s in SCOPES if s in scopes)


class Tokens(Section):
    """Minting, checking, listing and revoking personal API tokens."""

    @rides
    async def mint_token(
        self,
        user_id: str,
        *,
        user_name: str = "",
        scopes: tuple[str, ...] = SCOPES,
        ttl_s: int = DEFAULT_TTL_S,
        by: str = "",
    ) -> tuple[TokenRecord, str]:
        """A new token for ``user_id``: its record and the token itself (shown once)."""
        if not USER_ID_RE.match(user_id):
            raise ValueError(f"{user_id!r} is not a Slack user id (like U0123ABCD)")
        if not 60 <= ttl_s <= MAX_TTL_S:
            raise ValueError(f"a token lives between 1 minute and {MAX_TTL_S // 86400} days")
        now = time.time()
        record = TokenRecord(
            id="T-" + secrets.token_hex(5),
            user_id=user_id,
            user_name=user_name[:80],
            scopes=check_scopes(scopes),
            created_at=now,
            expires_at=now + ttl_s,
            created_by=by,
        )
        token = new_token()
        hashed = digest(token)
        kept_s = ttl_s + KEPT_AFTER_EXPIRY_S
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(keys.token(hashed), record.model_dump_json(), ex=kept_s)
            pipe.set(keys.token_id(record.id), hashed, ex=kept_s)
            pipe.sadd(keys.user_tokens(user_id), record.id)
            await pipe.execute()
        return record, token

    @rides
    async def token_record(self, token: str) -> TokenRecord | None:
        """The record of ``token`` (expired or not), or None when it is unknown, revoked,
        malformed, or its record does not read as one."""
        if not TOKEN_RE.match(token):
            return None
        raw = await self.redis.get(keys.token(digest(token)))
        if raw is None:
            return None
        try:  # whoever can write Redis could have written anything here
            return TokenRecord.model_validate_json(raw)
        except ValidationError:
            return None

    @rides
    async def revoke_token(self, token_id: str, *, user_id: str = "") -> TokenRecord | None:
        """Revoke the token ``token_id`` (only ``user_id``'s, when given); its record, or
        None when there is no such token (of theirs)."""
        hashed = await self.redis.get(keys.token_id(token_id))
        if hashed is None:
            return None
        raw = await self.redis.get(keys.token(str(hashed)))
        record = None
        if raw is not None:
            try:
                record = TokenRecord.model_validate_json(raw)
            except ValidationError:
                record = None
        if user_id and (record is None or record.user_id != user_id):
            return None  # not theirs, or not readable as theirs
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.token(str(hashed)), keys.token_id(token_id))
            if record is not None:
                pipe.srem(keys.user_tokens(record.user_id), token_id)
            await pipe.execute()
        return record

    @rides
    async def tokens_of(self, user_id: str) -> list[TokenRecord]:
        """A person's tokens (expired ones too, while they are kept), oldest first."""
        ids = sorted(str(i) for i in await self.redis.smembers(keys.user_tokens(user_id)))
        if not ids:
            return []
        hashes = await self.redis.mget([keys.token_id(i) for i in ids])
        found: list[TokenRecord] = []
        gone: list[str] = []
        for token_id, hashed in zip(ids, hashes, strict=True):
            raw = await self.redis.get(keys.token(str(hashed))) if hashed else None
            try:
                record = TokenRecord.model_validate_json(raw) if raw else None
            except ValidationError:
                record = None
            if record is None or record.user_id != user_id:
                gone.append(token_id)
            else:
                found.append(record)
        if gone:
            await self.redis.srem(keys.user_tokens(user_id), *gone)
        return sorted(found, key=lambda r: r.created_at)
