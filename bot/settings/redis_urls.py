"""What of a Redis URL may be shown, and the password it carries (for the redactor)."""

from __future__ import annotations

import urllib.parse


def without_password(url: str) -> str:
    """``url`` with any user and password left out, and its query (``?password=`` is
    one): what may be logged or shown."""
    scheme, sep, rest = url.partition("://")
    where = (rest if sep else url).rsplit("@", 1)[-1].split("?", 1)[0]
    return f"{scheme}://{where}" if sep else where


def url_password(url: str) -> str:
    """The password a Redis URL carries, before its host or as ``?password=`` ("" when
    none)."""
    _, sep, rest = url.partition("://")
    rest, _, query = rest.partition("?")
    userinfo, at, _ = rest.rpartition("@")
    found = urllib.parse.parse_qs(query).get("password", [""])[0]
    if sep and at:
        found = urllib.parse.unquote(userinfo.partition(":")[2] if ":" in userinfo else userinfo)
    return found
