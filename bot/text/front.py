"""The seam between the bot's core and its front ends (Slack, console).

Front ends turn what people type or click into ``Incoming`` objects and hand
them to a ``Handler``; the core answers with a ``Reply`` (shown only to the
asker) and, over time, speaks in channels and threads through a ``Front``.
Nothing here knows Slack: the Slack front end maps these onto the Web API, the
console onto a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from cluster.errors import TrainbotError

Blocks = list[dict[str, Any]]


# Slack events the core answers: a user group changed (ask its members again), and the
# App Home tab opened (build it).
GROUP_EVENTS = ("subteam_members_changed", "subteam_updated")
HOME_EVENT = "app_home_opened"


@dataclass(frozen=True)
class Incoming:
    """A slash command (``command`` like "/train") or a button click (``action_id``)."""

    user_id: str
    channel_id: str
    command: str = ""
    text: str = ""
    user_name: str = ""
    team_id: str = ""
    action_id: str = ""
    action_value: str = ""
    thread_ts: str = ""  # the message a clicked button belongs to
    trigger_id: str = ""
    event: str = ""  # an Events API event the core cares about (a user group changed)


@dataclass(frozen=True)
class Reply:
    """What only the asker sees. ``error`` replies are shown as such (red in a terminal)."""

    text: str
    blocks: Blocks = field(default_factory=list)
    error: bool = False
    # Filled when the answer is a file (long logs, a loss curve).
    file_name: str = ""
    file_content: bytes = b""
    # Set: the answer is shown in a modal of this title (``blocks``), not as a message;
    # for what must be seen once and never sit in a channel (a new API token).
    modal: str = ""
    modal_submit: str = ""  # the modal's callback id, when it has inputs to submit


class Handler(Protocol):
    async def __call__(self, incoming: Incoming) -> Reply: ...


class FrontError(TrainbotError):
    """A front end could not deliver something."""

    @property
    def channel_problem(self) -> bool:
        """Whether the channel itself refuses the bot (it is not a member, the channel is
        gone or archived): retrying will not help until someone invites it."""
        return False

    @property
    def reason(self) -> str:
        """A short code for logs and dead letters (Slack's error code, say)."""
        return str(self)


@dataclass(frozen=True)
class MessageRef:
    channel: str
    ts: str


class Front(Protocol):
    """Where the core speaks. Every text passed in is already escaped Slack mrkdwn."""

    async def post(
        self, channel: str, text: str, *, blocks: Blocks | None = None, thread_ts: str = ""
    ) -> MessageRef: ...

    async def update(self, ref: MessageRef, text: str, *, blocks: Blocks | None = None) -> None: ...

    async def post_ephemeral(
        self, channel: str, user: str, text: str, *, blocks: Blocks | None = None
    ) -> None: ...

    async def upload(
        self, channel: str, thread_ts: str, *, filename: str, content: bytes, title: str
    ) -> None: ...

    async def permalink(self, ref: MessageRef) -> str: ...

    async def usergroup_members(self, usergroup_id: str) -> list[str]: ...

    async def user_email(self, user_id: str) -> str | None:
        """The email of the person's Slack profile, if Slack says they confirmed it
        (None: unknown or unconfirmed)."""
        ...

    async def post_to_user(self, user: str, text: str) -> None:
        """A direct message to ``user`` (about their launch, when its channel refuses the bot)."""
        ...

    async def can_post(self, channel: str) -> str:
        """ "" when the bot can post in ``channel``; otherwise why not and how to fix it,
        as mrkdwn for the asker. Answers quickly (cached; a check that cannot be made
        in time counts as "can post")."""
        ...
