"""Seed the GPT-2 tokenizer cache on a login node, so ranks stop racing to download it.

NeMo's Megatron tokenizer looks for ``<cache>/torch/megatron/megatron-gpt-345m_vocab``
and ``..._merges``; when they are missing every rank downloads ``gpt2-vocab.json`` /
``gpt2-merges.txt`` and moves them into the cache at once, and some fail with
``[Errno 18] Invalid cross-device link`` (FIELD_GUIDE sections 1 and 5). Putting the
two files there first ends the race.

The files come from the profile's ``tokenizer_seed``: each either a path on the
cluster or an http(s) URL fetched *on the login node* (curl, else python3's
urllib), never through the bot's machine. Everything happens in one SSH round trip:
a shell script on stdin, with every path quoted by :func:`quote_path` and every
URL by :func:`shlex.quote`. Each file is written to a temporary file in the same
directory and moved into place with ``mv -n``; files already there are left alone.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from cluster.errors import ClusterError
from cluster.site.profile_fields import TokenizerSeed, check_remote_path
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import join_remote, quote_path

VOCAB_NAME = "megatron-gpt-345m_vocab"
MERGES_NAME = "megatron-gpt-345m_merges"
SEED_TIMEOUT_S = 180.0

_SCRIPT_HEAD = r"""set -u
dir=__DIR__
mkdir -p -- "$dir" || exit 1
tmp=""
trap '[ -z "$tmp" ] || rm -f -- "$tmp"' EXIT
fetch() {
    case $1 in
    http://* | https://*)
        if command -v curl >/dev/null 2>&1; then
            curl -fsSL --max-time 120 -o "$2" -- "$1"
        else
            python3 -c 'import sys, urllib.request as u; u.urlretrieve(*sys.argv[1:3])' "$1" "$2"
        fi ;;
    *) cat -- "$1" >"$2" ;;
    esac
}
seed() {
    dest=$dir/$2
    if [ -s "$dest" ]; then echo "kept $2"; return 0; fi
    tmp=$(mktemp "$dir/.$2.XXXXXX") || return 1
    fetch "$1" "$tmp" || { echo "cannot fetch $1" >&2; return 1; }
    [ -s "$tmp" ] || { echo "$1 is empty" >&2; return 1; }
    if [ "$3" = json ] && [ "$(head -c 1 "$tmp")" != "{" ]; then
        echo "$1 is not a GPT-2 vocabulary (JSON)" >&2; return 1
    fi
    chmod 644 "$tmp"
    mv -n -- "$tmp" "$dest"
    if [ -e "$tmp" ]; then rm -f -- "$tmp"; echo "kept $2"; else echo "seeded $2"; fi
    tmp=""
}
"""


@dataclass(frozen=True)
class SeedResult:
    """What seeding did: the files it wrote, and the ones that were already there."""

    directory: str  # <cache>/torch/megatron, as given (may start with ~/)
    seeded: tuple[str, ...]
    kept: tuple[str, ...]

    def summary(self) -> str:
        parts = []
        if self.seeded:
            parts.append(f"seeded {' and '.join(self.seeded)}")
        if self.kept:
            parts.append(f"kept the existing {' and '.join(self.kept)}")
        return f"Tokenizer cache {self.directory}: {'; '.join(parts) or 'nothing to do'}."


def megatron_dir(cache_dir: str) -> str:
    """Where the Megatron tokenizer files live under a cache dir (run.py --cache-dir)."""
    return join_remote(cache_dir, "torch", "megatron")


def _quote_source(source: str) -> str:
    if source.startswith(("http://", "https://")):
        return shlex.quote(source)
    return quote_path(source)


def build_seed_script(seed: TokenizerSeed, cache_dir: str) -> str:
    """The shell script (for ``bash -s``) that seeds ``<cache_dir>/torch/megatron``."""
    head = _SCRIPT_HEAD.replace("__DIR__", quote_path(megatron_dir(cache_dir)))
    return (
        f"{head}seed {_quote_source(seed.vocab)} {VOCAB_NAME} json && "
        f"seed {_quote_source(seed.merges)} {MERGES_NAME} text\n"
    )


def parse_seed_output(stdout: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(seeded, kept) file names from the script's output."""
    seeded: list[str] = []
    kept: list[str] = []
    for line in stdout.splitlines():
        word, _, name = line.strip().partition(" ")
        if name in (VOCAB_NAME, MERGES_NAME):
            (seeded if word == "seeded" else kept if word == "kept" else []).append(name)
    return tuple(seeded), tuple(kept)


async def seed_tokenizer_cache(
    pool: SSHPool,
    profile: ClusterProfile,
    cache_dir: str | None = None,
    *,
    timeout_s: float = SEED_TIMEOUT_S,
) -> SeedResult:
    """Put the GPT-2 vocab and merges files into the cache dir on the login node.

    ``cache_dir`` defaults to the profile's ``cache_dir``. Raises ClusterError when
    the profile has no ``tokenizer_seed`` or a file cannot be fetched.
    """
    seed = profile.tokenizer_seed
    if seed is None:
        raise ClusterError(
            "no source for the GPT-2 tokenizer files: set tokenizer_seed "
            "(vocab: and merges:, each a path on the cluster or an http(s) URL) "
            f"under clusters.{profile.name} in the config file",
            cluster=profile.name,
        )
    cache = cache_dir if cache_dir is not None else profile.cache_dir
    try:
        check_remote_path(cache)
    except ValueError as exc:
        raise ClusterError(f"cache dir {exc}", cluster=profile.name) from None
    result = await pool.run(
        profile.login,
        "bash -s",
        input=build_seed_script(seed, cache),
        timeout_s=timeout_s,
        check=False,
        cluster=profile.name,
    )
    seeded, kept = parse_seed_output(result.stdout)
    if result.returncode != 0 or len(seeded) + len(kept) != 2:
        detail = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
        raise ClusterError(
            f"seeding the tokenizer cache {megatron_dir(cache)} failed: {detail[0][:300]}",
            cluster=profile.name,
        )
    return SeedResult(directory=megatron_dir(cache), seeded=seeded, kept=kept)
