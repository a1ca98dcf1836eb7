"""What a change of a launch has to say: outbox entries (:class:`Event`), written in the
change's own transaction and delivered in order by the notifier."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard, get_args

EventKind = Literal["parent", "update", "thread", "plot", "oncall", "resolve", "enqueue", "dm"]
"""What an :class:`Event` asks for:

- ``parent``: post the launch's parent message (the thread's head), once.
- ``update``: re-render the parent message from the stored launch.
- ``thread``: a line in the thread; ``data["buttons"]`` may ask for buttons under it
  (``cancel``, ``retry``, ``approve``/``reject``, ``use_partition`` with ``data["partition"]``).
- ``plot``: upload the loss curve into the thread.
- ``oncall``: page the on-call channel (and PagerDuty when configured); ``data`` holds
  ``dedup_key``, ``cause_key``, ``cause`` and ``action``.
- ``resolve``: resolve that page; ``data`` holds ``dedup_key`` and ``outcome``.
- ``enqueue``: not a message: the store puts the launch back on the workers' queue
  (a retry, an approval) instead of in the outbox.
- ``dm``: a direct message to ``data["user"]`` about the launch (``data["notice"]``),
  written by the notifier once the thread line it refers to is posted; ``text`` is the
  message.
"""
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)


def is_event_kind(value: str) -> TypeGuard[EventKind]:
    return value in EVENT_KINDS


@dataclass
class Event:
    """An outbox entry: something to say in a launch's thread or about it (see
    :data:`EventKind`), or, for ``enqueue``, the launch going back on the queue."""

    kind: EventKind
    launch_id: str
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    id: str = ""  # the stream entry id, once stored

    def encode(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "launch": self.launch_id,
            "text": self.text,
            "data": json.dumps(self.data, separators=(",", ":")),
        }

    @classmethod
    def decode(cls, entry_id: str, fields: dict[str, str]) -> Event:
        """The event of an outbox entry; ValueError for a kind this version does not know."""
        kind = fields.get("kind", "")
        if not is_event_kind(kind):
            raise ValueError(f"unknown event kind {kind!r}")
        return cls(
            kind=kind,
            launch_id=fields.get("launch", ""),
            text=fields.get("text", ""),
            data=json.loads(fields.get("data") or "{}"),
            id=entry_id,
        )


DEDUP_KEY_MAX = 255  # PagerDuty Events API v2 limit on dedup_key
_KEY_PART_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def dedup_key(cluster: str, launch_id: str, cause_key: str) -> str:
    """One alert per launch and cause: ``trainbot/a4/L-7f3a/node_fail``.

    Parts are reduced to ``[A-Za-z0-9._-]``; a key longer than PagerDuty's 255
    characters keeps a readable prefix and a hash of the whole.
    """
    parts = [_KEY_PART_UNSAFE.sub("_", part).strip("_") or "-" for part in (cluster, launch_id)]
    cause = _KEY_PART_UNSAFE.sub("_", cause_key.lower()).strip("_") or "-"
    key = "/".join(["trainbot", *parts, cause])
    if len(key) <= DEDUP_KEY_MAX:
        return key
    digest = hashlib.sha256("\0".join((cluster, launch_id, cause_key)).encode()).hexdigest()[:16]
    return f"{key[: DEDUP_KEY_MAX - len(digest) - 1]}~{digest}"
