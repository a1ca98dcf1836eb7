"""An ask as it travels on Redis: a validated model, bounded in size and age, signed.

The web role writes each ask as ``{"body": "<the ask as JSON>", "sig": "<hex>"}``, the
HMAC-SHA256 of the body's bytes under ``TRAINBOT_ASK_KEY``, a key the web and worker
processes hold and Redis never does. A worker checks, in this order, before it parses
anything: the size (:data:`MAX_ASK_BYTES`), the signature (constant-time), then the
body against :class:`Ask` (unknown fields refused), then its times: issued no later
than a few seconds from now, not past ``until``, and alive no longer than
:data:`MAX_ASK_LIFETIME_S`. A used id is refused for the ask's whole life (the store
remembers it until then), so an ask copied back onto the list does nothing.

An ask names a launch and what to do, never a path, a Unix user or job ids: a worker
finds those in the launch's record and checks them there (:mod:`bot.gateway.asks`).

The answer comes back signed the same way, bound to the ask's id
(:func:`seal_answer`): the asker takes a worker's answer to its own ask only, and
passes over anything else put on its answer list (:func:`unseal_answer`), so a capacity,
an estimate, an account or a log tail shown to a person is what a worker read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from cluster.images.listing import ImageListing
from cluster.launching.jobs import MAX_TAIL_LINES
from cluster.preflight.discovery import ClusterCapacity
from cluster.site.accounts import Account
from cluster.site.login import CLUSTER_USER_PATTERN
from cluster.site.profile_fields import CLUSTER_NAME_PATTERN, SLURM_NAME_PATTERN
from cluster.slurm.sbatch import JobShape, StartEstimate
from commands.values import LAUNCH_ID_PATTERN

# What an answer holds, as JSON: the worker dumps it, the asker validates it.
CAPACITY = TypeAdapter(ClusterCapacity)
ESTIMATE = TypeAdapter(StartEstimate)
SHAPE = TypeAdapter(JobShape)
ACCOUNT = TypeAdapter(Account)
IMAGES = TypeAdapter(ImageListing)

MAX_ASK_BYTES = 4096  # an ask holds ids and a shape; anything longer is not one
MAX_ANSWER_BYTES = 4 * 1024 * 1024  # a log tail is the longest answer (MAX_TAIL_LINES)
MAX_ASK_LIFETIME_S = 120.0  # no ask lives longer (asks wait at most a minute)
CLOCK_SKEW_S = 5.0  # an ask issued this far in the future is still taken
ASK_ID_PATTERN = r"^[0-9a-f]{24}$"
SLACK_ID_PATTERN = r"^[A-Za-z0-9._@-]{1,80}$"

ClusterName = Annotated[str, Field(pattern=CLUSTER_NAME_PATTERN)]
LaunchId = Annotated[str, Field(pattern=LAUNCH_ID_PATTERN)]


class BadAsk(Exception):
    """An ask a worker refuses: what was wrong, and the ask's id when one could be read
    (so the asker gets the reason instead of waiting)."""

    def __init__(self, reason: str, ask_id: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.ask_id = ask_id


class _What(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Capacity(_What):
    kind: Literal["capacity"] = "capacity"
    cluster: ClusterName


class Images(_What):
    """A cluster's images for /images (the profile's and the recipes checkout's)."""

    kind: Literal["images"] = "images"
    cluster: ClusterName


class AccountOf(_What):
    kind: Literal["account"] = "account"
    cluster: ClusterName
    name: str = Field(pattern=CLUSTER_USER_PATTERN)


class Shape(_What):
    nodes: int = Field(ge=1, le=4096)
    partition: str = Field(pattern=SLURM_NAME_PATTERN)
    time_limit: str | None = Field(default=None, pattern=r"^[0-9][0-9:-]{0,15}$")
    account: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,64}$")  # policy's
    exclude: str | None = Field(default=None, pattern=r"^[A-Za-z0-9,\[\]_-]{1,200}$")


class Estimate(_What):
    """A start estimate for a person: the worker decides as whom, and checks the shape."""

    kind: Literal["estimate"] = "estimate"
    cluster: ClusterName
    user_id: str = Field(pattern=SLACK_ID_PATTERN)
    groups: tuple[Annotated[str, Field(pattern=SLACK_ID_PATTERN)], ...] = Field(
        default=(), max_length=64
    )
    shape: Shape
    timeout_s: float = Field(gt=0, le=MAX_ASK_LIFETIME_S)


class Cancel(_What):
    """Cancel the Slurm jobs a cancelled launch's record holds."""

    kind: Literal["cancel"] = "cancel"
    launch: LaunchId


class Tail(_What):
    """The last lines of the log the launch's record names."""

    kind: Literal["tail"] = "tail"
    launch: LaunchId
    lines: int = Field(ge=1, le=MAX_TAIL_LINES)


class NodeUpdate(_What):
    """Drain or resume a node for on-call: the worker decides as whom, and asks again
    whether the person may."""

    kind: Literal["node"] = "node"
    cluster: ClusterName
    node: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$")
    action: Literal["drain", "resume"]
    reason: str = Field(default="", pattern=r"^[\w .,:;()/@#+=-]{0,200}$")
    user_id: str = Field(pattern=SLACK_ID_PATTERN)
    groups: tuple[Annotated[str, Field(pattern=SLACK_ID_PATTERN)], ...] = Field(
        default=(), max_length=64
    )


class DeleteCheckpoints(_What):
    """Delete some of an ended launch's checkpoints: names its record lists, in the
    directory its record names (the worker takes both from the record)."""

    kind: Literal["delete_checkpoints"] = "delete_checkpoints"
    launch: LaunchId
    names: tuple[str, ...] = Field(min_length=1, max_length=1000)


