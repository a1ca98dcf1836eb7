"""Outbox entries: what a change of a launch writes, read back the same, and the one
alert key per launch and cause."""

from __future__ import annotations

import pytest

from bot.lifecycle.events import DEDUP_KEY_MAX, EVENT_KINDS, Event, dedup_key, is_event_kind


@pytest.mark.parametrize("kind", EVENT_KINDS)
def test_an_event_reads_back_as_it_was_written(kind: str) -> None:
    assert is_event_kind(kind)
    event = Event(kind, "L-7f3a9c", "line *one*\nline two", {"buttons": ["cancel"], "n": 2})
    fields = event.encode()
    assert all(isinstance(value, str) for value in fields.values())
    back = Event.decode("1700000000000-0", fields)
    assert back == Event(kind, "L-7f3a9c", event.text, event.data, id="1700000000000-0")


def test_an_entry_without_text_or_data_reads_as_empty() -> None:
    assert Event.decode("1-0", {"kind": "update", "launch": "L-1"}) == Event(
        "update", "L-1", "", {}, id="1-0"
    )


@pytest.mark.parametrize("kind", ["", "page", "THREAD"])
def test_a_kind_this_version_does_not_know_is_refused(kind: str) -> None:
    assert not is_event_kind(kind)
    with pytest.raises(ValueError, match="unknown event kind"):
        Event.decode("1-0", {"kind": kind, "launch": "L-1"})


def test_a_dedup_key_names_the_cluster_launch_and_cause() -> None:
    assert dedup_key("a4", "L-7f3a", "node_fail") == "trainbot/a4/L-7f3a/node_fail"
    assert dedup_key("a 4/x", "L-7f3a", "GPU OOM!") == "trainbot/a_4_x/L-7f3a/gpu_oom"
    assert dedup_key("", "L-1", "???") == "trainbot/-/L-1/-"


def test_a_long_key_keeps_its_prefix_and_a_hash_of_the_whole() -> None:
    cause = "x" * 300
    one, two = dedup_key("a4", "L-1", cause + "a"), dedup_key("a4", "L-1", cause + "b")
    assert len(one) == len(two) == DEDUP_KEY_MAX
    assert one.startswith("trainbot/a4/L-1/xxx") and one != two
    assert one == dedup_key("a4", "L-1", cause + "a")  # the same on every call
