"""Any Slurm GPU cluster: presets, a cluster described by what it has, its NCCL
settings in the launch script, the launcher's cluster type, and its price."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bot.settings.config import parse_config
from cluster.errors import ConfigError
from cluster.launching.launch import plan_launch
from cluster.launching.recipes import DEFAULT_CATALOG
from cluster.launching.spec import LaunchSpec
from cluster.site.presets import PRESETS
from cluster.site.profiles import ClusterProfile

GENERIC: dict[str, Any] = {
    "name": "dgx",
    "login": {"host": "127.0.0.1", "port": 2222, "user": "trainer"},
    "partition": "gpu",
    "max_nodes": 4,
    "gpus_per_node": 4,
    "gpu_model": "A100",
    "fabric": "infiniband",
    "nccl_env": {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "ib0"},
}


def cluster(**fields: Any) -> ClusterProfile:
    return ClusterProfile.model_validate({**GENERIC, **fields})


def argv_of(profile: ClusterProfile, workload: str) -> list[str]:
    framework = "nemo-rl" if workload == "dpo" else "nemo"
    recipe = DEFAULT_CATALOG.find(workload, "llama3p1_8b", framework)
    assert recipe is not None
    spec = LaunchSpec.from_recipe(profile, recipe, launch_id="L-7f3a9c", nodes=2)
    return [str(arg) for arg in plan_launch(spec).argv]


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_preset_fills_in_what_the_cluster_has(name: str) -> None:
    preset = PRESETS[name]  # type: ignore[index]
    built = cluster(type=name, gpus_per_node=None, gpu_model=None, fabric=None)
    assert (built.gpus_per_node, built.gpu_model, built.fabric) == (
        8,
        preset.gpu_model,
        preset.fabric,
    )
    assert built.launcher_type == name and built.kind == name
    assert built.machine == preset.machine


def test_a_cluster_without_a_preset_says_what_it_has() -> None:
    built = cluster()
    assert built.type is None and built.launcher_type is None
    assert built.kind == "A100"
    assert built.machine == "4 x A100, infiniband"


def test_without_a_preset_gpus_per_node_is_required() -> None:
    with pytest.raises(ValidationError, match="gpus_per_node is required for a cluster without"):
        cluster(gpus_per_node=None)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            "gpu_model: H100",
            "clusters.dgx: gpus_per_node is required for a cluster without a type preset "
            "(hcc-a3m, hcc-a3u, hcc-a4, hcc-a3h): say how many GPUs a node has",
        ),
        (
            "gpus_per_node: 8\n    login: {host: h, user: trainer, jump: ['jump@']}",
            "clusters.dgx.login.jump[0]: a jump host is user@host:port (user and port optional)",
        ),
        (
            "gpus_per_node: 8\n    fabric: ib",
            "clusters.dgx.fabric: must be one of 'tcpx', 'tcpxo', 'rdma', 'infiniband'",
        ),
        (
            "gpus_per_node: 8\n    nccl_env: {NCCL_DEBUG: 'INFO; id'}",
            "clusters.dgx.nccl_env.NCCL_DEBUG: may contain only letters, digits",
        ),
    ],
)
def test_a_bad_cluster_description_in_the_file_says_where_and_what(
    lines: str, message: str
) -> None:
    text = "clusters:\n  dgx:\n    " + lines + "\n    partition: gpu\n    max_nodes: 2\n"
    if "login:" not in text:
        text += "    login: {host: h, user: trainer}\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="trainbot.yaml")
    assert str(caught.value).startswith(f"trainbot.yaml: {message}"), str(caught.value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"type": "hcc-a5"}, "Input should be 'hcc-a3m'"),
        ({"fabric": "carrier-pigeon"}, "Input should be 'tcpx'"),
        ({"nccl_env": {"PATH": "/tmp"}}, "String should match"),
        ({"nccl_env": {"NCCL_DEBUG": "INFO; rm -rf ~"}}, "may contain only letters"),
        ({"gpu_model": "H100<!channel>"}, "String should match"),
        ({"launcher_type": "a b"}, "String should match"),
        ({"price_per_gpu_hour": -1}, "greater than or equal to 0"),
    ],
)
def test_bad_cluster_descriptions(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        cluster(**fields)
    assert message in str(caught.value)


@pytest.mark.parametrize("workload", ["sft", "dpo"])
def test_the_launcher_gets_a_cluster_type_only_when_there_is_one(workload: str) -> None:
    flag = "--cluster_type" if workload == "dpo" else "--slurm-type"
    plain = argv_of(cluster(), workload)
    assert flag not in plain
    typed = argv_of(cluster(launcher_type="generic"), workload)
    assert typed[typed.index(flag) + 1] == "generic"
    preset = argv_of(cluster(type="hcc-a3u"), workload)
    assert preset[preset.index(flag) + 1] == "hcc-a3u"


def test_the_nccl_settings_are_exported_before_the_launcher() -> None:
    recipe = DEFAULT_CATALOG.find("sft", "llama3p1_8b", "nemo")
    assert recipe is not None
    spec = LaunchSpec.from_recipe(cluster(), recipe, launch_id="L-7f3a9c", nodes=2)
    lines = plan_launch(spec).script().splitlines()
    exports = [line for line in lines if line.startswith("export NCCL_")]
    assert exports == ["export NCCL_IB_HCA=mlx5_0,mlx5_1", "export NCCL_SOCKET_IFNAME=ib0"]
    assert lines.index(exports[-1]) < len(lines) - 1
    assert {"NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"} <= set(plan_launch(spec).env_names)


def test_prices_per_cluster_then_name_type_and_gpu_model() -> None:
    table = {"hcc-a4": 10.0, "H100": 4.0, "cheap-a4": 6.0}
    assert cluster(type="hcc-a4", gpu_model=None).gpu_hour_price(table) == 10.0
    assert cluster(name="cheap-a4", type="hcc-a4").gpu_hour_price(table) == 6.0
    own = cluster(type="hcc-a4", price_per_gpu_hour=7.5)
    assert own.gpu_hour_price(table) == 7.5
    assert cluster(gpu_model="H100").gpu_hour_price(table) == 4.0
    assert cluster().gpu_hour_price(table) is None


def test_two_clusters_of_one_type_at_different_prices_in_a_config() -> None:
    text = """
clusters:
  a4-reserved:
    type: hcc-a4
    price_per_gpu_hour: 7.5
    login: {host: 127.0.0.1, user: trainer}
    partition: a4
    max_nodes: 4
  a4-spot:
    type: hcc-a4
    login: {host: 127.0.0.1, user: trainer}
    partition: a4
    max_nodes: 4
policy:
  usage:
    price_per_gpu_hour: {hcc-a4: 10.5}
"""
    config = parse_config(text)
    table = config.policy.usage.price_per_gpu_hour
    prices = {name: p.gpu_hour_price(table) for name, p in config.clusters.items()}
    assert prices == {"a4-reserved": 7.5, "a4-spot": 10.5}
