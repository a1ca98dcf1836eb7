"""The soak's table: launches, faults injected by kind, divergences by kind, wall time."""

from __future__ import annotations

import argparse
from collections import Counter

from bench.soak_check import Divergence
from bench.soak_thread import Plan, View

KNOB_FAULTS = ("oom", "nccl", "hang", "gated", "wandb", "tokenizer")


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {n}" for k, n in counter.most_common()) or "none"


def duration(seconds: float) -> str:
    minutes, sec = divmod(int(seconds), 60)
    return f"{minutes} min {sec} s" if minutes else f"{sec} s"


def fault_line(views: list[View], injected: Counter[str]) -> str:
    queued = [v.plan for v in views]
    knobs = Counter(p.fault for p in queued if p.fault != "none")
    parts = [f"{k} {knobs[k]}" for k in KNOB_FAULTS if knobs[k] and k != "tokenizer"]
    if knobs["tokenizer"]:
        struck = sum(
            1
            for v in views
            if v.plan.fault == "tokenizer"
            and any("tokenizer download raced" in t for t in v.thread)
        )
        parts.append(f"tokenizer race {knobs['tokenizer']} (struck {struck})")
    hit = sum(1 for v in views if any(r.state.startswith("NODE_FAIL") for r in v.incarnations))
    for kind, count in injected.items():
        extra = f" ({hit} launches hit)" if kind == "node failure" else ""
        parts.append(f"{kind} {count}{extra}")
    return ", ".join(parts)


def print_report(
    args: argparse.Namespace,
    run_id: str,
    views: list[View],
    divergences: list[Divergence],
    injected: Counter[str],
    plans: list[Plan],
    wall_s: float,
) -> None:
    finals = Counter(v.final_word or "?" for v in views)
    frameworks = Counter(f"{p.framework} {p.workload}" for p in plans)
    clusters = Counter(p.cluster for p in plans)
    two = sum(1 for p in plans if p.nodes == 2)
    rows = [
        ("run", f"{run_id}, seed {args.seed}, {args.concurrency} in flight"),
        ("launches", f"{len(plans)}: {_counts(finals)}"),
        ("workloads", _counts(frameworks)),
        ("clusters", f"{_counts(clusters)}; {two} on 2 nodes"),
        ("faults injected", fault_line(views, injected)),
        ("divergences", f"{len(divergences)}: {_counts(Counter(d.kind for d in divergences))}"),
        ("wall time", duration(wall_s)),
    ]
    print()
    print("| soak | |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    print()
    for divergence in divergences:
        print(f"DIVERGENCE {divergence}")
