"""What ``bench/run`` prints and writes: the rows as one Markdown table, their notes, and
``bench/RESULTS.md`` (the table, the notes, and how each row is measured)."""

from __future__ import annotations

from datetime import datetime

from bench import ack, launch, notify, ssh_latency
from bench.common import Row


def table(rows: list[Row]) -> str:
    head = "| id | measure | figure | anchor (same run) | ratio | goal | result |\n"
    head += "|---|---|---|---|---|---|---|\n"
    return head + "".join(
        f"| {r.id} | {r.measure} | {r.figure} | {r.anchor} | {r.ratio} | {r.goal} | {r.verdict} |\n"
        for r in rows
    )


def notes(rows: list[Row]) -> str:
    return "".join(f"- {r.id}: {note}\n" for r in rows for note in r.notes)


def render_results(
    rows: list[Row], method: list[str], machine: str, started: datetime, command: str
) -> str:
    from bench import fleet as fleet_doc

    parts = [
        "# trainbot performance, side by side\n\n",
        f"`{command}`, started {started:%Y-%m-%d %H:%M} UTC.\n\n",
        f"Machine: {machine}.\n\n",
        "Every anchor was measured in the same run, on the same machine, right beside the "
        "figure it is compared with. The machine is shared: other work may have run "
        "meanwhile.\n\n",
        table(rows),
        "\n## Notes\n\n",
        notes(rows),
        "\n## How each row is measured\n\n",
    ]
    for module in (ack, fleet_doc, ssh_latency, launch, notify):
        doc = (module.__doc__ or "").strip()
        parts.append(f"### `bench/{module.__name__.rsplit('.', 1)[-1]}.py`\n\n{doc}\n\n")
    parts.extend(f"{line}\n" for line in method)
    parts.append(
        "\nWhere one poll's time goes: `.venv/bin/python -m bench.profile_poll --jobs N` "
        "makes N held launches the same way and prints cProfile's top functions of a poll.\n"
    )
    return "".join(parts)