What = Annotated[
    Capacity | Images | AccountOf | Estimate | Cancel | Tail | NodeUpdate | DeleteCheckpoints,
    Field(discriminator="kind"),
]


class Ask(BaseModel):
    """One ask: its id (a fresh random one), when it was issued and until when it may be
    answered, and what to do."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=ASK_ID_PATTERN)
    issued_at: float
    until: float
    what: What

    @classmethod
    def new(cls, what: What, timeout_s: float) -> Ask:
        now = time.time()
        return cls(id=secrets.token_hex(12), issued_at=now, until=now + timeout_s, what=what)

    @property
    def kind(self) -> str:
        return self.what.kind


def _mac(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def seal(ask: Ask, key: bytes) -> str:
    """The ask as it goes on the list: its body and the body's signature."""
    body = ask.model_dump_json()
    return json.dumps({"body": body, "sig": _mac(key, body.encode())})


SIGNATURE_DIFFERS = (
    "the ask's signature does not match (the web and worker processes must share "
    "the same TRAINBOT_ASK_KEY)"
)
KEY_DIFFERS = (
    "a worker could not check this ask's signature: the web and worker processes must "
    "share the same TRAINBOT_ASK_KEY"
)


def says_key_differs(sealed: object) -> bool:
    """Whether an answer the asker cannot check is a worker's refusal of a badly signed
    ask: the one unchecked answer an asker acts on, and only to say :data:`KEY_DIFFERS`
    in its own words (a forger can make an ask fail, which it could anyway, but can make
    it say nothing of its own)."""
    if not isinstance(sealed, dict) or not isinstance(sealed.get("body"), str):
        return False
    try:
        answer = json.loads(sealed["body"])
    except ValueError:
        return False
    return (
        isinstance(answer, dict)
        and answer.get("error") == f"the worker refused the ask: {SIGNATURE_DIFFERS}"
    )


class BadAnswer(Exception):
    """An answer the asker passes over: not signed by a worker for this ask."""


def _answer_mac(key: bytes, ask_id: str, body: str) -> str:
    return _mac(key, f"answer:{ask_id}:".encode() + body.encode())


def seal_answer(
    ask_id: str, answer: dict[str, Any], key: bytes, redact: Callable[[str], str] | None = None
) -> dict[str, str]:
    """A worker's answer to ``ask_id`` as it goes on the answer list: its body (redacted
    first, so the store's own redaction changes nothing signed) and the body's signature,
    bound to the ask."""
    body = json.dumps(answer)
    if redact is not None:
        body = redact(body)
    return {"body": body, "sig": _answer_mac(key, ask_id, body)}


def unseal_answer(ask_id: str, sealed: object, key: bytes) -> dict[str, Any]:
    """The answer to ``ask_id`` in ``sealed``, its signature checked; else :class:`BadAnswer`."""
    if not isinstance(sealed, dict) or set(sealed) != {"body", "sig"}:
        raise BadAnswer("the answer is not signed (it needs exactly a body and a sig)")
    body, sig = sealed["body"], sealed["sig"]
    if not isinstance(body, str) or not isinstance(sig, str):
        raise BadAnswer("the answer's body and sig must be strings")
    if len(body.encode()) > MAX_ANSWER_BYTES:
        raise BadAnswer(f"the answer is over {MAX_ANSWER_BYTES} bytes")
    if not hmac.compare_digest(_answer_mac(key, ask_id, body), sig):
        raise BadAnswer("the answer's signature does not match this ask")
    try:
        answer = json.loads(body)
    except ValueError:
        raise BadAnswer("the answer's body is not JSON") from None
    if not isinstance(answer, dict):
        raise BadAnswer("the answer's body is not an object")
    return answer


def _loose_id(body: object) -> str:
    """The id an unverified body claims, only to address a refusal to its asker."""
    found = re.search(r'"id"\s*:\s*"([0-9a-f]{24})"', body) if isinstance(body, str) else None
    return found.group(1) if found else ""


def unseal(raw: str, key: bytes, now: float | None = None) -> Ask:
    """The ask in ``raw``, checked (size, signature, fields, times); else :class:`BadAsk`."""
    if len(raw.encode()) > MAX_ASK_BYTES:
        raise BadAsk(f"the ask is {len(raw.encode())} bytes; at most {MAX_ASK_BYTES} are taken")
    try:
        outer = json.loads(raw)
    except ValueError:
        raise BadAsk("the ask is not JSON") from None
    if not isinstance(outer, dict) or set(outer) != {"body", "sig"}:
        raise BadAsk("the ask is not signed (it needs exactly a body and a sig)", _loose_id(raw))
    body, sig = outer["body"], outer["sig"]
    if not isinstance(body, str) or not isinstance(sig, str):
        raise BadAsk("the ask's body and sig must be strings", _loose_id(body))
    if not hmac.compare_digest(_mac(key, body.encode()), sig):
        raise BadAsk(SIGNATURE_DIFFERS, _loose_id(body))
    try:
        ask = Ask.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadAsk(f"the ask is malformed ({where}: {first['msg']})", _loose_id(body)) from None
    now = time.time() if now is None else now
    if ask.issued_at > now + CLOCK_SKEW_S:
        raise BadAsk("the ask was issued in the future (are the clocks apart?)", ask.id)
    if ask.until - ask.issued_at > MAX_ASK_LIFETIME_S:
        raise BadAsk(f"the ask would live over {MAX_ASK_LIFETIME_S:g} s", ask.id)
    if ask.until < now:
        raise BadAsk(f"the ask expired {now - ask.until:.1f} s ago", ask.id)
    return ask
