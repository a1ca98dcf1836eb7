"""The one error the command language raises: what the user sees, word for word."""

from __future__ import annotations

from cluster.errors import TrainbotError


class CommandError(TrainbotError):
    """Bad command input. ``str(error)`` is the message shown to the user.

    ``field`` names the key or argument at fault (empty when the whole text is),
    ``suggestion`` is a corrected value the front end may offer as a button.
    The message may quote the user's own text: front ends escape it as they
    escape any user text.
    """

    def __init__(self, message: str, *, field: str = "", suggestion: str | None = None) -> None:
        self.message = message
        self.field = field
        self.suggestion = suggestion
        super().__init__(message)

    def __str__(self) -> str:
        return self.message
