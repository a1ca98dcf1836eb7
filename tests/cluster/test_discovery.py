"""Recipe discovery, cluster capacity and finding a launch again."""

from __future__ import annotations

import pytest

from cluster.launching.jobs import SEPARATOR, launch_name_matches, parse_found
from cluster.preflight.discovery import cluster_capacity, count_queue, discover_recipes
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("trainer-trainer.mine-L-7f3a9c", True),
        ("dpo-L-7f3a9c", True),
        ("L-7f3a9c", True),
        ("dpo-L-7f3a9c0", False),
        ("dpo-XL-7f3a9c", False),
        ("allocation", False),
    ],
)
def test_launch_name_matches(name: str, match: bool) -> None:
    assert launch_name_matches(name, "L-7f3a9c") is match


def test_parse_found_merges_queue_and_accounting() -> None:
    stdout = (
        "27|PENDING|BeginTime|0:00|2|(BeginTime)|1|rec-a-L-rec001|\n"
        f"{SEPARATOR}\n"
        "27|rec-a-L-rec001|NODE_FAIL|0:0|0:0|None|00:00:22|dev[0-1]|22|gres/gpu=16\n"
        "12|x-L-rec001|COMPLETED|0:0|0:0|None|00:00:04|dev0|4|gres/gpu=8\n"
        "13|x-L-rec0011|COMPLETED|0:0|0:0|None|00:00:04|dev0|4|gres/gpu=8\n"
    )
    found = parse_found(stdout, "L-rec001")
    assert [(f.job_id, f.state, f.active) for f in found] == [
        ("12", "COMPLETED", False),
        ("27", "PENDING", True),
    ]


@pytest.mark.devcluster
async def test_discover_recipes(pool: SSHPool, dev_profile: ClusterProfile) -> None:
    listing = await discover_recipes(pool, dev_profile)
    assert "sft/llama3p1_8b_sft.py" in listing.scripts["nemo"]
    assert "pretrain/llama3p1_2b_pt.py" in listing.scripts["nemo"]
    assert set(listing.scripts["nemo-rl"]) >= {
        "algorithms/dpo.sh", "algorithms/grpo.sh", "algorithms/sft.sh", "algorithms/rm.sh"
    }  # fmt: skip
    assert "nemo/nemo-20250721.sqsh" in listing.images and listing.recipes_dir_exists


@pytest.mark.devcluster
async def test_cluster_capacity(pool: SSHPool, dev_profile: ClusterProfile) -> None:
    capacity = await cluster_capacity(pool, dev_profile)
    assert [p.name for p in capacity.partitions] == ["a3m", "a3u", "a4", "a3h"]
    a4 = capacity.partition("a4")
    assert a4 is not None and a4.nodes == 4 and a4.gpus_per_node == 8
    assert 0 <= a4.gpus_idle <= a4.gpus_total <= 32
    pending, running = capacity.queued("a4")
    assert pending >= 0 and running >= 0


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ("", ()),
        ("a4|RUNNING\na4|PENDING\na4|PENDING\na3m|COMPLETING\n", (("a3m", 0, 1), ("a4", 2, 1))),
        ("a3m,a4|PENDING\n\n", (("a3m", 1, 0),)),  # a job asking for several partitions
    ],
)
def test_count_queue(stdout: str, expected: tuple[tuple[str, int, int], ...]) -> None:
    assert count_queue(stdout) == expected
