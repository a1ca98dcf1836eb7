"""The plain parts a framework's job model declares: a container mount, and the patterns
the built-in recipes' overrides use (the job model itself is
:class:`cluster.launching.spec.Framework`)."""

from __future__ import annotations

from dataclasses import dataclass

#: Override value patterns the built-in recipes share.
STEPS_PATTERN = "[0-9]{1,7}"
FLOAT_PATTERN = r"[0-9]+(\.[0-9]+)?([eE]-?[0-9]{1,3})?"
#: An override's key, and what every override value must also fit, whatever the
#: recipe's own pattern says.
OVERRIDE_KEY_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+){0,7}$"
OVERRIDE_VALUE_PATTERN = r"^[A-Za-z0-9._/:+,@-]{1,200}$"


@dataclass(frozen=True)
class Mount:
    """A directory a launch mounts into its container: where it is and what names it."""

    path: str  # on the login node
    source: str  # what puts it in the launch: "run.py's --data-dir"
    setting: str  # where a person changes it: "data_dir in the cluster's config"
