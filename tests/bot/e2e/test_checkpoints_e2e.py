"""from=<job>@<step> on the dev cluster: a step the parent never saved is refused with the
steps it did save, and a saved one that is not the newest is the one the child starts from;
deleting all but the best and the last removes only the others from the login node."""

from __future__ import annotations

import io
import re

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.events import Event
from bot.lifecycle.launch import Launch
from bot.planning import checkpoints
from bot.runtime.assembly import running
from bot.text.actions import ACTION_PRUNE
from bot.text.front import Incoming
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    knobs,
    launch_id_in,
    login_run,
    wait_delivered,
    wait_for_launch,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]

QUICK: Knobs = {"steps": 4, "ckpt_every": 2, "step_time_s": 0.3, "save_time_s": 0.1}


async def test_from_a_step_starts_from_that_checkpoint(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    async with knobs(unique, **QUICK), running(bot_settings(), dev_config(), front) as bot:
        reply = await handle_line(
            f"/train pretrain llama3p1_2b cluster=a4 name={unique}a", bot.core, front, user="alice"
        )
        assert reply is not None and not reply.error, reply
        parent = launch_id_in(reply.text)
        first = await wait_for_launch(bot.store, parent, timeout_s=300)
        assert first.outcome == "COMPLETED", front.lines
        steps = [p.step for p in checkpoints.saved(first)]
        assert steps == [1, 3], first.checkpoints  # NeMo counts steps from 0
        listed = await handle_line(f"/checkpoints {parent}", bot.core, front, user="alice")
        assert listed is not None and not listed.error, listed
        assert [line.split(" · ")[0] for line in listed.text.splitlines()[1:3]] == [
            "• step 1",
            "• step 3",
        ], listed.text
        assert "*last*" in listed.text.splitlines()[2]
        refused = await handle_line(
            f"/train sft llama3p1_2b cluster=a4 name={unique}b from={parent}@2",
            bot.core,
            front,
            user="alice",
        )
        assert refused is not None and refused.error, refused
        assert (
            f"from={parent}@2: {parent} has no complete checkpoint at step 2; its complete "
            "checkpoints are at steps 1 and 3." in refused.text
        ), refused.text
        reply = await handle_line(
            f"/train sft llama3p1_2b cluster=a4 name={unique}b from={parent}@1",
            bot.core,
            front,
            user="alice",
        )
        assert reply is not None and not reply.error, reply
        child = launch_id_in(reply.text)
        second = await wait_for_launch(bot.store, child, timeout_s=300)
        await wait_delivered(bot.store)
    assert second.outcome == "COMPLETED", front.lines
    found = checkpoints.chosen(first, 1)
    assert found is not None
    tracking, name, _ = found
    assert re.search(r"-step=1(?:-|$)", name), name
    said = "\n".join(front.lines)
    assert f"Starts from {parent}'s checkpoint, step 1 (`{name}`)" in said, said
    # The child's job ran with NeMo's restore pointing at step 1, not the newest (3).
    script = login_run(
        f"grep -rh -o 'resume.restore_config.path=[^ ]*' "
        f"~/vertex-oss-training/nemo/experiments/{unique}b-{child}/ | sort -u"
    ).split()
    home = login_run("echo $HOME").strip()
    path = f"{tracking.checkpoint_dir}/{name}".replace("~", home, 1)
    assert any(path in line.replace("'", "").replace('"', "") for line in script), (script, path)


async def test_deleting_old_checkpoints_keeps_the_best_and_the_last(unique: str) -> None:
    front = ConsoleFront(io.StringIO(), color=False)
    knob: Knobs = {**QUICK, "steps": 6, "val_every": 2}
    async with knobs(unique, **knob), running(bot_settings(), dev_config(), front) as bot:
        reply = await handle_line(
            f"/train pretrain llama3p1_2b cluster=a4 name={unique}", bot.core, front, user="alice"
        )
        assert reply is not None and not reply.error, reply
        launch_id = launch_id_in(reply.text)
        done = await wait_for_launch(bot.store, launch_id, timeout_s=300)
        assert done.outcome == "COMPLETED", front.lines
        assert [p.step for p in checkpoints.saved(done)] == [1, 3, 5], done.checkpoints
        assert done.validation_history, front.lines  # the log's val_loss, read by the poller

        def overfit(stored: Launch) -> list[Event]:  # as the poller would read a later rise
            stored.validation_history = [(1, 1.0), (3, 1.5), (5, 2.0)]
            return []

        await bot.store.launches.mutate(launch_id, overfit)
        listed = await handle_line(f"/checkpoints {launch_id}", bot.core, front, user="alice")
        assert listed is not None and listed.blocks, listed
        button = next(
            element
            for block in listed.blocks
            for element in block.get("elements", [])
            if element.get("action_id") == f"{ACTION_PRUNE}1"
        )  # beside Export and Evaluate, and each checkpoint's own buttons
        assert button["value"] == launch_id
        assert "at steps 3 are deleted" in button["confirm"]["text"]["text"], button
        pressed = await bot.core(
            Incoming(
                user_id="alice",
                user_name="alice",
                channel_id="console",
                action_id=button["action_id"],
                action_value=button["value"],
            )
        )
        assert not pressed.error, pressed.text
        assert "deleted 1 checkpoints" in pressed.text and "(steps 3)" in pressed.text
        await wait_delivered(bot.store)
        after = await bot.store.launches.get(launch_id)
    assert after is not None
    assert [p.step for p in checkpoints.saved(after)] == [1, 5]
    tracking = after.attempts[-1].tracking
    assert tracking is not None
    on_disk = login_run(f"ls {tracking.checkpoint_dir}").split()
    steps = sorted(int(m.group(1)) for n in on_disk if (m := re.search(r"-step=(\d+)-", n)))
    assert sorted(set(steps)) == [1, 5], on_disk
    assert any("deleted 1 checkpoints" in line for line in front.lines), front.lines
