"""``then=export`` and ``then=eval:<task>[,<task>...]``: what runs after a launch has
completed. Pure: the text in, the canonical value (or a CommandError) out.

``then=export`` converts the run's final checkpoint to Hugging Face format with the
framework's own tool; ``then=eval:<tasks>`` exports it first, then runs the site's
evaluation recipe (``eval_command`` of the cluster) on those tasks. Both run as Slurm
jobs of one node, as the launch's person, in the launch's container, and say what they
found in the launch's thread.
"""

from __future__ import annotations

import re

from cluster.site.framework_registry import frameworks, registered
from cluster.site.profiles import ClusterProfile
from commands.errors import CommandError
from commands.suggest import did_you_mean, quote

THEN_KEY = "then"
EXPORT, EVAL = "export", "eval"
TASK_PATTERN = r"[a-z0-9][a-z0-9_.-]{0,63}"
THEN_PATTERN = rf"^(export|eval:{TASK_PATTERN}(,{TASK_PATTERN}){{0,15}})$"
MAX_TASKS = 16
THEN_FORMS = (
    "then=export or then=eval:<task>[,<task>...] (for example then=eval:arc_easy,hellaswag)"
)


def parse_then(raw: str) -> str:
    """``then=`` text to its canonical value (``export`` or ``eval:a,b``), or a
    CommandError saying what would be right."""
    text = raw.strip().lower()
    word, colon, rest = text.partition(":")
    if word == EXPORT and not colon:
        return EXPORT
    if word == EXPORT:
        raise CommandError(
            f"then={quote(raw)}: export takes nothing after it (it converts the final "
            "checkpoint). Use then=export.",
            field=THEN_KEY,
        )
    if word != EVAL:
        raise CommandError(
            f"then={quote(raw)} is not a step trainbot runs after training. Use {THEN_FORMS}."
            f"{did_you_mean(word, (EXPORT, EVAL))}",
            field=THEN_KEY,
        )
    tasks = [task.strip() for task in rest.split(",")] if colon else []
    if not tasks or any(not task for task in tasks):
        raise CommandError(
            f"then={quote(raw)}: say which tasks to evaluate, separated by commas, for "
            "example then=eval:arc_easy,hellaswag.",
            field=THEN_KEY,
        )
    for task in tasks:
        if not re.fullmatch(TASK_PATTERN, task):
            raise CommandError(
                f"then={quote(raw)}: {quote(task)} is not a task name. Task names are "
                "lower-case letters, digits, '_', '.' and '-', as lm-evaluation-harness "
                "names them (arc_easy, hellaswag, mmlu).",
                field=THEN_KEY,
            )
    if len(tasks) > MAX_TASKS:
        raise CommandError(
            f"then={quote(raw)} names {len(tasks)} tasks; at most {MAX_TASKS} at once.",
            field=THEN_KEY,
        )
    unique = list(dict.fromkeys(tasks))
    return f"{EVAL}:{','.join(unique)}"


def eval_tasks(then: str | None) -> tuple[str, ...]:
    """The tasks of a canonical ``then=`` value (empty: no evaluation)."""
    if not then or not then.startswith(EVAL + ":"):
        return ()
    return tuple(then.partition(":")[2].split(","))


def check_then(then: str, framework: str, profile: ClusterProfile) -> None:
    """CommandError when ``then=`` cannot run for this framework on this cluster: the
    framework has no converter trainbot runs, or (for eval) the cluster no recipe."""
    fw = registered(framework)
    if not fw.export_tool:
        able = [f.label for f in frameworks().values() if f.export_tool]
        raise CommandError(
            f"then={then}: trainbot has no Hugging Face export for {fw.label} runs yet "
            f"(it has for {', '.join(able) or 'none'}). Leave then= out, or train with "
            "one of those.",
            field=THEN_KEY,
        )
    if eval_tasks(then) and not profile.eval_command:
        raise CommandError(
            f"then={then}: cluster {profile.name} has no evaluation recipe (its operators set "
            f"clusters.{profile.name}.eval_command in trainbot.yaml). Use then=export here, or "
            "a cluster that has one.",
            field=THEN_KEY,
        )
