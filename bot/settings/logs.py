"""Log set-up for the entry point: level, text or JSON lines, and a launch's fields.

Lines about a launch carry ``launch_id``, ``job_id`` and ``cluster`` as fields
of the record: given with ``extra=`` or, for everything logged while a launch is
handled (SSH, the store, Slack), from :func:`log_context`. In JSON each line is
one object (``time``, ``level``, ``logger``, ``message``, the fields that are
set, ``exc_info`` when there is one); in text the fields follow the message as
``launch=L-7f3a9c job=4187 cluster=a4``.

Only :func:`configure_logging` touches handlers and levels, and only the entry
point calls it. The redaction filter (:mod:`bot.core.redact`) goes on every root
handler, this one included, when the bot starts.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Literal, TextIO

LaunchField = Literal["launch_id", "job_id", "cluster"]
LAUNCH_FIELDS: tuple[LaunchField, ...] = ("launch_id", "job_id", "cluster")
_TEXT_NAMES = {"launch_id": "launch", "job_id": "job", "cluster": "cluster"}

#: Libraries whose INFO and DEBUG lines are noise unless TRAINBOT_LOG_LEVEL=DEBUG.
NOISY_LOGGERS = (
    "asyncssh",
    "slack_bolt",
    "slack_sdk",
    "apscheduler",
    "aiohttp.access",
    "aiohttp.server",
    "urllib3",
)

HANDLER_NAME = "trainbot"
_context: ContextVar[dict[str, str]] = ContextVar("trainbot_log_context", default={})  # noqa: B039


@contextmanager
def log_context(*, launch_id: str = "", job_id: str = "", cluster: str = "") -> Iterator[None]:
    """Everything logged inside the block (this task and what it awaits) carries these fields.

    Empty values keep what an outer block set."""
    given = {"launch_id": launch_id, "job_id": job_id, "cluster": cluster}
    merged = {**_context.get(), **{k: v for k, v in given.items() if v}}
    token = _context.set(merged)
    try:
        yield
    finally:
        _context.reset(token)


def set_job_id(job_id: str) -> None:
    """Inside a :func:`log_context` block: the launch's Slurm job is now known."""
    if job_id:
        _context.set({**_context.get(), "job_id": job_id})


def launch_fields(launch_id: str = "", job_id: str = "", cluster: str = "") -> dict[str, str]:
    """``extra=`` for one line about a launch."""
    given = {"launch_id": launch_id, "job_id": job_id, "cluster": cluster}
    return {k: v for k, v in given.items() if v}


class ContextFilter(logging.Filter):
    """Puts the launch fields on every record: its own ``extra=``, else the context's."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _context.get()
        for name in LAUNCH_FIELDS:
            if not getattr(record, name, ""):
                setattr(record, name, context.get(name, ""))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in LAUNCH_FIELDS:
            value = getattr(record, name, "")
            if value:
                line[name] = str(value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc_info"] = record.exc_text
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message launch=... job=... cluster=...``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        text = super().formatMessage(record)
        fields = [
            f"{_TEXT_NAMES[name]}={getattr(record, name)}"
            for name in LAUNCH_FIELDS
            if getattr(record, name, "")
        ]
        return f"{text} {' '.join(fields)}" if fields else text


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a line is logged (it may be replaced)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def configure_logging(
    level: str = "INFO", log_format: str = "text", *, stream: TextIO | None = None
) -> logging.Handler:
    """trainbot's handler on the root logger (replacing one set up before); returns it.

    ``level`` applies to trainbot's own loggers; the libraries in :data:`NOISY_LOGGERS`
    stay at WARNING unless ``level`` is DEBUG.
    """
    number = logging.getLevelName(level.upper())
    if not isinstance(number, int):
        raise ValueError(f"unknown log level {level!r}")
    handler = _StderrHandler() if stream is None else logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    handler.set_name(HANDLER_NAME)
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == HANDLER_NAME:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(number)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(number if number <= logging.DEBUG else logging.WARNING)
    logging.captureWarnings(True)
    return handler
