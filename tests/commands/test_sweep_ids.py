"""Sweep ids have 64 random bits (a sweep is not guessed nor drawn twice); the 6-digit
ids of earlier versions keep resolving in every command that takes a job."""

from __future__ import annotations

import re

import pytest

from bot.lifecycle.launch import Sweep, new_sweep_id
from commands.context import CommandContext
from commands.job_commands import parse_job_ref
from commands.request_fields import JobRef


def test_a_new_sweep_id_has_64_random_bits() -> None:
    ids = {new_sweep_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"S-[0-9a-f]{16}", i) for i in ids)
    made = Sweep.model_fields["id"].get_default(call_default_factory=True)
    assert re.fullmatch(r"S-[0-9a-f]{16}", made)


@pytest.mark.parametrize("sweep_id", ["S-41c2aa", "S-0123456789abcdef", new_sweep_id()])
def test_old_and_new_sweep_ids_are_taken_by_job_commands(
    sweep_id: str, context: CommandContext
) -> None:
    ref = parse_job_ref(sweep_id, None, context)
    assert isinstance(ref, JobRef) and ref.id == sweep_id and ref.is_sweep_id
