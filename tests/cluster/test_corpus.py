"""The failure catalog against a corpus of real messages' formats (data/corpus/corpus.yaml:
each sample says where its format comes from), read the way the poller reads a failed
job: laid out where the framework leaves it, gathered on the login node, diagnosed."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.watching.diagnosis import BY_KEY, CATALOG, diagnose
from cluster.watching.evidence import gather
from tests.cluster.test_diagnosis import JOBS, lay_out, with_state

CORPUS = Path(__file__).parent / "data" / "corpus" / "corpus.yaml"
SAMPLES: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text())
for _sample in SAMPLES:  # a sample captured on a real machine lives in its own file
    if "file" in _sample:
        _sample["text"] = (CORPUS.parent / _sample["file"]).read_text()
# The causes the catalog did not know before it became data (issue: "gave a name to none
# of 17 other real causes"); each must be named by at least one sample.
NEW_CAUSES = {
    "cuda_illegal_memory", "nan_loss", "xid_hardware", "xid_gpu_fault", "ray_actor_died",
    "vllm_kv_cache", "checkpoint_load", "import_error", "nccl_config",
    # texts real runs print today: containers, hubs, watchdogs, GPUs that need a reset
    "container_mount", "image_registry_auth", "image_missing", "nccl_heartbeat",
    "hub_rate_limit", "xid_gpu_reset", "ray_node_lost", "vllm_engine_dead",
}  # fmt: skip


@pytest.fixture
def root() -> Iterator[Path]:
    path = JOBS / uuid.uuid4().hex
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_corpus_is_well_formed() -> None:
    names = [s["name"] for s in SAMPLES]
    assert len(names) == len(set(names))
    for sample in SAMPLES:
        assert sample["text"].strip() and sample["source"].strip(), sample["name"]
        assert sample["expect"] is None or sample["expect"] in BY_KEY, sample["name"]
    assert NEW_CAUSES <= {s["expect"] for s in SAMPLES}
    assert NEW_CAUSES <= {kind.key for kind in CATALOG}
    assert sum(s["expect"] is None for s in SAMPLES) >= 3


@pytest.mark.parametrize("sample", SAMPLES, ids=[s["name"] for s in SAMPLES])
async def test_corpus_sample(
    pool: SSHPool, dev_profile: ClusterProfile, root: Path, sample: dict[str, Any]
) -> None:
    """A failed job whose log holds the sample: its cause named (with the rank and the
    faulty node where the sample says), or, for a healthy log, nothing named."""
    node_list = sample.get("node_list", "dev0")
    tracking = lay_out(root, "nemo_x", log=sample["text"])
    record = with_state(None, "FAILED", node_list)
    evidence = await gather(pool, dev_profile.login, tracking, record=record, cluster="dev")
    found = diagnose(evidence)
    assert found is not None
    assert found.key == (sample["expect"] or "unknown"), (found.key, found.evidence)
    if sample["expect"]:
        assert found.evidence and not found.read
    if "reaction" in sample:  # the reaction on-call would choose for it
        assert found.reaction == sample["reaction"], (found.key, found.reaction)
    if "pages" in sample:  # a person's mistake never pages; a GPU that needs a reset does
        assert found.kind.page_oncall == sample["pages"], found.key
    if "rank" in sample:
        assert found.rank == sample["rank"]
    if "failed_node" in sample:
        assert found.failed_node == sample["failed_node"]
    running = with_state(None, "RUNNING", node_list)
    still = await gather(pool, dev_profile.login, tracking, record=running, cluster="dev")
    assert diagnose(still) is None or sample["expect"] is not None
