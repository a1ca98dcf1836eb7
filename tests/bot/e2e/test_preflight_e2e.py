"""The bot's pre-flight on the dev cluster against what a real site may have, end to end
in the console: a missing mount directory and a guide-style ``configs/auth.sh`` are
refused with what to change and nothing submitted; a ``run.py`` without ``-t`` gets a
launch without it, the thread says so, and what run.py accepts is kept in Redis."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator

import pytest

from bot.console.chat import ConsoleFront, handle_line
from bot.lifecycle.launch import Phase
from bot.runtime.assembly import running
from bot.runtime.doctor import run_doctor
from tests.bot.botkit import (
    Knobs,
    bot_settings,
    dev_config,
    in_order,
    knobs,
    launch_id_in,
    login_run,
    open_test_store,
    slurm_jobs_named,
    wait_delivered,
    wait_for_launch,
)
from tests.devlogin import copy_recipes_command

pytestmark = [pytest.mark.devcluster, pytest.mark.slow, pytest.mark.usefixtures("clean_redis")]
FAST: Knobs = {
    "steps": 2,
    "step_time_s": 0.3,
    "ckpt_every": 2,
    "save_time_s": 0.1,
    "tokenizer_race": "off",
}


@pytest.fixture
def private_dir(unique: str) -> Iterator[str]:
    """``~/tmp-<unique>`` in trainer's home on the login node, removed afterwards."""
    yield f"~/tmp-{unique}"
    login_run(f"rm -rf ~/tmp-{unique}", check=False)


async def launch(
    line: str,
    env: dict[str, str],
    *,
    cache: bool = False,
    data_dir: str = "",
    recipes_dir: str = "",
) -> tuple[str, list[str], str | None]:
    """Run one /train line as alice: its final phase, every console line, and (``cache``,
    once it ran) what Redis then holds of a4's run.py for trainer."""
    front = ConsoleFront(io.StringIO(), color=False)
    async with running(
        bot_settings(**env), dev_config(data_dir=data_dir, recipes_dir=recipes_dir), front
    ) as bot:
        reply = await handle_line(line, bot.core, front, user="alice")
        assert reply is not None and not reply.error, reply
        launch_id = launch_id_in(reply.text)
        done = await wait_for_launch(bot.store, launch_id)
        await wait_delivered(bot.store)
        cached = None
        if cache and done.phase == Phase.DONE:
            cached = await bot.store.history.launcher_options("a4", "nemo@trainer")
    return done.phase, [f"launch {launch_id}", *front.lines], cached


async def test_a_missing_data_dir_is_caught_in_preflight_and_nothing_is_submitted(
    unique: str, private_dir: str
) -> None:
    missing = f"{private_dir}/data"
    async with knobs(unique, **FAST):  # quick, should the launch go ahead after all
        phase, lines, _ = await launch(
            f"/train sft llama3p1_2b cluster=a4 name={unique}", {}, data_dir=missing
        )
    assert phase == Phase.REJECTED, lines
    in_order(
        lines,
        rf"Not submitted: Directory {missing} \(run\.py's --data-dir\) does not exist on a4\. ",
    )
    text = "\n".join(lines)
    assert f"Create it on the login node as trainer with `mkdir -p {missing}`" in text, text
    assert slurm_jobs_named(unique) == []


async def test_an_auth_file_that_replaces_the_token_is_refused_and_no_secret_shows(
    unique: str, private_dir: str
) -> None:
    await asyncio.to_thread(login_run, copy_recipes_command(private_dir))
    tree = f"{private_dir}/vertex-oss-training"
    site_value = "hf_SiteOwnTokenE2e"
    body = f"# guide style\\nexport HF_TOKEN={site_value}\\n"
    await asyncio.to_thread(login_run, f"printf '{body}' > {tree}/nemo_rl/configs/auth.sh")
    person = "hf_PersonTokenE2e"
    async with knobs(unique, **FAST):
        phase, lines, _ = await launch(
            f"/train dpo llama3p1_8b cluster=a4 name={unique}",
            {"TRAINBOT_HF_TOKEN": person},
            recipes_dir=tree,
        )
    assert phase == Phase.REJECTED, lines
    text = "\n".join(lines)
    in_order(
        lines,
        rf"Not submitted: {tree}/nemo_rl/configs/auth.sh on a4 sets HF_TOKEN \(line 2, ",
    )
    assert "`export HF_TOKEN=${HF_TOKEN:-...}`" in text, text
    assert site_value not in text and person not in text
    assert slurm_jobs_named(unique) == []


async def test_a_run_py_without_t_launches_without_it_and_the_thread_says_so(
    unique: str, private_dir: str
) -> None:
    await asyncio.to_thread(login_run, copy_recipes_command(private_dir))
    tree = f"{private_dir}/vertex-oss-training"
    await asyncio.to_thread(
        login_run,
        'sed -i \'s/^    parser.add_argument("-t", "--time".*/'
        f'    parser.set_defaults(time="04:00:00")/\' {tree}/nemo/run.py',
    )
    async with knobs(unique, **FAST):
        phase, lines, cached = await launch(
            f"/train sft llama3p1_2b cluster=a4 name={unique}", {}, cache=True, recipes_dir=tree
        )
    assert phase == Phase.DONE, lines
    in_order(
        lines,
        r"Pre-flight ok: ",
        r"Note: run\.py on a4 has no -t: the time limit 01:00:00 goes to sbatch as "
        r"SBATCH_TIMELIMIT instead\.",
        r"Submitted: Slurm job [0-9]+ on a4",
        r"✅ COMPLETED",
    )
    [job] = slurm_jobs_named(unique)
    limit = login_run(f"sacct -X -P -n -o Timelimit -j {job}").strip()
    assert limit == "01:00:00", limit  # Slurm took the launch's limit, not run.py's 04:00:00
    assert cached is not None and '"-t"' not in cached and '"--exclude"' in cached, cached


async def test_doctor_reads_what_run_py_lacks_keeps_it_for_the_workers_and_checks_auth_sh(
    private_dir: str,
) -> None:
    await asyncio.to_thread(login_run, copy_recipes_command(private_dir))
    tree = f"{private_dir}/vertex-oss-training"
    await asyncio.to_thread(
        login_run,
        'sed -i \'s/^    parser.add_argument("--exclude".*/'
        "    parser.set_defaults(exclude=None)/' "
        f"{tree}/nemo/run.py && printf 'export WANDB_API_KEY=wandb_site_doc\\n' "
        f">> {tree}/nemo_rl/configs/auth.sh",
    )
    out = io.StringIO()
    settings = bot_settings(TRAINBOT_WANDB_API_KEY="wandb_person_doc")
    code = await run_doctor(settings, dev_config(recipes_dir=tree), out)
    text = out.getvalue()
    assert code == 1, text
    assert (
        "ok   a4: nemo run.py --help: lacks --exclude: launches leave them out and say so" in text
    )
    assert f"FAIL a4: nemo-rl auth WANDB_API_KEY: {tree}/nemo_rl/configs/auth.sh on a4 " in text
    assert "wandb_site_doc" not in text and "wandb_person_doc" not in text
    async with open_test_store() as store:
        cached = await store.history.launcher_options("a4", "nemo@trainer")
    assert cached is not None and '"--exclude"' not in cached and '"-t"' in cached, cached
