"""The redactor: every configured secret, in its common encodings, wherever it sits."""

from __future__ import annotations

import base64
import json
import logging
import urllib.parse

import pytest

from bot.core.redact import MASK, RedactingFilter, Redactor

SECRET = "hf_Ab+cD/eF=gH&iJ 42"
REDACTOR = Redactor([SECRET, "short", ""])


def _b64_inside(prefix: bytes) -> str:
    """The secret base64-encoded inside a longer value (any alignment)."""
    return base64.b64encode(prefix + SECRET.encode() + b"--tail").decode()


@pytest.mark.parametrize(
    "text",
    [
        f"token={SECRET}",
        f"stderr: {urllib.parse.quote(SECRET, safe='')}",
        f"form {urllib.parse.quote_plus(SECRET)}",
        f"hex {SECRET.encode().hex()}",
        f"HEX {SECRET.encode().hex().upper()}",
        f"json {json.dumps({'k': SECRET})}",
        _b64_inside(b""),
        _b64_inside(b"x"),
        _b64_inside(b"xy"),
        base64.urlsafe_b64encode(b"Authorization: " + SECRET.encode()).decode(),
    ],
)
def test_each_encoding_is_redacted(text: str) -> None:
    cleaned = REDACTOR(text)
    assert MASK in cleaned
    assert SECRET not in cleaned and SECRET.encode().hex() not in cleaned.lower()


def test_other_text_is_left_alone() -> None:
    assert REDACTOR("step 10 loss 1.5 short") == "step 10 loss 1.5 short"  # < 6 chars: kept
    assert not Redactor([]) and Redactor([]).__call__("x") == "x"


def test_blocks_and_files() -> None:
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": f"x {SECRET} y"}}]
    assert MASK in json.dumps(REDACTOR.data(blocks))
    assert REDACTOR.blob(f"a {SECRET}".encode()) == f"a {MASK}".encode()
    png = b"\x89PNG\r\n\x1a\n\xff"
    assert REDACTOR.blob(png) == png


def test_log_filter_redacts_message_arguments_and_tracebacks() -> None:
    try:
        raise RuntimeError(f"bad token {SECRET}")
    except RuntimeError:
        import sys

        record = logging.LogRecord(
            "bot.engine.worker", logging.ERROR, __file__, 1, "failed: %s", (SECRET,), sys.exc_info()
        )
    assert RedactingFilter(REDACTOR).filter(record)
    assert record.getMessage() == f"failed: {MASK}"
    assert record.exc_text is not None and SECRET not in record.exc_text
