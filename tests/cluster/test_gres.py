"""What Slurm's GRES says a cluster's GPUs are, against the config (a table)."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.site.gres import Gpus, accounting_report, gpus_in, gres_report, parse_gres_rows
from cluster.site.profiles import ClusterProfile


def cluster(**fields: Any) -> ClusterProfile:
    base: dict[str, Any] = {
        "name": "dgx",
        "login": {"host": "h", "user": "trainer"},
        "partition": "gpu",
        "max_nodes": 4,
        "gpus_per_node": 8,
        "gpu_model": "H100",
    }
    return ClusterProfile.model_validate({**base, **fields})


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:8", [Gpus(8, None)]),
        ("gpu:h100:8(S:0-1)", [Gpus(8, "h100")]),
        ("gpu:a100:4,gpu:a100_1g.5gb:7", [Gpus(4, "a100"), Gpus(7, "a100_1g.5gb")]),
        ("gpu:h100:8(S:0-1),nic:mlx5:4", [Gpus(8, "h100")]),
        ("(null)", []),
        ("nic:4", []),
    ],
)
def test_gpus_in_gres(gres: str, gpus: list[Gpus]) -> None:
    assert gpus_in(gres) == gpus


@pytest.mark.parametrize(
    ("sinfo", "fields", "ok", "says"),
    [
        ("gpu*|4|gpu:h100:8(S:0-1)\ncpu|2|(null)", {}, True, "8 GPUs per node, GPU model h100"),
        ("gpu*|4|gpu:8", {}, True, "GRES names no GPU model (the config's H100 stands)"),
        ("gpu*|4|gpu:8", {"gpu_model": None}, True, "no GPU model (the config's none stands)"),
        ("gpu*|4|gpu:nvidia_h100_80gb_hbm3:8", {}, True, "GPU model nvidia_h100_80gb_hbm3"),
        ("gpu*|4|gpu:h100:8", {"gpu_model": None}, True, "(say gpu_model: h100 to show it)"),
        ("gpu*|4|gpu:a100:8", {}, False, "Slurm's GPU model is a100, the config's H100"),
        ("gpu*|4|gpu:h100:4", {}, False, "Slurm has 4 GPUs per node, the config says"),
        ("gpu*|4|(null)", {}, False, "no GPU GRES, so Slurm neither places nor counts GPUs"),
        ("a4*|4|gpu:8\na3m|4|gpu:8", {}, False, "partition gpu not found (partitions: a4*, a3m)"),
    ],
)
def test_gres_against_the_config(sinfo: str, fields: dict[str, Any], ok: bool, says: str) -> None:
    found_ok, text = gres_report(cluster(**fields), parse_gres_rows(sinfo))
    assert (found_ok, says in text) == (ok, True), text


@pytest.mark.parametrize(
    ("config", "ok", "says"),
    [
        (
            "AccountingStorageTRES   = cpu,mem,node,billing,gres/gpu\n"
            "AccountingStorageType   = accounting_storage/slurmdbd\n",
            True,
            "slurmdbd records jobs and their GPUs (gres/gpu)",
        ),
        (
            "AccountingStorageTRES = cpu,gres/gpu:h100\n"
            "AccountingStorageType = accounting_storage/slurmdbd\n",
            True,
            "(gres/gpu:h100)",
        ),
        (
            "AccountingStorageTRES   = cpu,mem,energy,node,billing\n"
            "AccountingStorageType   = accounting_storage/slurmdbd\n",
            False,
            "AccountingStorageTRES lacks gres/gpu: sacct records no GPUs",
        ),
        (
            "AccountingStorageType   = accounting_storage/none\n",
            False,
            "AccountingStorageType is accounting_storage/none: sacct knows no finished job",
        ),
        ("", False, "AccountingStorageType is (not shown)"),
    ],
)
def test_accounting_must_record_jobs_and_their_gpus(config: str, ok: bool, says: str) -> None:
    found_ok, text = accounting_report(config)
    assert (found_ok, says in text) == (ok, True), text
