"""A launch's run record as the App Home's **Record** button shows it, in a modal: the
exact command, the names it exported, the recipes checkout's commit and its uncommitted
changes (the diff the probe kept, cut and said so), and the image's identity.

Pure. Every field came from the login node (the submit script's probe), so it is shown
escaped, in code blocks.
"""

from __future__ import annotations

from bot.lifecycle.launch import Launch
from bot.text.actions import ACTION_RECORD
from bot.text.front import Reply
from bot.text.mrkdwn import button, code_block, context, escape, section
from cluster.launching.run_record import MAX_DIFF_BYTES

MODAL_TITLE = "Run record"
DIFF_CHARS = 2900  # a section holds 3000


def record_button(launch: Launch) -> dict[str, object] | None:
    """The App Home's button for a launch whose submit recorded what it ran."""
    if not any(a.record for a in launch.attempts):
        return None
    return button("Record", ACTION_RECORD, launch.id)


def record_reply(launch: Launch) -> Reply:
    """The newest attempt's record in a modal, or why there is none."""
    attempt = next((a for a in reversed(launch.attempts) if a.record), None)
    if attempt is None or attempt.record is None:
        return Reply(f"{launch.id} has no run record yet: it is written when it is submitted.")
    record = attempt.record
    lines = [
        f"*{launch.id}* · {escape(launch.words)} · attempt {attempt.number}",
        escape(record.summary()),
    ]
    blocks = [section("\n".join(lines)), section("*Command*\n" + code_block(record.command))]
    if record.env_names:
        blocks.append(context("Exported (names only): " + escape(", ".join(record.env_names))))
    if record.recipes_diff:
        cut = f" (cut: only the first {MAX_DIFF_BYTES // 1024} KiB were kept)"
        head = "*Uncommitted recipe changes*" + (cut if record.recipes_diff_truncated else "")
        blocks.append(
            section(
                head + "\n" + code_block(record.recipes_diff, max_chars=DIFF_CHARS, keep="head")
            )
        )
    elif record.dirty:
        blocks.append(context("Its uncommitted changes were not read (an older record)."))
    return Reply("\n".join(lines), blocks=blocks, modal=MODAL_TITLE)
