"""The words of a launch's export and evaluation after training (``then=export``,
``then=eval:<tasks>``), from the facts the loop (``bot.engine.after_training``) writes on
each thread line (``move``: ``after_training``, ``said``: what happened). Pure: facts
in, mrkdwn out; every path, task and error escaped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bot.text.mrkdwn import code_block, escape
from bot.wording.facts import Facts, fact


def _tasks(facts: Facts) -> list[str]:
    return [str(task) for task in facts.get("tasks") or []]


def _what(facts: Facts) -> str:
    tasks = _tasks(facts)
    return f"evaluation ({escape(', '.join(tasks))})" if tasks else "export"


def results_text(rows: Sequence[Mapping[str, Any]], against: Mapping[str, float], name: str) -> str:
    """The results as a table (a code block): task, metric, value, ± stderr and, when
    ``against`` holds the same task and metric, the change against it."""
    head = ["task", "metric", "value", "stderr"] + ([f"Δ vs {name}"] if against else [])
    table = [head]
    for row in rows:
        value = float(row.get("value", 0.0))
        stderr = row.get("stderr")
        cells = [str(row.get("task", "")), str(row.get("metric", "")), f"{value:.4f}"]
        cells.append("" if stderr is None else f"±{float(stderr):.4f}")
        if against:
            before = against.get(f"{row.get('task', '')}/{row.get('metric', '')}")
            cells.append("" if before is None else f"{value - before:+.4f}")
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return code_block("\n".join(lines))


def after_training(facts: Facts) -> str:
    said = str(facts.get("said", ""))
    job, step = escape(str(facts.get("job", ""))), facts.get("step", "")
    if said == "no_checkpoint":
        which = f" at step {facts['at_step']}" if facts.get("at_step") is not None else ""
        return (
            f"then={escape(str(facts.get('then', '')))}: the run has no checkpoint{which} "
            "trainbot saw, so there is nothing to export."
        )
    if said == "outside":
        return f"No {_what(facts)}: {escape(str(facts.get('problem', '')))}."
    if said == "not_submitted":
        return (
            f"The {_what(facts)} of step {step} was not submitted: "
            f"{escape(str(facts.get('error', '')))}"
        )
    if said == "submitted":
        tasks = _tasks(facts)
        return (
            f"Exporting step {step} to Hugging Face format with "
            f"{escape(str(facts.get('tool', '')))}"
            + (f", then evaluating {escape(', '.join(tasks))}" if tasks else "")
            + f": Slurm job {job} on {escape(str(facts.get('cluster', '')))}."
        )
    if said == "unfollowed":
        return (
            f"Job {job} (after training) has not ended after {float(facts.get('hours', 0)):.0f} "
            "h; trainbot no longer follows it."
        )
    return ended(facts)


def ended(facts: Facts) -> str:
    """What the step found: the model exported (or not), the results against a baseline,
    and the log's last lines when it did not go as it should."""
    job, state = escape(str(facts.get("job", ""))), escape(str(facts.get("state", "")))
    tasks, rows = _tasks(facts), list(facts.get("results") or [])
    lines: list[str] = []
    if facts.get("exported"):
        lines.append(f"Exported to Hugging Face format: `{escape(str(facts.get('hf_dir', '')))}`")
    else:
        lines.append(f"The export (job {job}) ended {state or 'unknown'} without a model.")
    if tasks and rows:
        against = {str(k): float(v) for k, v in (facts.get("against") or {}).items()}
        lines.append(f"Evaluation ({escape(', '.join(tasks))}):")
        lines.append(results_text(rows, against, str(facts.get("baseline", ""))))
    elif tasks and facts.get("exported"):
        lines.append(f"The evaluation (job {job}) ended {state} with no results table.")
    if facts.get("tail"):
        lines.append(code_block(str(facts["tail"])))
    return "\n".join(lines)


def asked(facts: Facts) -> str:
    """``Export of step 1,200 asked: then=export.``: Export or Evaluate pressed on a
    finished launch (``what``), of a checkpoint's ``step`` or its newest."""
    step = facts.get("step")
    which = f" of step {step:,}" if isinstance(step, int) and not isinstance(step, bool) else ""
    what, then = escape(fact(facts, "what")).capitalize(), escape(fact(facts, "then"))
    return f"{what}{which} asked: then={then}."
