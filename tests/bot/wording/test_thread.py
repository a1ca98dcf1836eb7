"""The words of each move's thread line (bot/wording/thread.py), from the facts its event
carries: one test per wording, what a person or a cluster wrote escaped, an entry that
holds its own text posted as it is, and a move with no words refused with a reason."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from bot.lifecycle import phases
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.wording import thread
from commands.requests import TrainRequest


def says(move: str, **facts: object) -> str:
    return thread.line(Event("thread", "L-1", data={"move": move, **facts}))


COMMAND = "/train sft llama3p1_8b cluster=a4"


def test_queue() -> None:
    assert says("queue", by="U1", command=COMMAND) == f"Queued by <@U1>: `{COMMAND}`"
    # an entry an older version wrote holds its words (``waits``): posted as they are
    waits = says("queue", by="U1", command=COMMAND, waits="; waits until L-0 completes")
    assert waits == f"Queued by <@U1>: `{COMMAND}`; waits until L-0 completes"
    facts = {"placed": "a3u", "starts_from": "L-1", "waits_for": "L-0", "until": "ends"}
    at = datetime(2026, 12, 24, 8, 0, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    assert says("queue", by="U1", command=COMMAND, **facts, at=at, tz="Europe/Berlin") == (
        f"Queued by <@U1>: `{COMMAND}`\n📍 cluster=auto chose a3u: Slurm starts it there first."
        "\n▶️ It starts from L-1's newest complete checkpoint; its thread says which when it goes."
        "\n⏳ It starts at 2026-12-24 08:00 Europe/Berlin; waits until L-0 ends."
    )


def test_ask_approval() -> None:
    assert says(
        "ask_approval", by="U1", command=COMMAND, reason="above 4 nodes.", cluster="a4"
    ) == (
        f"✋ asks for `{COMMAND}`. above 4 nodes. A trainbot admin or an approver for a4 "
        "can approve it."
    )


def test_approve_and_reject() -> None:
    assert says("approve", by="U2") == "✅ Approved by <@U2>. Queued."
    assert says("reject", by="U2") == "⛔ Not approved by <@U2>. Nothing was submitted."


def test_submitted() -> None:
    facts = {"job": "41", "cluster": "a4", "partition": "gpu", "nodes": 2, "attempt": 1}
    assert says("submitted", how="submitted", **facts) == (
        "Submitted: Slurm job 41 on a4, partition gpu, 2 nodes."
    )
    more = says(
        "submitted", how="found_after_restart", user="svc-train", log_dir="/logs/L",
        record="recipes at abc, clean", **{**facts, "nodes": 1, "attempt": 2},
    )  # fmt: skip
    assert more == (
        "Found the job submitted before a restart: Slurm job 41 on a4, partition gpu, 1 node "
        "as svc-train. Logs: `/logs/L` (attempt 2)\nrecipes at abc, clean"
    )
    assert says("submitted", job="41", after_cancel=True) == (
        "🚫 Slurm job 41 appeared after the launch was cancelled: cancelling it."
    )


def test_running_and_requeued() -> None:
    assert says("running", job="41", nodes="dev[1-2]") == "Running on dev[1-2]."
    assert says("running", job="41") == "Running."
    assert says("requeued", job="41") == "Job 41 is pending again (requeued)."


def test_retry_and_old_job_gone() -> None:
    assert says("retry", by="U2", job="41") == (
        "🔁 Retry asked for by <@U2>: cancelling job 41; a new attempt is submitted once "
        "Slurm shows it gone."
    )
    assert says("old_job_gone", job="41") == "Job 41 is gone: submitting a new attempt."
    assert says("old_job_gone", job="41", left="a4", cluster="a3u") == (
        "🔀 Job 41 on a4 is gone; moved to a3u."
    )


def test_cancel() -> None:
    assert says("cancel", by="U2") == "🚫 Cancelled by <@U2>."
    assert says("cancel", by="U2", in_flight=True) == (
        "🚫 Cancelled by <@U2>. A submission was in flight: trainbot looks the job up by "
        "the launch id and cancels it if Slurm has it."
    )


def test_what_a_person_or_a_cluster_wrote_is_escaped() -> None:
    """Facts come from a request, a config or a cluster: Slack's control characters in
    them show as typed, never as a mention or a link."""
    assert says("running", nodes="<!channel>") == "Running on &lt;!channel&gt;."
    line = says("queue", by="U1", command="/train sft <@U9> & co")
    assert line == "Queued by <@U1>: `/train sft &lt;@U9&gt; &amp; co`"
    assert "&lt;!here&gt;" in says("ask_approval", by="U1", command=COMMAND, reason="<!here>")


def test_an_entry_that_holds_its_text_is_posted_as_it_is() -> None:
    """Written before events carried facts (or by a caller that still words its line)."""
    old = Event("thread", "L-1", "Running on dev[9].", data={"move": "running", "job": "41"})
    assert thread.line(old) == "Running on dev[9]."
    bare = Event("thread", "L-1", "📟 On-call was paged in the on-call channel.")
    assert thread.line(bare) == "📟 On-call was paged in the on-call channel."


def test_a_line_with_no_text_and_no_words_for_its_move_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match=r"move 'gone' has no words here \(one of: .*cancel"):
        thread.line(Event("thread", "L-1", data={"move": "gone"}))


def test_every_move_that_writes_facts_alone_has_words() -> None:
    """A move whose thread line carries no text must be one the wording knows."""
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    launch = Launch(request=request, user_id="U1", channel="C1")
    _, events = phases.queue(launch, phases.Facts(by="U1"))
    (line,) = [e for e in events if e.kind == "thread"]
    assert not line.text and line.data["move"] in thread.SAYINGS


def test_the_mention_and_the_dm() -> None:
    request = TrainRequest(workload="sft", model="llama3p1_8b", framework="nemo", cluster="a4")
    launch = Launch(request=request, user_id="U0ALICE", channel="C1")
    line = Event("thread", launch.id, data={"move": "cancel", "by": "U2", "mention": True})
    assert thread.posted(launch, line) == "<@U0ALICE> 🚫 Cancelled by <@U2>."
    quiet = Event("thread", launch.id, data={"move": "running", "nodes": "dev1"})
    assert thread.posted(launch, quiet) == "Running on dev1."
    dm = thread.dm(launch, thread.line(line), "https://x/p")
    assert (
        dm
        == f"sft llama3p1_8b on a4 (`{launch.id}`): 🚫 Cancelled by <@U2>. · <https://x/p|thread>"
    )


def test_move_refused_and_moved() -> None:
    refused = says("move_refused", job="41", left="a4", cluster="a3u", refusal="not yours.")
    assert refused == (
        "🔀 Still pending on a4; a3u would start it now, but it was not moved there: not yours."
    )
    moved = says("moved", job="41", left="a4", cluster="a3u", waited_s=900, why="3 nodes idle")
    assert moved == (
        "🔀 Still pending on a4 after 15 min while a3u would start it now (3 nodes idle): "
        "cancelled job 41 there before it started and moved the launch to a3u, once; its "
        "GPU-hour estimate counts on a3u now."
    )


def test_late_job() -> None:
    assert says("late_job", job="41", cluster="a4", error="") == "Cancelled Slurm job 41."
    assert says("late_job", job="41", cluster="a4", error="timed out <x>") == (
        "⚠️ Could not cancel Slurm job 41 (timed out &lt;x&gt;): cancel it by hand "
        "(`scancel 41` on a4)."
    )


def test_wandb_summary() -> None:
    metrics = {f"m{i}": float(i) for i in range(10)}
    said = says("wandb_summary", run="r1", metrics=metrics)
    assert said == (
        "📈 W&B summary of run `r1`: m0 0 · m1 1 · m2 2 · m3 3 · m4 4 · m5 5 · m6 6 · m7 7 "
        "(and 2 more)"
    )


def test_what_the_poller_reads_of_a_running_job() -> None:
    assert says("checkpoint", step=1200) == "💾 Checkpoint step 1,200 saved."
    assert says("run_link", tracker="wandb", url="https://wandb.ai/e/p/runs/r1") == (
        "📈 W&B run: <https://wandb.ai/e/p/runs/r1|r1>"
    )
    assert says("slurm_state", state="SUSPENDED") == "Slurm state: SUSPENDED."
    assert says("attach_ready", job="41", launch="L-1", command="srun --jobid 41 --pty bash") == (
        "🔌 Interactive job 41 is ready to attach: `/attach L-1` shows you how "
        "(`srun --jobid 41 --pty bash`)."
    )


def test_tensorboard_with_and_without_the_clusters_link() -> None:
    linked = says("tensorboard", log_dir="/logs/a b", job="41", url="https://tb/x?j=41", host="h")
    assert linked == "📊 TensorBoard: <https://tb/x?j=41|job 41> (logs in `/logs/a b`)"
    bare = says("tensorboard", log_dir="/logs/a b", job="41", url="", host="login.a4")
    assert bare == (
        "📊 TensorBoard logs in `/logs/a b`. To view them, run `tensorboard --logdir "
        "'/logs/a b'` on the login node (login.a4)."
    )


def test_slurm_requeue_after_a_node_failure_or_another_cause_or_held() -> None:
    assert says("slurm_requeue", job="41", restart=1, node_failure=True) == (
        "⚠️ Slurm requeued job 41 (restart 1) after a node failure; it will run again from "
        "its newest checkpoint. No second job was submitted."
    )
    assert says("slurm_requeue", job="41", restart=2, before="PREEMPTED", held="held by <x>") == (
        "🔁 Slurm requeued job 41 (restart 2; the run before ended PREEMPTED, not a node "
        "failure); it is held by &lt;x&gt; and will not run again until it is released. No "
        "second job was submitted."
    )


def test_what_a_worker_finds_when_a_submit_went_wrong() -> None:
    assert says("old_job_stays", job="41", error="timed out") == (
        "⚠️ Job 41 could not be cancelled (timed out); it keeps running and no second job "
        "was submitted."
    )
    assert says("lookup_unreachable", cluster="a4", error="no route") == (
        "⚠️ a4 cannot be reached (no route), so trainbot cannot tell whether the job was "
        "submitted. It keeps looking it up by the launch id and submits nothing until Slurm "
        "answers."
    )
    assert says("outcome_unknown", cluster="a4", error="EOF", wait_s=90.0) == (
        "⚠️ The submission on a4 did not finish (EOF): the job may exist. Looking it up by "
        "the launch id in 90 s before anything else."
    )
    assert says("launcher_error", output="Traceback\n```boom```") == (
        "The launcher's error:\n```\nTraceback\n`\u200b`\u200b`boom`\u200b`\u200b`\n```"
    )
    assert says("tokenizer_seeded", summary="seeded 3 files <ok>") == "seeded 3 files &lt;ok&gt;"


def test_submitting_says_what_pre_flight_found() -> None:
    facts = {
        "partition": {"name": "a4", "usable": 4, "nodes": 4, "gpus_idle": 24},
        "image": "nemo-20250721.sqsh",
        "script_label": "recipe",
        "script": "sft/llama3p1_8b_sft.py",
        "notes": ["HF_TOKEN is not configured for a4 (TRAINBOT_HF_TOKEN is unset)"],
    }
    assert says("submitting", **facts) == (
        "Pre-flight ok: partition a4 up (4 of 4 nodes usable, 24 GPUs free), image "
        "nemo-20250721.sqsh found, recipe sft/llama3p1_8b_sft.py found, directories "
        "writable.\nNote: HF_TOKEN is not configured for a4 (TRAINBOT_HF_TOKEN is unset)."
    )
    pulled = says("submitting", registry_image="nvcr.io#nvidia/nemo:25.07", notes=[])
    assert pulled.startswith("Pre-flight ok: image nvcr.io#nvidia/nemo:25.07 from its registry (")


def test_what_babysitting_says_of_a_stuck_a_hung_and_a_resumed_run() -> None:
    assert says("job_stuck", job="41", held=True, words="held by an admin", code="JobHeldAdmin",
                fix="Ask an admin to release it.") == (
        "⛔ HELD · job 41 is held by an admin (Slurm: `JobHeldAdmin`). Ask an admin to "
        "release it."
    )  # fmt: skip
    assert says("job_stuck", job="41", held=False, words="over a limit", code="QOSMax") == (
        "⛔ CANNOT START · job 41 is over a limit (Slurm: `QOSMax`)."
    )
    # as the engine writes it now: squeue's code, worded here with its fix
    assert says("job_stuck", job="41", code="JobHeldUser") == (
        "⛔ HELD · job 41 is held (a user hold, or requeued held) (Slurm: `JobHeldUser`). "
        "Release it with scontrol release &lt;job&gt;, or cancel it."
    )
    assert says("job_stuck", job="41", code="QOSMaxGRESPerUser") == (
        "⛔ CANNOT START · job 41 is waiting for its group's or account's limit to free up "
        "(Slurm: `QOSMaxGRESPerUser`). It starts when other jobs of the group end."
    )
    assert says("hang", job="41", quiet_s=1800.0, bound_s=600.0, step=1200) == (
        "⚠️ No progress for 30 min (last seen at step 1,200; the bound is 10 min). Job 41 is "
        "still RUNNING and may be hung. Cancel or Retry below."
    )
    startup = says("hang", job="41", quiet_s=3600, bound_s=3600, last_line="loading <shards>")
    assert "(last seen at start-up, last line `loading &lt;shards&gt;`; the bound is 1 h)" in (
        startup
    )
    resumed = says("resume", step=37, total=100, why="time budget", attempt=2, checkpoint="step 30")
    assert resumed == (
        "⏸️ STOPPED EARLY at step 37 / 100 (time budget; Slurm: COMPLETED) · checkpoint step 30 "
        "· resuming from it (attempt 2)."
    )


def test_not_started_for_each_reason() -> None:
    parent = says("not_started", why="parent_ended", parent="L-1", parent_outcome="FAILED",
                  parent_detail="OOM on dev1.")  # fmt: skip
    assert parent == (
        "⛔ Not started, because L-1, which this launch waited for, ended FAILED (OOM on "
        "dev1). Nothing was submitted. To run it whatever the end, `/train` again with "
        "after=L-1:any."
    )
    unapproved = says("not_started", why="parent_unapproved", parent="L-1", hours=24.0)
    assert unapproved.startswith(
        "⛔ Not started: L-1, which this launch waits for, has awaited approval for over 24 h."
    )
    assert says("not_started", why="over_budget", refusal="the a4 budget is spent.") == (
        "⛔ Not started now that it is due: the a4 budget is spent."
    )
    assert says("not_started", why="no_longer_allowed", owner="U1", refusal="not in a4-users.") == (
        "⛔ <@U1>: not started now that it is due: not in a4-users. Nothing was submitted."
    )
    no_ckpt = says("not_started", why="no_checkpoint", owner="U1", start_from="L-1",
                   error="it saved <none>")  # fmt: skip
    assert no_ckpt.startswith(
        "⛔ <@U1>: not started (NO_CHECKPOINT): from=L-1, but it saved &lt;none&gt;. Nothing "
        "was submitted. `/train` again without from="
    )
    assert says("not_started", why="not_allowed", owner="U1", start_from="L-1", error="No.") == (
        "⛔ <@U1>: not started (NOT_ALLOWED): from=L-1: No. Nothing was submitted."
    )
    assert says("not_started", why="no_copy", owner="U1", start_from="L-1", error="disk full") == (
        "⛔ <@U1>: not started (NO_CHECKPOINT): from=L-1: disk full. Nothing was submitted."
    )


def test_start_from_with_and_without_a_copy() -> None:
    facts = {"parent": "L-1", "newest": True, "step": 1200, "checkpoint": "step=1200",
             "key": "resume.restore_config.path", "value": "/ck/step=1200"}  # fmt: skip
    assert says("start_from", **facts) == (
        "▶️ Starts from L-1's newest complete checkpoint, step 1,200 (`step=1200`): "
        "`resume.restore_config.path=/ck/step=1200`."
    )
    copied = says("start_from", **facts, copy="/mine/ck", linked=True)
    assert copied.endswith(
        " It starts from a linked copy (`/mine/ck`): L-1's own checkpoint directory is left "
        "as it is."
    )


def test_what_the_core_and_the_pager_say_in_a_thread() -> None:
    assert says("queue", by="U1", command="/train sft m lr=1e-5,3e-5") == (
        "Queued by <@U1>: `/train sft m lr=1e-5,3e-5`"
    )  # a sweep's first line is the queue's
    ask = says("sweep_approval", by="U1", sweep="S-1", members=4, command="/train x",
               reason="above 8 nodes.")  # fmt: skip
    assert ask == (
        "✋ <@U1> asks for sweep S-1 (4 launches): `/train x`. above 8 nodes. A trainbot admin "
        "or an approver can approve the whole sweep."
    )
    assert says("cancel_failed", job="41", cluster="a4", error="timed out") == (
        "⚠️ Could not cancel Slurm job 41 now (timed out). The launch stays cancelled and will "
        "not be retried; trainbot sends the cancel again at each poll until the job ends (by "
        "hand: `scancel 41` on a4)."
    )
    pruned = says("pruned", by="U1", count=3, launch="L-1", steps="10, 20, 30", keep=2,
                  directory="/ck")  # fmt: skip
    assert pruned == (
        "🗑️ <@U1> deleted 3 checkpoints of L-1 (steps 10, 20, 30), keeping the best 2 and the "
        "last, in `/ck`."
    )
    assert says("paged", steps=["slack", "pagerduty"]) == (
        "📟 On-call was paged in the on-call channel and through PagerDuty."
    )


def test_set_aside() -> None:
    said = says("set_aside", error="KeyError", tries=5, wait_s=600.0, retry_for_h=24.0)
    assert said == (
        "⚠️ This launch failed inside trainbot (KeyError), 5 times; it was set aside (dead "
        "letters) and is tried again in 10 min, for up to 24 h. `/cancel` stops it."
    )


def test_image_digest() -> None:
    assert says("image_digest", image="nvcr.io#nvidia/nemo:26.02", digest="sha256:ab12") == (
        "Image nvcr.io#nvidia/nemo:26.02: digest sha256:ab12 (as the job imported it)."
    )
