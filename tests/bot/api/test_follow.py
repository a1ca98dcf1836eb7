"""The lines a followed log's new tail adds to the last one."""

from __future__ import annotations

import pytest

from bot.api.follow import new_lines


@pytest.mark.parametrize(
    ("before", "now", "fresh"),
    [
        ([], ["a", "b"], ["a", "b"]),  # the first tail: all of it
        (["a", "b"], ["a", "b"], []),  # nothing new
        (["a", "b"], ["a", "b", "c"], ["c"]),  # grew
        (["x", "a", "b"], ["a", "b", "c", "d"], ["c", "d"]),  # the window slid
        (["a", "a"], ["a", "a", "a"], ["a"]),  # a repeated line is still new once
        (["a", "b"], ["c", "d"], ["c", "d"]),  # slid past everything: all of it
        (["", "step 1"], ["", "step 1", "", "step 2"], ["", "step 2"]),  # blank lines kept
    ],
)
def test_new_lines(before: list[str], now: list[str], fresh: list[str]) -> None:
    assert new_lines(before, now) == fresh
