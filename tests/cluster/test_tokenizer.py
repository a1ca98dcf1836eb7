"""Seeding the GPT-2 tokenizer cache: the script in a real local bash, then on the dev
cluster's login node, where a NeMo run that races until the cache is seeded completes."""

from __future__ import annotations

import asyncio
import functools
import http.server
import re
import shlex
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.errors import ClusterError
from cluster.frameworks.nemo import NEMO
from cluster.launching.spec import LaunchSpec
from cluster.launching.tokenizer import (
    MERGES_NAME,
    VOCAB_NAME,
    build_seed_script,
    parse_seed_output,
    seed_tokenizer_cache,
)
from cluster.site.profile_fields import TokenizerSeed
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.watching.diagnosis import diagnose
from cluster.watching.evidence import gather
from tests.conftest import LoginShell

VOCAB = '{"!": 0, "\\"": 1, "#": 2}\n'
MERGES = "#version: 0.2\nĠ t\n"


def run_local(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=60)


@pytest.fixture
def sources(tmp_path: Path) -> TokenizerSeed:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "gpt2-vocab.json").write_text(VOCAB)
    (tmp_path / "src" / "gpt2-merges.txt").write_text(MERGES)
    return TokenizerSeed(
        vocab=str(tmp_path / "src" / "gpt2-vocab.json"),
        merges=str(tmp_path / "src" / "gpt2-merges.txt"),
    )


def test_seeds_from_paths_then_keeps(tmp_path: Path, sources: TokenizerSeed) -> None:
    cache = tmp_path / "cache"
    first = run_local(build_seed_script(sources, str(cache)))
    assert first.returncode == 0, first.stderr
    assert parse_seed_output(first.stdout) == ((VOCAB_NAME, MERGES_NAME), ())
    megatron = cache / "torch" / "megatron"
    assert (megatron / VOCAB_NAME).read_text() == VOCAB
    assert (megatron / MERGES_NAME).read_text() == MERGES
    assert sorted(p.name for p in megatron.iterdir()) == [MERGES_NAME, VOCAB_NAME]  # no temp
    (megatron / VOCAB_NAME).write_text('{"theirs": 1}\n')
    again = run_local(build_seed_script(sources, str(cache)))
    assert parse_seed_output(again.stdout) == ((), (VOCAB_NAME, MERGES_NAME))
    assert (megatron / VOCAB_NAME).read_text() == '{"theirs": 1}\n'


def test_a_missing_or_wrong_source_fails_and_leaves_no_temp_file(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    missing = TokenizerSeed(vocab=str(tmp_path / "nope.json"), merges=str(tmp_path / "m.txt"))
    result = run_local(build_seed_script(missing, str(cache)))
    assert result.returncode != 0 and "cannot fetch" in result.stderr
    (tmp_path / "page.html").write_text("<html>login</html>")
    wrong = TokenizerSeed(vocab=str(tmp_path / "page.html"), merges=str(tmp_path / "page.html"))
    result = run_local(build_seed_script(wrong, str(cache)))
    assert "is not a GPT-2 vocabulary" in result.stderr
    assert list((cache / "torch" / "megatron").iterdir()) == []


@pytest.fixture
def http_dir(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "gpt2-vocab.json").write_text(VOCAB)
    (tmp_path / "web" / "gpt2-merges.txt").write_text(MERGES)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=tmp_path / "web")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_seeds_from_urls(tmp_path: Path, http_dir: str) -> None:
    seed = TokenizerSeed(vocab=f"{http_dir}/gpt2-vocab.json", merges=f"{http_dir}/gpt2-merges.txt")
    result = run_local(build_seed_script(seed, str(tmp_path / "cache")))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "cache/torch/megatron" / MERGES_NAME).read_text() == MERGES
    missing = TokenizerSeed(vocab=f"{http_dir}/none.json", merges=f"{http_dir}/none.txt")
    assert run_local(build_seed_script(missing, str(tmp_path / "c2"))).returncode != 0


def test_urls_are_data_not_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = f"http://127.0.0.1:9/$(touch${{IFS}}{marker})`touch${{IFS}}{marker}`';touch${{IFS}}{marker}'"
    for seed in (
        TokenizerSeed(vocab=evil, merges=evil),
        TokenizerSeed.model_construct(vocab=f"/x/a b;touch {marker}", merges=f"$(touch {marker})"),
    ):
        result = run_local(build_seed_script(seed, str(tmp_path / "cache")))
        assert result.returncode != 0
        assert not marker.exists()


@pytest.mark.parametrize(
    "bad",
    [
        "relative/gpt2-vocab.json",
        "/a/../etc/passwd",
        "/a b",
        "ftp://x/y",
        "http:///x",
        "https://a b",
    ],
)
def test_sources_are_validated(bad: str) -> None:
    with pytest.raises(ValueError, match="vocab"):
        TokenizerSeed(vocab=bad, merges="/ok/gpt2-merges.txt")


def test_home_paths_stay_home() -> None:
    seed = TokenizerSeed(vocab="~/tok/gpt2-vocab.json", merges="https://example.com/m.txt")
    script = build_seed_script(seed, "~/.cache")
    assert 'dir="$HOME"/.cache/torch/megatron\n' in script
    assert 'seed "$HOME"/tok/gpt2-vocab.json megatron-gpt-345m_vocab json' in script
    assert "seed https://example.com/m.txt megatron-gpt-345m_merges text" in script


