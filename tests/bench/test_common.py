"""bench.common's reading of TRAINBOT_BENCH_REDIS: a database number of the local Redis,
or a URL naming one; anything else stops the bench saying what would be right."""

from __future__ import annotations

import pytest

from bench.common import bench_db


@pytest.mark.parametrize(
    ("value", "db"),
    [
        ("12", 12),
        (" 6 ", 6),
        ("redis://127.0.0.1:6379/6", 6),
        ("redis://localhost:6379/15", 15),
    ],
)
def test_a_number_or_a_local_url_names_the_database(value: str, db: int) -> None:
    assert bench_db(value) == db


@pytest.mark.parametrize(
    "value", ["", "six", "redis://10.0.0.5:6379/6", "redis://127.0.0.1:6379/", "-1"]
)
def test_anything_else_says_what_would_be_right(value: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        bench_db(value)
    assert f"TRAINBOT_BENCH_REDIS={value!r} is not a database of the local Redis" in str(
        stopped.value
    )
    assert "redis://127.0.0.1:6379/<number>" in str(stopped.value)
