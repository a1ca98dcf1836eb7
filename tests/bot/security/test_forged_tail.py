"""A ``tail`` ask reads the launch's own log and nothing else: not a path an intruder puts
in an ask (signed or not), not a private file the launch's record is rewritten to name,
not a file a link beside the log points at. Through a worker's real ask loop, as alice
on the dev cluster's login node."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.gateway import ask_wire as wire
from cluster.errors import ClusterError
from tests.bot.botkit import login_run
from tests.bot.security.asks_kit import ask_worker, attempt, old_style, seeded, with_field

pytestmark = pytest.mark.devcluster

HOME = "/home/alice"
JOB = "990001"


@pytest.fixture
def files(unique: str) -> Iterator[dict[str, str]]:
    """alice's private file, her launch's log, and a link named like a log to the former."""
    secret = f"{HOME}/.ssh/sectest-{unique}"
    logs = f"{HOME}/vertex-oss-training/nemo/logs/sectest-{unique}"
    made = {
        "secret": secret,
        "log": f"{logs}/log-sectest_{JOB}_0.out",
        "link": f"{logs}/log-linked_{JOB}_0.out",
        "text": f"PRIVATE-{unique}",
    }
    login_run(
        f"umask 077; mkdir -p ~/.ssh {logs}; printf '{made['text']}\\n' > {secret}; "
        f"printf 'step 1 loss 2.5\\n' > {made['log']}; ln -s {secret} {made['link']}",
        user="alice",
    )
    yield made
    login_run(f"rm -rf {logs} {secret}", check=False, user="alice")


async def test_a_forged_tail_never_reads_a_private_file(
    files: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    async with ask_worker() as w:
        launch = await seeded(w.store, job_id=JOB, log_path=files["log"])
        # The web role's own ask reads the log the record names, as alice.
        assert "step 1 loss 2.5" in await w.asks.tail(launch, "ignored", 5)
        answers = []

        # 1. An ask of the old kind, naming the private file: not signed, refused.
        ask_id, raw = old_style("tail", launch=launch.id, path=files["secret"], lines=5)
        await w.push_raw(raw)
        answers.append(await w.answer(ask_id))
        assert "the ask is not signed" in str(answers[-1]), answers[-1]

        # 2. Signed with the real key, but naming a path: an ask has no such field.
        ask = wire.Ask.new(wire.Tail(launch=launch.id, lines=5), 30)
        await w.push_raw(with_field(ask, "path", files["secret"]))
        answers.append(await w.answer(ask.id))
        assert "Extra inputs are not permitted" in str(answers[-1]), answers[-1]

        # 3. The record rewritten to name the private file as the launch's log.
        await w.rewrite(launch.id, attempts=[attempt(JOB, files["secret"])])
        record = await w.store.launches.get(launch.id)
        assert record is not None
        with pytest.raises(ClusterError, match="not a log file"):
            await w.asks.tail(record, files["secret"], 5)

        # 4. ... or to name a link that looks like its log and points at the private file.
        await w.rewrite(launch.id, attempts=[attempt(JOB, files["link"])])
        with pytest.raises(ClusterError, match="outside the launch's directories"):
            await w.asks.tail(record, files["link"], 5)
    assert all(files["text"] not in str(a) for a in answers)
    said = caplog.text
    assert "ask refused and dropped: the ask is not signed" in said
    assert "refused to read" in said and "it is not a log file" in said
    assert f"resolves to {files['secret']}" in said or "outside" in said
