"""A ``cancel`` ask cancels only the jobs the launch's own record holds, and only once the
record says the launch is cancelled: job ids put in an ask (signed or not) change
nothing, so another person's job keeps its place. Held Slurm jobs on the dev cluster
(they take no node), through a worker's real ask loop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.gateway import ask_wire as wire
from cluster.errors import ClusterError
from tests.bot.botkit import login_run, match_in, wait_until
from tests.bot.security.asks_kit import ask_worker, old_style, seeded, with_field

pytestmark = pytest.mark.devcluster


def held_job(user: str, name: str) -> str:
    out = login_run(f"sbatch -H -p a4 -J {name} --parsable --wrap 'sleep 1'", user=user)
    return match_in(r"^\d+", out.strip())


def state(job_id: str) -> str:
    return login_run(f"squeue -h -j {job_id} -o %T 2>/dev/null || true").strip()


@pytest.fixture
def jobs(unique: str) -> Iterator[dict[str, str]]:
    """A held job of bob's (another person) and one of alice's own launch."""
    made = {"bob": held_job("bob", f"sectest-{unique}-bob")}
    made["alice"] = held_job("alice", f"sectest-{unique}-alice")
    yield made
    login_run(f"scancel {made['bob']}", check=False, user="bob")
    login_run(f"scancel {made['alice']}", check=False, user="alice")


async def test_a_cancel_ask_for_another_persons_job_is_refused(
    jobs: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    async with ask_worker() as w:
        running = await seeded(w.store, job_id=jobs["alice"])  # not cancelled
        # 1. Unsigned, naming bob's job as alice's launch's.
        ask_id, raw = old_style("cancel", launch=running.id, job_ids=[jobs["bob"]])
        await w.push_raw(raw)
        answer = await w.answer(ask_id)
        assert answer is not None and "the ask is not signed" in answer["error"], answer
        # 2. Signed, naming bob's job: an ask has no job ids.
        ask = wire.Ask.new(wire.Cancel(launch=running.id), 30)
        await w.push_raw(with_field(ask, "job_ids", [jobs["bob"]]))
        answer = await w.answer(ask.id)
        assert answer is not None and "Extra inputs are not permitted" in answer["error"]
        # 3. Signed and well formed, for a launch its record does not say is cancelled.
        with pytest.raises(ClusterError, match="is not cancelled in its record"):
            await w.asks.cancel(running, [jobs["bob"]])
        assert state(jobs["bob"]) == "PENDING" and state(jobs["alice"]) == "PENDING"
        # 4. alice's cancelled launch: the worker cancels the job its record holds, as
        # alice, and nothing else, whatever job ids the caller passed.
        cancelled = await seeded(w.store, job_id=jobs["alice"], cancelled=True)
        await w.asks.cancel(cancelled, [jobs["bob"]])

        async def alice_gone() -> bool:
            return state(jobs["alice"]) in ("", "CANCELLED")

        await wait_until(alice_gone, "alice's job cancelled", 30, 0.5)
    assert state(jobs["bob"]) == "PENDING"
    said = caplog.text
    assert "ask refused and dropped: the ask is not signed" in said
    assert "ask refused and dropped: the ask is malformed (what.cancel.job_ids" in said
    assert "ask cancel refused:" in said and "is not cancelled in its record" in said
