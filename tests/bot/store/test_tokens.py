"""Personal API tokens in Redis: only their hash is kept; expiry, revocation and scopes."""

from __future__ import annotations

import time

import pytest

from bot.store import keys
from bot.store.store import Store
from bot.store.tokens import TokenRecord, digest, parse_ttl


async def test_redis_keeps_the_hash_never_the_token(store: Store) -> None:
    record, token = await store.tokens.mint_token("U0ALICE", scopes=("read",), ttl_s=3600)
    assert token.startswith("tbt_") and len(token) == 47
    everything = []
    async for key in store.redis.scan_iter("*"):
        everything.append(key)
        kind = await store.redis.type(key)
        if kind == "string":
            everything.append(await store.redis.get(key))
        elif kind == "set":
            everything.extend(await store.redis.smembers(key))
    assert not any(token in str(item) or token[4:] in str(item) for item in everything)
    assert keys.token(digest(token)) in everything
    found = await store.tokens.token_record(token)
    assert found == record and found.allows("read") and not found.allows("launch")
    assert 3590 < record.expires_at - time.time() <= 3600


async def test_expiry_revocation_and_scopes(store: Store) -> None:
    record, token = await store.tokens.mint_token("U0ALICE", ttl_s=120)
    assert record.scopes == ("read", "launch") and record.allows("read")
    assert not record.expired() and record.expired(record.created_at + 120)
    assert await store.tokens.token_record(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert await store.tokens.token_record("not-a-token") is None
    assert [r.id for r in await store.tokens.tokens_of("U0ALICE")] == [record.id]
    assert (
        await store.tokens.revoke_token(record.id, user_id="U0BOB") is None
    )  # not Bob's to revoke
    assert await store.tokens.token_record(token) == record
    assert await store.tokens.revoke_token(record.id, user_id="U0ALICE") == record
    assert await store.tokens.token_record(token) is None
    assert await store.tokens.tokens_of("U0ALICE") == []
    assert await store.tokens.revoke_token(record.id) is None


async def test_a_record_that_does_not_read_as_one_is_no_token(store: Store) -> None:
    record, token = await store.tokens.mint_token("U0ALICE", ttl_s=600)
    await store.redis.set(keys.token(digest(token)), '{"id": "T-0", "user_id": "alice"}')
    assert await store.tokens.token_record(token) is None
    assert await store.tokens.revoke_token(record.id, user_id="U0BOB") is None  # not shown as hers
    assert await store.redis.exists(keys.token(digest(token)))  # so only an operator revokes it
    await store.tokens.revoke_token(record.id)
    assert not await store.redis.exists(keys.token(digest(token)), keys.token_id(record.id))


async def test_bad_requests_for_a_token_say_what_is_right(store: Store) -> None:
    with pytest.raises(ValueError, match="not a Slack user id"):
        await store.tokens.mint_token("alice")
    with pytest.raises(ValueError, match="unknown scope admin"):
        await store.tokens.mint_token("U0ALICE", scopes=("admin",))


@pytest.mark.parametrize(
    ("text", "seconds"), [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("2w", 1209600)]
)
def test_ttl(text: str, seconds: int) -> None:
    assert parse_ttl(text) == seconds


@pytest.mark.parametrize(
    ("text", "said"),
    [("soon", "not a duration"), ("2y", "not a dur"), ("5s", "between 1 min"), ("900d", "betw")],
)
def test_bad_ttl(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_ttl(text)


def test_the_record_forbids_what_it_does_not_know() -> None:
    with pytest.raises(ValueError):
        TokenRecord.model_validate(
            {"id": "T-0123456789", "user_id": "U0A", "scopes": ["read"], "created_at": 0,
             "expires_at": 1, "token": "tbt_x"}
        )  # fmt: skip
