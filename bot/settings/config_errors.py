"""A config file's validation error as one ConfigError a person can act on: the field's
path, what is wrong with the value it got, a misspelt field named before the missing one
it makes, and the closest known name for an unknown one (``bot.settings.config``)."""

from __future__ import annotations

from collections.abc import Mapping
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from cluster.errors import ConfigError
from commands.suggest import closest


def config_error(exc: ValidationError, source: str, root: type[BaseModel]) -> ConfigError:
    """The first problem of a validation error as a ConfigError (with a count of the rest).

    A misspelt field (``clustrs:``) also makes the real one missing: the unknown name is
    the cause, so it is reported first.
    """
    errors = _misspelling_first(exc.errors())
    path, message = _describe(errors[0], root)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return ConfigError(message, source=source, path=path)


def _misspelling_first(errors: list[Any]) -> list[Any]:
    """``errors`` with an unknown field that is close to a missing sibling moved first."""
    missing = [e for e in errors if e["type"] == "missing"]
    for error in errors:
        if error["type"] != "extra_forbidden":
            continue
        parent, name = tuple(error["loc"][:-1]), str(error["loc"][-1])
        siblings = [str(m["loc"][-1]) for m in missing if tuple(m["loc"][:-1]) == parent]
        if closest(name, siblings):
            return [error] + [e for e in errors if e is not error]
    return errors


def _describe(error: Mapping[str, Any], root: type[BaseModel]) -> tuple[str, str]:
    parts: list[str] = []
    for part in error["loc"]:
        if isinstance(part, int):
            parts[-1:] = [f"{parts[-1]}[{part}]" if parts else f"[{part}]"]
        elif part == "[key]":
            pattern = (error.get("ctx") or {}).get("pattern", "")
            return ".".join(parts), f"{error['input']!r} is not a valid name (must match {pattern})"
        else:
            parts.append(str(part))
    path = ".".join(parts)
    kind, ctx, got = error["type"], error.get("ctx") or {}, error.get("input")
    messages = {
        "missing": "is required",
        "greater_than_equal": f"must be >= {ctx.get('ge')} (got {got!r})",
        "greater_than": f"must be > {ctx.get('gt')} (got {got!r})",
        "less_than_equal": f"must be <= {ctx.get('le')} (got {got!r})",
        "less_than": f"must be < {ctx.get('lt')} (got {got!r})",
        "string_pattern_mismatch": f"must match {ctx.get('pattern')} (got {got!r})",
        "literal_error": f"must be one of {ctx.get('expected')} (got {got!r})",
        "too_short": "must not be empty",
        "int_parsing": f"must be a whole number (got {got!r})",
        "int_type": f"must be a whole number (got {got!r})",
        "int_from_float": f"must be a whole number (got {got!r})",
        "float_parsing": f"must be a number (got {got!r})",
        "bool_parsing": f"must be true or false (got {got!r})",
        "string_type": f"must be a string (got {got!r})",
        "dict_type": f"must be a mapping (got {got!r})",
        "model_type": f"must be a mapping (got {got!r})",
        "tuple_type": f"must be a list (got {got!r})",
        "enum": f"must be one of {ctx.get('expected')} (got {got!r})",
    }
    if kind == "extra_forbidden":
        return path, _unknown_field(tuple(error["loc"]), root)
    if kind == "value_error":
        text = str(ctx.get("error", error["msg"]))
        if path == "" and ": " in text:
            path, _, text = text.partition(": ")
        return path, text
    return path, messages.get(kind, f"{error['msg'].lower()} (got {got!r})")


def _unknown_field(loc: tuple[Any, ...], root: type[BaseModel]) -> str:
    """``is not a known field``, with the closest known name at that place when one is close."""
    known = _fields_at(loc[:-1], root)
    match = closest(str(loc[-1]), known) if known else None
    hint = f"; did you mean {match}?" if match else ""
    return f"is not a known field{hint} (trainbot.example.yaml lists every field)"


def _fields_at(loc: tuple[Any, ...], root: type[BaseModel]) -> list[str]:
    """The field names of the model found at ``loc`` under ``root`` (empty if unknown)."""
    model = root
    skip = False  # the part after a mapping or list field is its key or index
    for part in loc:
        if skip:
            skip = False
            continue
        field = model.model_fields.get(str(part))
        found = None if field is None else _model_in(field.annotation)
        if field is None or found is None:
            return []
        model = found
        skip = not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel))
        skip = skip and get_origin(field.annotation) not in (Union, UnionType)
    return list(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (directly, or as a mapping value or list item)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in reversed(get_args(annotation)):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
