"""Sweeps: a comma list in a value that may vary makes one launch per combination.

``/train sft llama3p1_8b optim.config.lr=1e-5,3e-5 trainer.max_steps=100,200`` is
four launches, the product of the lists in the order written; ``seeds=N`` repeats
each with N seeds where the recipe has a seed override. Only ``nodes`` and the
recipe's overrides may vary. A value that fits the recipe's pattern whole (a
value of its own with a comma in it) is one value, not a list.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

from cluster.launching.recipes import RecipeEntry
from commands.after_training import THEN_KEY
from commands.errors import CommandError
from commands.parse import Args
from commands.suggest import join_names, quote

SEEDS_KEY = "seeds"
MAX_SEEDS = 16
SWEEP_ID_PATTERN = r"^S-[0-9a-f]{4,16}$"  # 16 since ids have 64 bits; 6 before
Axis = tuple[str, tuple[str, ...]]


def seed_key(entry: RecipeEntry) -> str | None:
    """The recipe's seed override (``seed`` or ``<section>.seed``), or None."""
    for key in entry.overrides:
        if key == "seed" or key.endswith(".seed"):
            return key
    return None


def sweep_axes(args: Args, entry: RecipeEntry, fixed_keys: tuple[str, ...]) -> list[Axis]:
    """The keys given a list, each with its values, in the order written (empty: no
    sweep). CommandError for a list in a key that may not vary, an empty item or a
    value given twice."""
    axes: list[Axis] = []
    for key, raw in args.pairs.items():
        if "," not in raw or key in (SEEDS_KEY, THEN_KEY):  # then=eval:a,b: one value
            continue
        pattern = entry.overrides.get(key)
        if pattern is not None and re.fullmatch(pattern, raw):
            continue  # the recipe takes this comma as part of one value
        if key != "nodes" and pattern is None:
            if key in fixed_keys:
                raise CommandError(
                    f"{key}={quote(raw)}: only nodes and recipe overrides can take a list "
                    f"of values (a sweep); give {key} one value.",
                    field=key,
                )
            continue  # an unknown key: the launch's own check says so
        values = tuple(value.strip() for value in raw.split(","))
        if any(not value for value in values):
            raise CommandError(
                f"{key}={quote(raw)} has an empty item; a sweep list is values "
                f"separated by commas, for example {key}={values[0] or '1'},{values[-1] or '2'}.",
                field=key,
            )
        if len(set(values)) != len(values):
            raise CommandError(
                f"{key}={quote(raw)} gives a value twice; give each value once.", field=key
            )
        axes.append((key, values))
    return axes


def parse_seeds(args: Args, entry: RecipeEntry) -> tuple[str, int] | None:
    """``seeds=N``: (the recipe's seed key, N), or None when not given."""
    raw = args.pairs.get(SEEDS_KEY)
    if raw is None:
        return None
    key = seed_key(entry)
    if key is None:
        raise CommandError(
            f"seeds= needs a recipe with a seed override, and {entry.workload} "
            f"{entry.model} has none (its overrides: {join_names(list(entry.overrides))}). "
            "Leave seeds= out.",
            field=SEEDS_KEY,
        )
    if key in args.pairs:
        raise CommandError(
            f"Give either seeds=N or {key}=..., not both: seeds=N sets {key} to 1..N.",
            field=SEEDS_KEY,
        )
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_SEEDS:
        raise CommandError(
            f"seeds={quote(raw)} is not a number of seeds; give 1 to {MAX_SEEDS}, "
            "for example seeds=3.",
            field=SEEDS_KEY,
        )
    return key, int(raw)


def expand(
    args: Args,
    axes: list[Axis],
    seeds: tuple[str, int] | None,
    *,
    max_members: int,
    describe: Callable[[], str],
) -> list[tuple[tuple[tuple[str, str], ...], Args]]:
    """Each member: its varied values and its own command words, in product order.
    CommandError when there would be more than ``max_members``."""
    all_axes = list(axes)
    if seeds is not None:
        all_axes.append((seeds[0], tuple(str(n) for n in range(1, seeds[1] + 1))))
    count = 1
    for _, values in all_axes:
        count *= len(values)
    if count > max_members:
        sizes = " x ".join(str(len(values)) for _, values in all_axes)
        raise CommandError(
            f"That sweep is {count} launches ({sizes}), more than the {max_members} a sweep "
            f"may have ({describe()}). Give fewer values or fewer seeds.",
            field=all_axes[0][0],
        )
    pairs = {k: v for k, v in args.pairs.items() if k != SEEDS_KEY}
    members = []
    for combo in itertools.product(*(values for _, values in all_axes)):
        chosen = tuple((key, value) for (key, _), value in zip(all_axes, combo, strict=True))
        members.append((chosen, Args(words=args.words, pairs={**pairs, **dict(chosen)})))
    return members
