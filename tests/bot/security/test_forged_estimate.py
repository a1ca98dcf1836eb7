"""An ``estimate`` ask never gets a certificate for root: the ask cannot name a Unix user
(unsigned or signed), the worker asks as the user the config maps the person to (else
the shared account), and only for a shape the policy allows them. Through a worker's
real ask loop on the dev cluster."""

from __future__ import annotations

import pytest

from bot.gateway import ask_wire as wire
from cluster.errors import ClusterError
from cluster.slurm.sbatch import JobShape
from tests.bot.security.asks_kit import ask_worker, old_style, with_field

pytestmark = pytest.mark.devcluster

SHAPE = {"nodes": 1, "partition": "a4", "time_limit": "00:10:00", "account": None}


async def test_an_estimate_ask_for_root_is_refused_and_no_certificate_is_signed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO")
    async with ask_worker() as w:
        # 1. The ask as it was tried by hand: unsigned, cluster_user root.
        ask_id, raw = old_style(
            "estimate", cluster="a4", shape=SHAPE, user_id="U0ALICE", cluster_user="root",
            timeout_s=20,
        )  # fmt: skip
        await w.push_raw(raw)
        refused = await w.answer(ask_id)
        assert refused is not None and "the ask is not signed" in refused["error"], refused

        # 2. Signed with the real key, naming root: an ask has no such field.
        what = wire.Estimate(
            cluster="a4", user_id="U0ALICE", shape=wire.Shape(nodes=1, partition="a4"),
            timeout_s=20,
        )  # fmt: skip
        ask = wire.Ask.new(what, 30)
        await w.push_raw(with_field(ask, "cluster_user", "root"))
        refused = await w.answer(ask.id)
        assert refused is not None and "Extra inputs are not permitted" in refused["error"]

        # 3. A shape the policy does not allow the person: refused before any SSH.
        with pytest.raises(ClusterError, match="50 nodes is more than U0ALICE may use"):
            await w.asks.start_estimate(
                "a4", JobShape(nodes=50, partition="a4"), user_id="U0ALICE",
                cluster_user="root", timeout_s=20,
            )  # fmt: skip

        # 4. A good ask: Slurm answers, asked as the config's user for the person (alice),
        # whatever cluster_user the caller passed.
        found = await w.asks.start_estimate(
            "a4", JobShape(nodes=1, partition="a4", time_limit="00:10:00"), user_id="U0ALICE",
            cluster_user="root", timeout_s=20,
        )  # fmt: skip
        assert found.start is not None or found.error, found
    said = caplog.text
    assert "ask refused and dropped: the ask is not signed" in said
    assert "ask refused and dropped: the ask is malformed (what.estimate.cluster_user" in said
    assert "ask estimate refused: no estimate: 50 nodes" in said
    assert "signed a certificate for alice" in said  # the good one, as alice
    assert "signed a certificate for root" not in said
