"""A run's record: enough to run it again and to tell what it ran.

The exact launcher command line and the names (never the values) of what the submit
script exports are known before anything runs (:class:`~cluster.launching.launch.LaunchPlan`).
What only the login node knows, the recipes checkout's commit and whether it has
changes not committed, and the image file's size and modification time, is read by a
few lines the submit script runs before the launcher (:func:`probe_lines`), which print
to stderr, one ``trainbot-record`` line each; :func:`read_record` reads them back.
Nothing here fails a submit: a line that cannot be read leaves its field unknown.
"""

from __future__ import annotations

import base64
import binascii
import re
import time

from pydantic import BaseModel, ConfigDict

from cluster.site.image_refs import REGISTRY_REF_RE, is_registry_ref
from cluster.ssh.remote import quote_path

MARK = "trainbot-record"
MAX_DIFF_BYTES = 8192  # the uncommitted changes kept, at most; beyond, said as truncated
# Files whose changes are never read: the guide's secrets file (HF_TOKEN, WANDB_API_KEY).
SECRET_FILES = ("*auth.sh", "*.env", "*secret*", "*token*", "*credential*")
# A changed line that sets something named like a secret keeps its name, not its value.
SECRET_LINE_RE = re.compile(
    r"(?i)^([+-][^=:\n]*(?:token|secret|password|passwd|api_key|apikey|_key)[^=:\n]*[=:]).*$",
    re.MULTILINE,
)


class RunRecord(BaseModel):
    """What one submit ran, as the login node ran it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    command: str = ""  # the launcher's command line, exactly
    env_names: tuple[str, ...] = ()  # exported to it; values never kept
    recipes_dir: str = ""
    recipes_commit: str = ""  # "" when the checkout is not a git repository (or unknown)
    recipes_changed: int = 0  # files changed and not committed (git status --porcelain)
    recipes_diff: str = ""  # those changes (git diff HEAD), secrets' values left out
    recipes_diff_truncated: bool = False  # the diff went on past MAX_DIFF_BYTES
    image: str = ""  # the image's path
    image_size: int | None = None  # bytes; None when it could not be read
    image_mtime: int | None = None  # epoch seconds
    # A registry image's digest: from the reference when it pins one (``@sha256:...``), else
    # from what the job printed once it started ("": not known, "resolved at start")
    image_digest: str = ""

    @property
    def dirty(self) -> bool:
        return bool(self.recipes_commit) and self.recipes_changed > 0

    def summary(self) -> str:
        """One line for the thread (plain text: the caller escapes it)."""
        if self.recipes_commit:
            state = (
                f", {self.recipes_changed} file{'s' if self.recipes_changed != 1 else ''} "
                "changed and not committed"
                if self.dirty
                else ", clean"
            )
            recipes = f"recipes at {self.recipes_commit[:12]}{state}"
        else:
            recipes = "recipes not a git checkout (their version is not recorded)"
        image = self.image or "(none)"
        if is_registry_ref(self.image):
            digest = self.image_digest or "resolved at start"
            image += f" (registry image; digest: {digest})"
        elif self.image_size is not None and self.image_mtime is not None:
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.image_mtime))
            image += f" ({self.image_size:,} bytes, modified {when})"
        return f"Record: {recipes}; image {image}."


def probe_lines(recipes_dir: str, image: str) -> list[str]:
    """Script lines that print the checkout's commit and changes and the image's size and
    mtime to stderr; they never fail the script."""
    repo = quote_path(recipes_dir)
    lines = [
        f'printf "{MARK} commit %s\\n" "$(git -C {repo} rev-parse HEAD 2>/dev/null || true)"'
        " >&2 || true",
        f'printf "{MARK} changed %s\\n" "$(git -C {repo} status --porcelain 2>/dev/null'
        ' | wc -l || true)" >&2 || true',
        f'printf "{MARK} diff %s\\n" "$(git -C {repo} diff HEAD -- . '
        + " ".join(f"':(exclude){p}'" for p in SECRET_FILES)
        + f' 2>/dev/null | head -c {MAX_DIFF_BYTES + 1} | base64 -w0 2>/dev/null || true)"'
        " >&2 || true",
    ]
    if image:
        lines.append(
            f'printf "{MARK} image %s\\n" "$(stat -c \'%s %Y\' {quote_path(image)} 2>/dev/null'
            ' || true)" >&2 || true'
        )
    return lines


def read_record(stderr: str, *, command: str, env_names: tuple[str, ...], recipes_dir: str,
                image: str) -> RunRecord:  # fmt: skip
    """The record of a submit from what it printed."""
    found: dict[str, str] = {}
    for line in stderr.splitlines():
        if line.startswith(MARK + " "):
            _, key, *rest = line.split(" ", 2)
            found[key] = rest[0].strip() if rest else ""
    commit = found.get("commit", "")
    changed = found.get("changed", "0")
    size, mtime = None, None
    parts = found.get("image", "").split()
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        size, mtime = int(parts[0]), int(parts[1])
    diff, truncated = read_diff(found.get("diff", ""))
    pinned = REGISTRY_REF_RE.fullmatch(image) if is_registry_ref(image) else None
    return RunRecord(
        command=command,
        env_names=env_names,
        recipes_dir=recipes_dir,
        recipes_commit=commit if len(commit) == 40 and commit.isalnum() else "",
        recipes_changed=int(changed) if changed.isdigit() else 0,
        recipes_diff=diff,
        recipes_diff_truncated=truncated,
        image=image,
        image_size=size,
        image_mtime=mtime,
        image_digest=(pinned["digest"] or "") if pinned else "",
    )


_DIGEST_LINE_RE = re.compile(r"(?i)\b(?:pyxis|enroot)\b.*?\b(sha256:[0-9a-f]{64})\b")


def digest_from_log(text: str) -> str:
    """The image digest a job's log names on a pyxis or enroot line ("" when none does:
    pyxis's own lines name the reference as given, so only a pinned reference or a site
    whose import prints its digest fills it)."""
    found = _DIGEST_LINE_RE.search(text)
    return found[1] if found else ""


def read_diff(encoded: str) -> tuple[str, bool]:
    """The probe's base64 diff as text, cut to :data:`MAX_DIFF_BYTES` (True: it was longer),
    each line that sets something named like a secret keeping only its name; ("", False)
    when there is none or it does not decode."""
    try:
        raw = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return "", False
    truncated = len(raw) > MAX_DIFF_BYTES
    text = raw[:MAX_DIFF_BYTES].decode("utf-8", errors="replace")
    return SECRET_LINE_RE.sub(r"\1 <value not kept>", text), truncated


def without_record(stderr: str) -> str:
    """A submit's stderr without the record's lines (for error messages)."""
    return "\n".join(line for line in stderr.splitlines() if not line.startswith(MARK + " "))
