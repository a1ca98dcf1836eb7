"""The soak's seeded plan: which launches it sends (framework, workload, model, cluster,
nodes), which carry a stand-in fault or a random cancel, which run long, and the knob
file each launch's stand-in reads. Pure."""

from __future__ import annotations

import argparse
import random

from bench.soak_thread import Plan

CLUSTERS = ("a3m", "a3u", "a4", "a3h")
NEMO = [(w, m) for w in ("pretrain", "cpt", "sft") for m in ("llama3p1_2b", "llama3p1_8b")]
NEMO_RL = [(w, "llama3p1_8b") for w in ("sft", "dpo", "grpo", "rm")]
FAULTS = ("none", "oom", "nccl", "hang", "gated", "wandb", "tokenizer", "none")
FAULT_AT_STEP = 4


def make_plans(
    rng: random.Random, n: int, run_id: str, cancels: int, node_failures: int
) -> list[Plan]:
    faults = [FAULTS[i % len(FAULTS)] for i in range(n)]
    rng.shuffle(faults)
    plans = []
    for i, fault in enumerate(faults):
        framework = "nemo" if fault == "tokenizer" else rng.choice(("nemo", "nemo-rl"))
        workload, model = rng.choice(NEMO if framework == "nemo" else NEMO_RL)
        cluster, nodes = rng.choice(CLUSTERS), rng.choice((1, 1, 2))
        plans.append(
            Plan(i, f"{run_id}n{i:02d}", framework, workload, model, cluster, nodes, fault)
        )
    quiet = [p for p in plans if p.fault == "none"]
    for plan in rng.sample(quiet, min(cancels, len(quiet))):
        plan.cancel_after_s = rng.uniform(2, 45)
    steady = [p for p in quiet if p.cancel_after_s is None]
    # Spread over the run, so that one is running whenever a node failure comes.
    for plan in steady[:: max(1, len(steady) // max(1, 3 * node_failures))]:
        plan.long_run = node_failures > 0
    return plans


def knobs(plan: Plan, args: argparse.Namespace) -> dict[str, object]:
    """What the launch's stand-in trainer reads from its knob file."""
    steps = args.steps * (4 if plan.long_run else 1)
    values: dict[str, object] = {
        "steps": steps,
        "step_time_s": args.step_time_s,
        "ckpt_every": 3,
        "save_time_s": 0.3,
        "tokenizer_race": "cold" if plan.fault == "tokenizer" else "off",
    }
    if plan.fault in ("oom", "nccl", "hang", "gated", "wandb"):
        values.update(fault=plan.fault, fault_at_step=FAULT_AT_STEP)
    if plan.fault == "nccl":
        values["fault_once"] = 1
    return values
