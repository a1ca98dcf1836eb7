"""The App Home's Record button and the modal it opens: the command, the names exported,
the recipes' commit and their uncommitted changes (escaped, cut and said so)."""

from __future__ import annotations

from bot.core import home, record_view
from bot.lifecycle.launch import Attempt, Launch
from bot.text.actions import ACTION_RECORD
from cluster.launching.run_record import RunRecord
from commands import TrainRequest

DIFF = "diff --git a/nemo/sft/x.py b/nemo/sft/x.py\n-lr = 1e-5\n+lr = 3e-5  # <!channel>\n"


def launch(record: RunRecord | None) -> Launch:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    launch = Launch(request=request, user_id="U0ALICE", user_name="alice", channel="C1")
    launch.attempts.append(Attempt(number=1, job_id="41", record=record))
    return launch


def test_the_modal_shows_the_command_names_and_the_diff_escaped() -> None:
    record = RunRecord(
        command="python3 run.py -e slurm -s sft/x.py",
        env_names=("HF_TOKEN", "NEMORUN_HOME"),
        recipes_commit="a" * 40,
        recipes_changed=1,
        recipes_diff=DIFF,
        recipes_diff_truncated=True,
    )
    stored = launch(record)
    reply = record_view.record_reply(stored)
    assert reply.modal == "Run record" and not reply.error
    text = "\n".join(str(b) for b in reply.blocks)
    assert "python3 run.py -e slurm -s sft/x.py" in text
    assert "HF_TOKEN, NEMORUN_HOME" in text
    assert "1 file changed and not committed" in text
    assert "+lr = 3e-5  # &lt;!channel&gt;" in text and "<!channel>" not in text
    assert "(cut: only the first 8 KiB were kept)" in text


def test_a_launch_without_a_record_has_no_button_and_says_why() -> None:
    stored = launch(None)
    assert record_view.record_button(stored) is None
    assert "has no run record yet" in record_view.record_reply(stored).text
    blocks = home.home_blocks([stored], [], {}, {})
    assert not any("accessory" in b for b in blocks)
    recorded = launch(RunRecord(command="x"))
    blocks = home.home_blocks([recorded], [], {}, {})
    buttons = [b["accessory"] for b in blocks if "accessory" in b]
    assert [(b["action_id"], b["value"]) for b in buttons] == [(ACTION_RECORD, recorded.id)]
