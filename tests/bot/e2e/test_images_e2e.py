"""/images import and /images fetch end to end in the console, on the dev cluster: the
request is checked, a worker submits the job as Slurm batch job over SSH, follows it and
tells its end in a thread of its own; what an import made, a launch then runs with
``image=<name>``. A registry's 401 and a full disk are each said in words a person can act
on, to the person, and page no one."""

from __future__ import annotations

import io
import re

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.image_run import ImageRun
from bot.runtime.assembly import running
from tests.bot.botkit import (
    LAUNCH_RE,
    Knobs,
    bot_settings,
    dev_config,
    knobs,
    login_run,
    wait_for_launch,
    wait_until,
)

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]
RUN_RE = re.compile(r"\bI-[0-9a-f]{10}\b")
FAST: Knobs = {"steps": 2, "step_time_s": 0.3, "ckpt_every": 2, "save_time_s": 0.1,
        "tokenizer_race": "off"}  # fmt: skip


def _config_editor(image_dir: str):  # type: ignore[no-untyped-def]
    def edit(text: str) -> str:
        text = text.replace(
            "    data_dir: ~/data\n", f"    data_dir: ~/data\n    image_dir: {image_dir}\n"
        )
        text = text.replace("    type: hcc-a4\n", "    type: hcc-a4\n    region: europe\n", 1)
        return text.replace(
            "  approval_above_nodes: null\n",
            "  approval_above_nodes: null\n  custom_images:\n"
            f'    - {{users: ["*"], groups: [], clusters: ["*"], dirs: [{image_dir}]}}\n',
        )

    return edit


async def test_import_and_fetch_in_threads_and_a_launch_uses_the_import(unique: str) -> None:
    image_dir = f"/home/trainer/devcluster-images-{unique}"
    creds = "~/.config/enroot/.credentials"
    login_run(f"mkdir -p ~/.config/enroot; mv {creds} {creds}.kept-{unique} 2>/dev/null; true")
    login_run(
        f"printf 'enroot_fault=disk_full\\nimage_s=1\\n' > ~/devcluster-control/full-{unique}.env"
    )
    front = ConsoleFront(io.StringIO(), color=False)
    config = dev_config(edit=_config_editor(image_dir))
    try:
        async with running(bot_settings(), config, front) as bot:

            async def ask(line: str) -> str:
                reply = await handle_line(line, bot.core, front, user="alice")
                assert reply is not None and not reply.error, reply
                found = RUN_RE.search(reply.text)
                assert found, reply.text
                return found.group(0)

            good = await ask(
                f"/images import nvcr.io/nvidia/nemo:26.02 as nemo-{unique} cluster=a4"
            )
            denied = await ask(
                f"/images import registry.devcluster.test/team/model:1 as team-{unique} cluster=a4"
            )
            full = await ask(
                f"/images import nvcr.io/nvidia/nemo:26.02 as full-{unique} cluster=a4"
            )
            fetched = await ask("/images fetch nemo-rl cluster=a4")

            async def ended() -> dict[str, ImageRun] | None:
                runs = {r: await bot.store.image_runs.get(r) for r in (good, denied, full, fetched)}
                if all(run is not None and not run.active for run in runs.values()):
                    return {k: v for k, v in runs.items() if v is not None}
                return None

            runs = await wait_until(ended, "the image runs to end", timeout_s=180, interval_s=1)
            assert runs[good].ok and runs[good].cause == "ok", runs[good]
            assert runs[denied].cause == "auth", runs[denied]
            assert runs[full].cause == "disk_full", runs[full]
            assert runs[fetched].ok, runs[fetched]

            # the import is there, and a launch runs with image=<name> (pre-flight finds it)
            head = login_run(f"head -c 42 {image_dir}/nemo-{unique}.sqsh")
            assert head.startswith("hsqs stand-in image for the dev cluster"), head
            assert login_run(f"head -c 4 {image_dir}/nemo_rl-h20260302.sqsh") == "hsqs"
            listing = await handle_line("/images cluster=a4", bot.core, front, user="alice")
            assert listing is not None and not listing.error, listing
            assert f"`{image_dir}/nemo-{unique}.sqsh` · " in listing.text
            assert f" · image=nemo-{unique}" in listing.text
            assert f"full-{unique}" not in listing.text  # a failed import leaves no image
            async with knobs(f"run-{unique}", **FAST):  # a launch on what the import made
                reply = await handle_line(
                    f"/train sft llama3p1_2b cluster=a4 image=nemo-{unique} name=run-{unique}",
                    bot.core, front, user="alice",
                )  # fmt: skip
                assert reply is not None and not reply.error, reply
                launch_id = LAUNCH_RE.search(reply.text).group(0)  # type: ignore[union-attr]
                done = await wait_for_launch(bot.store, launch_id, timeout_s=180)
            assert done.outcome == "COMPLETED", done
            record = done.attempts[-1].record
            assert record is not None and record.image == f"{image_dir}/nemo-{unique}.sqsh"
            assert record.image_size  # the file the import made, read at the submit
    finally:
        login_run(
            f"rm -rf {image_dir} ~/devcluster-control/full-{unique}.env; "
            f"mv {creds}.kept-{unique} {creds} 2>/dev/null; true",
            check=False,
        )
    text = "\n".join(front.lines)
    nemo = f"{image_dir}/nemo-{unique}.sqsh"
    # each run's thread: queued, submitted (as a Slurm job), and its end, with the owner told
    assert f"Queued by @alice: `/images import nvcr.io/nvidia/nemo:26.02 as nemo-{unique}" in text
    assert re.search(rf"Submitted: Slurm job \d+ on a4 \(enroot import\), writing `{nemo}`", text)
    assert (
        f"@alice ✅ Image nemo-{unique} is ready: `{nemo}`. Use it with image=nemo-{unique}."
        in text
    )
    assert (
        "@alice ❌ The registry refused the import of `docker://registry.devcluster.test#team/"
        "model:1`: 401 Unauthorized (https://registry.devcluster.test/v2/team/model/manifests/1)"
    ) in text
    assert "`~/.config/enroot/.credentials`" in text and "run the same /images import again" in text
    assert (
        f"@alice ❌ The import of full-{unique} stopped: the disk is full (No space left on device)"
    ) in text
    assert "@alice ✅ Image nemo_rl-h20260302 is ready" in text
    assert "✅ READY  image · import" in text and "❌ FAILED  image · import" in text
    assert "subteam" not in text and "C0ONCALL" not in text  # the site's problems page no one