async def test_no_source_configured_says_which_field() -> None:
    profile = ClusterProfile.model_validate(
        {"name": "a4", "type": "hcc-a4", "partition": "a4", "max_nodes": 4,
         "login": {"host": "127.0.0.1", "user": "trainer"}}
    )  # fmt: skip
    assert profile.tokenizer_seed is None
    with pytest.raises(ClusterError, match=r"set tokenizer_seed .* under clusters\.a4"):
        await seed_tokenizer_cache(SSHPool(), profile)


# --- on the dev cluster --------------------------------------------------------------------

STATUS_RE = re.compile(r"- Job id: (?P<job>\d+)\s+- Local Directory: (?P<dir>\S+)")
RACE_ENV = (
    "DEVCLUSTER_TOKENIZER_RACE=until_seeded DEVCLUSTER_STEPS=2 DEVCLUSTER_STEP_TIME_S=0.1 "
    "DEVCLUSTER_SAVE_TIME_S=0.05"
)


async def launch_nemo(login: LoginShell, name: str, cache: str) -> dict[str, str]:
    recipes = login.profile.recipes_dir
    command = (
        f"cd {recipes}/nemo && {RACE_ENV} NEMORUN_HOME=$PWD python3 run.py -e slurm "
        f"--slurm-type hcc-a4 --partition a4 -d $PWD -i $PWD/nemo-20250721.sqsh "
        f"-s sft/llama3p1_8b_sft.py -n 1 --experiment-name {name} "
        f"--cache-dir {cache} --log-dir {cache}/logs"
    )
    out = (await login.run("bash -lc " + shlex.quote(command), timeout_s=60)).stdout
    match = STATUS_RE.search(out)
    assert match, out
    return match.groupdict()


async def final_state(login: LoginShell, job: str, timeout_s: float = 120) -> str:
    for _ in range(int(timeout_s * 2)):
        row = (await login.run(f"sacct -X -P -n -o State,Partition -j {job}")).stdout.strip()
        state, _, partition = row.rpartition("\n")[2].partition("|")
        if partition and state.split()[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            return state
        await asyncio.sleep(0.5)
    raise AssertionError(f"job {job} did not end in {timeout_s} s")


@pytest.mark.devcluster
async def test_seeded_cache_ends_the_race_on_the_dev_cluster(
    pool: SSHPool,
    dev_profile: ClusterProfile,
    login: LoginShell,
    unique: str,
    jobs_to_cancel: list[str],
) -> None:
    tmp = (await login.run("mktemp -d ~/.cache/tokseed-XXXXXX")).stdout.strip()
    try:
        for name, body in (("gpt2-vocab.json", VOCAB), ("gpt2-merges.txt", MERGES)):
            await pool.run(dev_profile.login, f"cat > {tmp}/{name}", input=body, timeout_s=30)
        seed: dict[str, Any] = {
            "vocab": f"{tmp}/gpt2-vocab.json",
            "merges": f"{tmp}/gpt2-merges.txt",
        }
        profile = ClusterProfile.model_validate(
            {**dev_profile.model_dump(), "tokenizer_seed": seed}
        )
        round_trips = pool.stats.round_trips
        result = await seed_tokenizer_cache(pool, profile, f"{tmp}/warm")
        assert pool.stats.round_trips == round_trips + 1
        assert result.seeded == (VOCAB_NAME, MERGES_NAME) and result.kept == ()
        assert result.directory == f"{tmp}/warm/torch/megatron"
        assert (await login.run(f"cat {tmp}/warm/torch/megatron/{VOCAB_NAME}")).stdout == VOCAB
        assert (await login.run(f"cat {tmp}/warm/torch/megatron/{MERGES_NAME}")).stdout == MERGES
        again = await seed_tokenizer_cache(pool, profile, f"{tmp}/warm")
        assert again.kept == (VOCAB_NAME, MERGES_NAME) and "kept the existing" in again.summary()

        warm = await launch_nemo(login, f"{unique}w", f"{tmp}/warm")
        cold = await launch_nemo(login, f"{unique}c", f"{tmp}/cold")
        jobs_to_cancel += [warm["job"], cold["job"]]
        assert await final_state(login, warm["job"]) == "COMPLETED"
        assert await final_state(login, cold["job"]) == "FAILED"
        log = (await login.run(f"cat {cold['dir']}/log-*_{cold['job']}_0.out")).stdout
        race = (
            "OSError: [Errno 18] Invalid cross-device link: 'gpt2-vocab.json' -> "
            f"'{tmp}/cold/torch/megatron/{VOCAB_NAME}'"
        )
        assert race in log.splitlines()
        spec = LaunchSpec(
            profile=login.profile, launch_id="L-1", framework="nemo", nodes=1, script="sft/x.py"
        )
        status = f"- Job id: {cold['job']}\n- Local Directory: {cold['dir']}\n"
        found = diagnose(await gather(login.pool, login.profile.login, NEMO.tracking(spec, status)))
        assert found is not None and found.key == "tokenizer_race"
        warm_log = (await login.run(f"cat {warm['dir']}/log-*_{warm['job']}_0.out")).stdout
        assert "`Trainer.fit` stopped: `max_steps=2` reached." in warm_log
    finally:
        await login.run(f"rm -rf {shlex.quote(tmp)}", check=False)
