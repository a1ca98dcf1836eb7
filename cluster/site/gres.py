"""What Slurm says a cluster's GPUs are (its GRES), set beside what the config says
(pure; ``trainbot doctor`` runs :func:`build_gres_query` and reads the answer here).

Slurm's ``sinfo -o %G`` shows a node's generic resources as ``gpu:8``,
``gpu:h100:8(S:0-1)`` or ``gpu:a100:4,gpu:a100_1g.5gb:7``; without GPU GRES (no
``GresTypes=gpu``, no ``Gres=`` on the nodes) it shows ``(null)``, and then Slurm
neither places GPUs nor accounts for them (every usage figure would be 0).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from cluster.site.profiles import ClusterProfile

_GPU_RE = re.compile(r"^gpu(?::(?P<model>[A-Za-z0-9_.-]+))?:(?P<count>[0-9]+)")


@dataclass(frozen=True)
class GresRow:
    """One line of the query: a partition and one GRES string of its nodes."""

    partition: str
    default: bool
    nodes: int
    gres: str


@dataclass(frozen=True)
class Gpus:
    """The GPUs a GRES string names: how many per node, and the model when it says."""

    count: int
    model: str | None


def build_gres_query() -> str:
    """Per partition and distinct GRES: ``sinfo -h -o '%P|%D|%G'``."""
    return shlex.join(["sinfo", "-h", "-o", "%P|%D|%G"])


def parse_gres_rows(stdout: str) -> list[GresRow]:
    rows = []
    for line in stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[0]:
            continue
        name, nodes, gres = parts
        rows.append(
            GresRow(
                partition=name.rstrip("*"),
                default=name.endswith("*"),
                nodes=int(nodes) if nodes.isdigit() else 0,
                gres=gres.strip(),
            )
        )
    return rows


def gpus_in(gres: str) -> list[Gpus]:
    """The GPU entries of a GRES string (none for ``(null)`` or other resources)."""
    found = []
    for part in re.split(r",(?![^()]*\))", gres):
        match = _GPU_RE.match(part.strip())
        if match:
            found.append(Gpus(count=int(match["count"]), model=match["model"]))
    return found


def _same_model(config: str, slurm: str) -> bool:
    def norm(name: str) -> str:
        return re.sub(r"[^a-z0-9]", "", name.lower())

    return norm(config) in norm(slurm) or norm(slurm) in norm(config)


def gres_report(profile: ClusterProfile, rows: list[GresRow]) -> tuple[bool, str]:
    """Whether the cluster's partition has GPU GRES that fits the config, and what was
    found and what is missing, in one line."""
    names = ", ".join(dict.fromkeys(r.partition + ("*" if r.default else "") for r in rows))
    mine = [r for r in rows if r.partition == profile.partition]
    if not mine:
        return False, f"partition {profile.partition} not found (partitions: {names or 'none'})"
    gpus = [g for r in mine for g in gpus_in(r.gres)]
    shown = ", ".join(dict.fromkeys(r.gres for r in mine))
    head = f"partitions {names}; {profile.partition}: {sum(r.nodes for r in mine)} nodes, {shown}"
    if not gpus:
        return False, (
            f"{head}: no GPU GRES, so Slurm neither places nor counts GPUs (usage would be 0); "
            "set GresTypes=gpu and Gres=gpu:<model>:<count> on the nodes (and gres.conf)"
        )
    counts = sorted({g.count for g in gpus})
    models = sorted({g.model for g in gpus if g.model})
    problems = []
    if max(counts) != profile.gpus_per_node:
        problems.append(
            f"Slurm has {'/'.join(map(str, counts))} GPUs per node, the config says "
            f"gpus_per_node: {profile.gpus_per_node}"
        )
    if profile.gpu_model and models and not any(_same_model(profile.gpu_model, m) for m in models):
        problems.append(
            f"Slurm's GPU model is {', '.join(models)}, the config's {profile.gpu_model}"
        )
    if problems:
        return False, f"{head}: {'; '.join(problems)}"
    if models and not profile.gpu_model:
        model = f"GPU model {', '.join(models)} (say gpu_model: {models[0]} to show it)"
    elif models:
        model = f"GPU model {', '.join(models)}"
    else:
        model = f"GRES names no GPU model (the config's {profile.gpu_model or 'none'} stands)"
    return True, f"{head}: {max(counts)} GPUs per node, {model}"


def build_accounting_query() -> str:
    """Slurm's accounting settings as the controller has them."""
    return "scontrol show config"


def accounting_report(stdout: str) -> tuple[bool, str]:
    """Whether Slurm accounting records jobs and their GPUs: trainbot reads how a job
    ended from ``sacct`` and charges GPU-hours from its ``AllocTRES`` ``gres/gpu``."""
    settings: dict[str, str] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            settings[key.strip()] = value.strip()
    storage = settings.get("AccountingStorageType", "(not shown)")
    tres = [t.strip() for t in settings.get("AccountingStorageTRES", "").split(",") if t.strip()]
    if storage != "accounting_storage/slurmdbd":
        return False, (
            f"AccountingStorageType is {storage}: sacct knows no finished job, so trainbot "
            "cannot tell how a job ended nor count its GPU-hours; run slurmdbd and set "
            "AccountingStorageType=accounting_storage/slurmdbd"
        )
    gpus = [t for t in tres if t == "gres/gpu" or t.startswith("gres/gpu:")]
    if not gpus:
        return False, (
            "AccountingStorageTRES lacks gres/gpu: sacct records no GPUs, so every GPU-hour "
            "figure (usage, budgets, cost) is 0; add gres/gpu to AccountingStorageTRES"
        )
    return True, f"slurmdbd records jobs and their GPUs ({', '.join(gpus)})"