async def test_an_import_runs_as_the_persons_unix_user_where_identity_maps_them(
    unique: str,
) -> None:
    """With identity, the job is the person's: submitted as their Unix user (checked against
    the config), writing as them, with their own enroot credentials file."""
    image_dir = f"/home/alice/devcluster-images-{unique}"
    front = ConsoleFront(io.StringIO(), color=False)
    config = dev_config(people={"alice": "alice"}, edit=_config_editor(image_dir))
    try:
        async with running(bot_settings(), config, front) as bot:
            reply = await handle_line(
                f"/images import nvcr.io/nvidia/nemo:26.02 as mine-{unique} cluster=a4",
                bot.core, front, user="alice",
            )  # fmt: skip
            assert reply is not None and not reply.error, reply
            run_id = RUN_RE.search(reply.text).group(0)  # type: ignore[union-attr]

            async def ended() -> ImageRun | None:
                run = await bot.store.image_runs.get(run_id)
                return run if run is not None and not run.active else None

            run = await wait_until(ended, "the import to end", timeout_s=120, interval_s=1)
            assert run.ok and run.cluster_user == "alice", run
        owner = login_run(f"stat -c %U {image_dir}/mine-{unique}.sqsh", user="alice")
        assert owner.strip() == "alice"
        job = run.job_id
        assert sacct_user(job) == "alice"
    finally:
        login_run(f"rm -rf {image_dir}", check=False, user="alice")
    text = "\n".join(front.lines)
    assert f"Submitted: Slurm job {run.job_id} on a4, as alice (enroot import)" in text


def sacct_user(job_id: str) -> str:
    return login_run(f"sacct -n -X -P -j {job_id} -o User").strip()
