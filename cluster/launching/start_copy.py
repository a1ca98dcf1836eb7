"""``from=`` for a framework that goes on writing where it starts: NeMo-RL resumes from
the highest ``step_N`` of its checkpoint directory and saves (and prunes) there. So a
child never gets its parent's directory: it gets one of its own holding a copy of the
checkpoint it names, whose files are hard links (``cp -al``: no space used, and the
child's saves and pruning leave the parent's files alone), or a plain copy where the
file system refuses links. Made once, before the child's first job, as the child's
Unix user; a copy already there is kept."""

from __future__ import annotations

from cluster.errors import ClusterError
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import quote_path

COPY_TIMEOUT_S = 600.0  # a plain copy of a large checkpoint takes a while
OUTCOMES = ("linked", "copied", "kept")


def copy_script(source: str, target: str) -> str:
    """The shell script (for ``bash -s``) that makes ``target`` a copy of the checkpoint
    directory ``source``: hard links, else a plain copy, written beside it first and
    renamed into place (a half-made copy is never taken for a checkpoint). Prints how."""
    return (
        "set -eu\n"
        f"src={quote_path(source)}\n"
        f"dst={quote_path(target)}\n"
        'if [ -e "$dst" ]; then echo kept; exit 0; fi\n'
        'if [ ! -d "$src" ]; then echo "no checkpoint directory $src" >&2; exit 3; fi\n'
        'parent=$(dirname "$dst"); mkdir -p "$parent"\n'
        'tmp="$parent/.copying-$(basename "$dst")-$$"\n'
        'rm -rf "$tmp"\n'
        'if cp -al "$src" "$tmp" 2>/dev/null; then how=linked\n'
        'else rm -rf "$tmp"; cp -a "$src" "$tmp"; how=copied; fi\n'
        'mv "$tmp" "$dst"\n'
        'echo "$how"\n'
    )


async def copy_start(
    pool: SSHPool,
    profile: ClusterProfile,
    source: str,
    target: str,
    *,
    timeout_s: float = COPY_TIMEOUT_S,
) -> str:
    """Copy the checkpoint ``source`` to ``target`` on the login node of ``profile`` (as
    the user it logs in as): ``linked``, ``copied`` or ``kept``; ClusterError saying why not."""
    result = await pool.run(
        profile.login,
        "bash -s",
        input=copy_script(source, target),
        timeout_s=timeout_s,
        check=False,
        cluster=profile.name,
    )
    how = result.stdout.strip().splitlines()[-1:] or [""]
    if result.returncode != 0 or how[0] not in OUTCOMES:
        detail = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
        raise ClusterError(
            f"copying checkpoint {source} to {target} failed: {detail[0][:300]}",
            cluster=profile.name,
        )
    return how[0]
