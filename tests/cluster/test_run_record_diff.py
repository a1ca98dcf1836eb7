"""The run record's uncommitted recipe changes: read by the probe's own shell line from a
real git checkout, bounded, and never carrying a secret's value."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cluster.launching.run_record import MAX_DIFF_BYTES, probe_lines, read_record


def record_of(repo: Path) -> tuple[str, bool, int]:
    script = "\n".join(probe_lines(str(repo), ""))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    found = read_record(done.stderr, command="x", env_names=(), recipes_dir=str(repo), image="")
    return found.recipes_diff, found.recipes_diff_truncated, found.recipes_changed


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "recipes"
    (repo / "nemo_rl" / "configs").mkdir(parents=True)
    (repo / "nemo" / "sft").mkdir(parents=True)
    (repo / "nemo" / "sft" / "llama.py").write_text("lr = 1e-5\n")
    (repo / "nemo_rl" / "configs" / "auth.sh").write_text("export HF_TOKEN=\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    return repo


def test_a_clean_checkout_has_no_diff(tmp_path: Path) -> None:
    assert record_of(checkout(tmp_path)) == ("", False, 0)


def test_changes_are_kept_without_secret_values(tmp_path: Path) -> None:
    repo = checkout(tmp_path)
    (repo / "nemo" / "sft" / "llama.py").write_text("lr = 3e-5\nWANDB_API_KEY = 'abc123'\n")
    (repo / "nemo_rl" / "configs" / "auth.sh").write_text("export HF_TOKEN=hf_secretvalue\n")
    diff, truncated, changed = record_of(repo)
    assert changed == 2 and not truncated
    assert "-lr = 1e-5\n+lr = 3e-5\n" in diff, diff
    assert "+WANDB_API_KEY = <value not kept>" in diff, diff
    assert "abc123" not in diff and "hf_secretvalue" not in diff and "auth.sh" not in diff


def test_a_long_diff_is_cut_and_said_so(tmp_path: Path) -> None:
    repo = checkout(tmp_path)
    (repo / "nemo" / "sft" / "llama.py").write_text("".join(f"x{i} = {i}\n" for i in range(3000)))
    diff, truncated, _ = record_of(repo)
    assert truncated and len(diff.encode()) <= MAX_DIFF_BYTES
    assert diff.startswith("diff --git a/nemo/sft/llama.py")
