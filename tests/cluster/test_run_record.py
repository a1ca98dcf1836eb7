"""A run's record read back from what the submit script printed: table tests."""

from __future__ import annotations

import subprocess

import pytest

from cluster.launching.run_record import (
    MARK,
    RunRecord,
    digest_from_log,
    probe_lines,
    read_record,
    without_record,
)

COMMIT = "8fa3a450733d90db0ec61d6074b2f6095f1f99d8"


def read(stderr: str) -> RunRecord:
    return read_record(
        stderr, command="python3 run.py", env_names=("NEMORUN_HOME",), recipes_dir="~/r",
        image="~/r/nemo/x.sqsh",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("stderr", "commit", "changed", "size", "dirty"),
    [
        (f"{MARK} commit {COMMIT}\n{MARK} changed 3\n{MARK} image 56 1796455981\n", COMMIT, 3,
         56, True),
        (f"{MARK} commit {COMMIT}\n{MARK} changed 0\n{MARK} image 56 1796455981\n", COMMIT, 0,
         56, False),
        (f"{MARK} commit \n{MARK} changed 0\n{MARK} image \n", "", 0, None, False),
        (f"{MARK} commit $(id)\n{MARK} changed lots\n{MARK} image big old\n", "", 0, None, False),
        ("warning: something else\n", "", 0, None, False),  # an old login node: nothing printed
    ],
)  # fmt: skip
def test_read_record(stderr: str, commit: str, changed: int, size: int | None, dirty: bool) -> None:
    record = read(stderr)
    assert (record.recipes_commit, record.recipes_changed, record.image_size) == (
        commit,
        changed,
        size,
    )
    assert record.dirty == dirty and record.command == "python3 run.py"


def test_summary_says_a_dirty_checkout_and_the_image() -> None:
    text = read(f"{MARK} commit {COMMIT}\n{MARK} changed 1\n{MARK} image 56 0\n").summary()
    assert text == (
        f"Record: recipes at {COMMIT[:12]}, 1 file changed and not committed; image "
        "~/r/nemo/x.sqsh (56 bytes, modified 1970-01-01 00:00 UTC)."
    )
    assert "not a git checkout" in read("").summary()


def test_the_record_lines_leave_errors() -> None:
    stderr = f"{MARK} commit {COMMIT}\nsbatch: error: invalid partition specified: general\n"
    assert without_record(stderr) == "sbatch: error: invalid partition specified: general"


def test_the_probe_runs_under_set_e_and_never_fails() -> None:
    """The probe's lines in a strict shell, with no git checkout and no image: they print
    their lines and the script goes on."""
    script = "\n".join(["set -euo pipefail", *probe_lines("/nonexistent/r", "/nonexistent/x"),
                        "echo after"])  # fmt: skip
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0 and done.stdout == "after\n", done
    record = read(done.stderr)
    assert record.recipes_commit == "" and record.image_size is None


DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("image", "digest", "said"),
    [
        (f"nvcr.io/nvidia/nemo:26.02@{DIGEST}", DIGEST, f"(registry image; digest: {DIGEST})"),
        ("nvcr.io/nvidia/nemo:26.02", "", "(registry image; digest: resolved at start)"),
        ("~/r/nemo/x.sqsh", "", "image ~/r/nemo/x.sqsh."),  # a file: its size and mtime instead
    ],
)
def test_a_registry_image_records_the_digest_it_pins_or_that_it_is_resolved_at_start(
    image: str, digest: str, said: str
) -> None:
    record = read_record(
        f"{MARK} image \n", command="c", env_names=(), recipes_dir="~/r", image=image
    )
    assert record.image_digest == digest
    assert said in record.summary()


@pytest.mark.parametrize(
    ("log", "digest"),
    [
        (f"pyxis: imported docker image: nvcr.io#nvidia/nemo@{DIGEST}\n", DIGEST),
        (f"[INFO] enroot: Fetching image manifest {DIGEST}\n", DIGEST),
        ("pyxis: imported docker image: nvcr.io#nvidia/nemo:26.02\n", ""),  # pyxis names the ref
        (f"step 10 loss 2.0 {DIGEST}\n", ""),  # not a pyxis or enroot line: not the image's
    ],
)
def test_the_digest_is_taken_only_from_a_pyxis_or_enroot_line(log: str, digest: str) -> None:
    assert digest_from_log(log) == digest
