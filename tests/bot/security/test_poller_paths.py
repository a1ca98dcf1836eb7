"""The poller reads a job's log and evidence only inside the cluster's directories: the
paths come from the launch's record (what the launcher printed), so one rewritten to a
private file, or a link beside the log that points at one, is not read. The remote
half (``cluster/watching/collect_remote.py``, stdlib only) runs here on local files, as it runs
on the login node; then once through the real poller on the dev cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine.poller import Poller
from bot.gateway.on_cluster import Clusters
from cluster.ssh.pool import SSHPool
from cluster.watching import collect_remote as remote
from tests.bot.botkit import bot_settings, dev_config, login_run, open_test_store
from tests.bot.security.asks_kit import PEOPLE, AskWorker, attempt, seeded


def layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A recipes checkout with a job's log, a private file outside it, and a link named
    like the job's log that points at the private file."""
    recipes, secret = tmp_path / "recipes", tmp_path / ".ssh" / "id_ed25519"
    logs = recipes / "nemo" / "logs" / "job"
    logs.mkdir(parents=True)
    secret.parent.mkdir()
    secret.write_text("PRIVATE KEY\n")
    (logs / "log-x_4187_0.out").write_text("step 1 loss 2.5\n")
    (logs / "log-y_4187_1.out").symlink_to(secret)
    return recipes, secret, logs


def job(log_dir: str, names: tuple[str, ...], evidence: tuple[str, ...] = ()) -> dict[str, object]:
    return {
        "job_id": "4187",
        "log_dir": log_dir,
        "log_names": list(names),
        "evidence": list(evidence),
    }


def test_a_log_outside_the_clusters_directories_is_not_read(tmp_path: Path) -> None:
    recipes, secret, logs = layout(tmp_path)
    roots = [str(recipes)]
    assert remote.inside(str(logs / "log-x_4187_0.out"), roots)
    assert not remote.inside(str(logs / "log-y_4187_1.out"), roots)  # the link's target
    assert not remote.inside(str(secret), roots)
    assert not remote.inside(str(recipes) + "-other/x.log", roots)  # a prefix is not a parent
    honest = remote.collect_job(job(str(logs), ("log-x_4187_*.out",)), 4096, 10, roots)
    assert honest["log"]["text"] == "step 1 loss 2.5\n" and honest["refused"] == []
    rewritten = remote.collect_job(job(str(secret.parent), ("id_ed25519",)), 4096, 10, roots)
    assert rewritten["log"]["text"] == "" and rewritten["refused"] == [str(secret)]
    linked = remote.collect_job(job(str(logs), ("log-y_4187_*.out",)), 4096, 10, roots)
    assert linked["log"]["text"] == "" and linked["refused"]


def test_evidence_outside_the_clusters_directories_is_not_read(tmp_path: Path) -> None:
    recipes, secret, logs = layout(tmp_path)
    payload = {
        "job": job(str(logs), ("log-x_4187_*.out",), ("*.out", str(secret))),
        "roots": [str(recipes)],
    }
    out = remote.gather_evidence(payload)
    assert [f["path"] for f in out["files"]] == [str(logs / "log-x_4187_0.out")]
    assert str(secret) in out["refused"] and str(logs / "log-y_4187_1.out") in out["refused"]
    assert all("PRIVATE" not in str(f) for f in out["files"])


@pytest.mark.devcluster
async def test_the_poller_does_not_read_a_private_file_a_record_names(unique: str) -> None:
    secret = f"/home/alice/.ssh/sectest-{unique}.log"
    login_run(f"umask 077; mkdir -p ~/.ssh; echo PRIVATE-{unique} > {secret}", user="alice")
    try:
        async with open_test_store() as store, SSHPool() as pool:
            clusters = Clusters(dev_config(people=PEOPLE), bot_settings(), pool, store)
            launch = await seeded(store, job_id="990001")
            tracking = {
                "framework": "nemo",
                "job_id": "990001",
                "log_path": secret,
                "log_dir": "/home/alice/.ssh",
                "log_names": [f"sectest-{unique}.log"],
            }
            await AskWorker(store, clusters, None).rewrite(  # type: ignore[arg-type]
                launch.id, attempts=[{**attempt("990001"), "tracking": tracking}]
            )
            poller = Poller(store, clusters, owner="sectest-poller")
            try:
                assert await poller.poll("a4") == 1
            finally:
                await poller.release()
            after = await store.launches.get(launch.id)
    finally:
        login_run(f"rm -f {secret}", check=False, user="alice")
    assert after is not None
    assert f"PRIVATE-{unique}" not in after.model_dump_json()
