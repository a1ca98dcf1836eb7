"""Slack text helpers: escaping, code blocks, cutting to Block Kit limits, buttons."""

from __future__ import annotations

import pytest

from bot.text import mrkdwn as st


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain", "plain"),
        ("<!channel>", "&lt;!channel&gt;"),
        ("<!subteam^S0ONCALL>", "&lt;!subteam^S0ONCALL&gt;"),
        ("a & b", "a &amp; b"),
        ("&lt;", "&amp;lt;"),
        ("<https://evil|click>", "&lt;https://evil|click&gt;"),
        ("", ""),
    ],
)
def test_escape(raw: str, escaped: str) -> None:
    assert st.escape(raw) == escaped
    assert st.unescape(escaped) == raw


@pytest.mark.parametrize(
    ("more", "hint", "note"),
    [
        (1, "", "(cut: 1 more line)"),
        (
            1234,
            "use /logs 42 lines=5000 for the file",
            "(cut: 1,234 more lines; use /logs 42 lines=5000 for the file)",
        ),
    ],
)
def test_cut_note(more: int, hint: str, note: str) -> None:
    assert st.cut_note(more, hint) == note


def test_cut_lines_short_text_is_untouched() -> None:
    assert st.cut_lines("a\nb", 10) == "a\nb"


@pytest.mark.parametrize("max_chars", [40, 100, 3000])
@pytest.mark.parametrize("keep", ["head", "tail"])
def test_cut_lines_fits_and_says_how_much(max_chars: int, keep: str) -> None:
    text = "\n".join(f"line {i}" for i in range(2000))
    cut = st.cut_lines(text, max_chars, keep=keep, hint="see file")  # type: ignore[arg-type]
    assert len(cut) <= max_chars
    lines = cut.splitlines()
    note = lines[-1] if keep == "head" else lines[0]
    kept = len([line for line in lines if line.startswith("line ")])  # "…e 1999" is partial
    assert note == st.cut_note(2000 - kept, "see file")
    if keep == "tail":
        assert lines[-1].endswith("line 1999"[-3:])
    else:
        assert lines[0].startswith("line 0"[:3])


@pytest.mark.parametrize("keep", ["head", "tail"])
def test_cut_lines_one_huge_line(keep: str) -> None:
    cut = st.cut_lines("x" * 10_000, 100, keep=keep)  # type: ignore[arg-type]
    assert len(cut) <= 100
    assert "…" in cut and "(cut: 1 more line)" in cut


def test_code_block_escapes_and_keeps_fence_closed() -> None:
    block = st.code_block("<!channel> ``` & done")
    assert block.startswith("```\n") and block.endswith("\n```")
    inner = block[4:-4]
    assert "<" not in inner and "```" not in inner
    assert "&lt;!channel&gt;" in inner and "&amp;" in inner


def test_code_block_of_a_long_log_keeps_the_tail_within_section_limit() -> None:
    log = "\n".join(f"step {i} loss <{i}>" for i in range(5000))
    block = st.code_block(log, hint="use /logs 4187 for the file")
    assert len(block) <= st.SECTION_TEXT_MAX
    assert "step 4999 loss &lt;4999&gt;" in block
    assert "more lines; use /logs 4187 for the file)" in block


def test_section_is_cut_to_3000() -> None:
    block = st.section("word " * 2000)
    assert block["type"] == "section"
    assert len(block["text"]["text"]) <= 3000


def test_fit_blocks_caps_count_and_section_text() -> None:
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "y" * 5000}}] * 60
    fitted = st.fit_blocks(blocks)
    assert len(fitted) == st.BLOCKS_MAX
    assert all(len(b["text"]["text"]) <= 3000 for b in fitted[:-1])
    assert fitted[-1]["elements"][0]["text"] == "(cut: 11 more blocks)"
    assert st.fit_blocks(blocks[:3]) == [st._fit_block(b) for b in blocks[:3]]


def test_cancel_button_has_confirm_dialog() -> None:
    element = st.cancel_button("L-7f3a", job_label="job <4187>")
    assert element["action_id"] == "trainbot_cancel"
    assert element["value"] == "L-7f3a"
    assert element["style"] == "danger"
    assert element["confirm"]["title"]["type"] == "plain_text"
    assert "&lt;4187&gt;" in element["confirm"]["text"]["text"]


@pytest.mark.parametrize(
    ("make", "action_id"),
    [
        (st.logs_button, "trainbot_logs"),
        (st.attach_button, "trainbot_attach"),
        (st.retry_button, "trainbot_retry"),
        (lambda v: st.use_partition_button("a4", v), "trainbot_use_partition"),
    ],
)
def test_buttons(make: object, action_id: str) -> None:
    element = make("L-1|a4")  # type: ignore[operator]
    assert element["type"] == "button"
    assert element["action_id"] == action_id
    assert element["value"] == "L-1|a4"
    assert element["text"]["type"] == "plain_text"


def test_button_rejects_bad_ids_and_long_values() -> None:
    with pytest.raises(ValueError, match="must start with"):
        st.button("x", "other_id", "v")
    with pytest.raises(ValueError, match="2000"):
        st.logs_button("v" * 2001)


def test_actions_block() -> None:
    block = st.actions(st.logs_button("L-1"), st.retry_button("L-1"))
    assert block == {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Logs", "emoji": True},
                "action_id": "trainbot_logs",
                "value": "L-1",
            },
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Retry", "emoji": True},
                "action_id": "trainbot_retry",
                "value": "L-1",
                "style": "primary",
            },
        ],
    }
    many = st.actions(*[st.logs_button(str(i)) for i in range(30)])
    assert [e["value"] for e in many["elements"]] == [str(i) for i in range(25)]  # Slack's cap
