"""The checked values a cluster profile's fields hold: names, paths on the login node,
secrets' sources, tokenizer seeds, time limits and link templates.

Paths on the login node are strings, absolute or starting with ``~/``, made of
characters that need no shell quoting (:func:`check_remote_path`).
"""

from __future__ import annotations

import re
import string
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from cluster.slurm.base import SLURM_TIME_FORMATS, slurm_time_seconds

CLUSTER_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
IMAGE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,31}$"
SLURM_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_REMOTE_PATH_RE = re.compile(r"(~|/)(/?[A-Za-z0-9._+@-]+)*/?")
_ATTACH_FIELDS = ("host", "port", "user", "job_id", "cluster")
_TENSORBOARD_FIELDS = ("log_dir", "job_id", "launch_id")


def check_remote_path(value: str) -> str:
    """A path on the login node: absolute or ``~/...``, safe characters, no ``..``."""
    if value == "~":
        return value
    if not value.startswith(("/", "~/")):
        raise ValueError(f"must be absolute or start with '~/' (got {value!r})")
    if not _REMOTE_PATH_RE.fullmatch(value):
        raise ValueError(f"may contain only letters, digits and . _ + @ - / (got {value!r})")
    if ".." in value.split("/"):
        raise ValueError(f"must not contain '..' (got {value!r})")
    return value.rstrip("/") if value not in ("/", "~/") else value


RemotePath = Annotated[str, AfterValidator(check_remote_path)]


class EnvSecret(BaseModel):
    """A secret taken from the bot's environment variable ``env``."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    env: str = Field(pattern=ENV_NAME_PATTERN)
    """The bot's environment variable that holds the value."""


class SecretRef(BaseModel):
    """Where a job secret comes from: ``{env: NAME}`` (the bot's environment) or
    ``{file: PATH}`` (a file on the login node, read when the job starts)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    env: str | None = Field(default=None, pattern=ENV_NAME_PATTERN)
    """The bot's environment variable that holds the value."""
    file: RemotePath | None = None
    """A file on the login node, read when the job starts (with identity: in the person's home)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env: NAME or file: PATH")
        return self


def check_seed_source(value: str) -> str:
    """A tokenizer file's source: an http(s) URL or a path on the login node."""
    if value.startswith(("http://", "https://")):
        host = value.split("/", 3)[2]
        if not host or any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError(f"must be an http(s) URL with a host and no spaces (got {value!r})")
        return value
    return check_remote_path(value)


class TokenizerSeed(BaseModel):
    """Where the GPT-2 tokenizer files come from when the cache must be seeded
    (``gpt2-vocab.json`` and ``gpt2-merges.txt``): paths on the login node, or
    http(s) URLs that the login node fetches."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    vocab: Annotated[str, AfterValidator(check_seed_source)]
    """`gpt2-vocab.json`: a path on the login node or an http(s) URL the login node fetches."""
    merges: Annotated[str, AfterValidator(check_seed_source)]
    """`gpt2-merges.txt`: a path on the login node or an http(s) URL the login node fetches."""


def check_time_limit(value: str | None) -> str | None:
    if value is not None:
        try:
            slurm_time_seconds(value)
        except ValueError as exc:
            raise ValueError(f"{exc} (got {value!r}); use {SLURM_TIME_FORMATS}") from None
    return value


def check_attach_template(value: str | None) -> str | None:
    if value is None:
        return None
    names = re.findall(r"\{([^{}]*)\}", value)
    unknown = [n for n in names if n not in _ATTACH_FIELDS]
    if unknown:
        known = ", ".join("{" + name + "}" for name in _ATTACH_FIELDS)
        raise ValueError(f"unknown placeholder {{{unknown[0]}}}; use {known}")
    return value


def check_tensorboard_template(value: str | None) -> str | None:
    """An https link with placeholders only after the host; nothing Slack reads as markup."""
    if value is None:
        return None
    known = ", ".join("{" + n + "}" for n in _TENSORBOARD_FIELDS)
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(value)]
    except ValueError as exc:
        raise ValueError(f"not a template ({exc}); placeholders are {known}") from None
    for name, spec, conversion in fields:
        if name is not None and (name not in _TENSORBOARD_FIELDS or spec or conversion):
            whole = name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            raise ValueError(f"unknown placeholder {{{whole}}}; use {known}")
    parts = urlsplit(value)
    if parts.scheme != "https" or not parts.netloc or "{" in parts.netloc:
        raise ValueError(f"must start with https:// and a host (got {value!r})")
    if re.search(r"[\s<>|`]", value):
        raise ValueError(f"must not contain spaces or < > | ` (got {value!r})")
    return value


EVAL_FIELDS = ("model", "tasks", "output")


def check_eval_command(value: str) -> str:
    """The site's evaluation command: one line, placeholders only ``{model}``,
    ``{tasks}`` and ``{output}``, ``{model}`` among them."""
    if not value:
        return value
    known = ", ".join("{" + n + "}" for n in EVAL_FIELDS)
    if "\n" in value or "\r" in value:
        raise ValueError("must be one line (one shell command)")
    try:
        names = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(value)]
    except ValueError as exc:
        raise ValueError(f"not a template ({exc}); placeholders are {known}") from None
    for name, spec, conversion in names:
        if name is not None and (name not in EVAL_FIELDS or spec or conversion):
            raise ValueError(f"unknown placeholder {{{name}}}; use {known}")
    if "model" not in {name for name, _, _ in names}:
        raise ValueError(f"must name {{model}}, the exported checkpoint (placeholders: {known})")
    return value
