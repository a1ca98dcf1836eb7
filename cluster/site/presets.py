"""What a cluster has: its GPUs, its network fabric and the NCCL settings its jobs get,
and the ready presets for the four Google Cloud cluster types.

Any Slurm GPU cluster is described by what it has (``gpus_per_node``, ``gpu_model``,
``fabric``, ``nccl_env``, and ``launcher_type`` when the site's recipes want a
``--slurm-type``/``--cluster_type`` value). A ``type`` names a preset that fills those
in: ``type: hcc-a4`` is an A4 cluster with 8 B200 per node on RDMA, whose launchers set
up NCCL themselves from the type they are given (FIELD_GUIDE section 2).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict

PresetName = Literal["hcc-a3m", "hcc-a3u", "hcc-a4", "hcc-a3h"]
Fabric = Literal["tcpx", "tcpxo", "rdma", "infiniband", "roce", "efa", "ethernet"]
GPU_MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,31}$"
NCCL_NAME_PATTERN = r"^(NCCL|UCX|FI|OMPI_MCA|TORCH_NCCL)_[A-Z0-9_]{1,64}$"
_NCCL_VALUE_RE = re.compile(r"[A-Za-z0-9_.,:/=+@-]{0,256}")


class Preset(BaseModel):
    """What a cluster type implies (FIELD_GUIDE section 2)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    machine: str
    gpu_model: str
    fabric: Fabric
    gpus_per_node: int = 8


PRESETS: dict[PresetName, Preset] = {
    "hcc-a3m": Preset(machine="A3 Mega (H100, TCPXO)", gpu_model="H100", fabric="tcpxo"),
    "hcc-a3u": Preset(machine="A3 Ultra (H200, RDMA)", gpu_model="H200", fabric="rdma"),
    "hcc-a4": Preset(machine="A4 (B200, RDMA)", gpu_model="B200", fabric="rdma"),
    "hcc-a3h": Preset(machine="A3 High (H100)", gpu_model="H100", fabric="tcpx"),
}


def check_nccl_value(value: str) -> str:
    """An NCCL setting's value: plain characters only (it is exported in a shell)."""
    if not _NCCL_VALUE_RE.fullmatch(value):
        raise ValueError(
            f"may contain only letters, digits and _ . , : / = + @ - (got {value!r}); "
            "e.g. NCCL_IB_HCA: mlx5_0,mlx5_1"
        )
    return value


NcclValue = Annotated[str, AfterValidator(check_nccl_value)]


def describe_machine(gpu_model: str | None, gpus_per_node: int, fabric: str | None) -> str:
    """``8 x H100, infiniband`` for a cluster without a preset."""
    text = f"{gpus_per_node} x {gpu_model or 'GPU'}"
    return f"{text}, {fabric}" if fabric else text
