"""from= for NeMo-RL: the child's copy of its parent's checkpoint, made by the script the
login node runs (run here with bash on local paths)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cluster.errors import ClusterError
from cluster.frameworks.nemo_rl import NEMO_RL
from cluster.launching.start_copy import copy_script, copy_start
from cluster.site.profiles import ClusterProfile
from cluster.ssh.pool import SSHPool
from cluster.watching.tracking import Tracking
from tests.bot.botkit import dev_config, login_run


def run_local(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, check=False)


def test_the_child_gets_a_linked_copy_and_the_parents_files_stay(tmp_path: Path) -> None:
    parent = tmp_path / "nemo_rl" / "4187" / "checkpoints" / "step_19"
    (parent / "policy").mkdir(parents=True)
    (parent / "policy" / "weights.pt").write_text("weights")
    target = tmp_path / "nemo_rl" / "from-L-1" / "checkpoints" / "step_19"
    done = run_local(copy_script(str(parent), str(target)))
    assert (done.returncode, done.stdout.strip()) == (0, "linked"), done.stderr
    copied = target / "policy" / "weights.pt"
    assert copied.read_text() == "weights"
    assert copied.stat().st_ino == (parent / "policy" / "weights.pt").stat().st_ino
    # The child's pruning removes its copy; the parent's checkpoint is whole.
    run_local(f"rm -rf {target}")
    assert (parent / "policy" / "weights.pt").read_text() == "weights"
    again = run_local(copy_script(str(parent), str(target)))
    kept = run_local(copy_script(str(parent), str(target)))
    assert again.stdout.strip() == "linked" and kept.stdout.strip() == "kept"
    assert sorted(p.name for p in target.parent.iterdir()) == ["step_19"]  # no half copy


def test_a_missing_checkpoint_fails_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "from-L-2" / "checkpoints" / "step_3"
    done = run_local(copy_script(str(tmp_path / "gone" / "step_3"), str(target)))
    assert done.returncode == 3 and "no checkpoint directory" in done.stderr
    assert not target.exists()


def test_paths_are_data_not_code(tmp_path: Path) -> None:
    evil = tmp_path / "x; touch pwned"
    done = run_local(copy_script(str(evil), str(tmp_path / "t$(touch pwned2)")))
    assert done.returncode == 3
    assert not (tmp_path / "pwned").exists() and not Path("pwned2").exists()


def test_the_child_writes_in_a_directory_of_its_own() -> None:
    profile = ClusterProfile.model_validate(
        {
            "name": "a4",
            "type": "hcc-a4",
            "login": {"host": "127.0.0.1", "port": 2222, "user": "trainer"},
            "partition": "a4",
            "max_nodes": 4,
        }
    )
    parent = Tracking(framework="nemo-rl", job_id="4187", checkpoint_dir="4187/checkpoints")
    source, target, value = NEMO_RL.start_copy(parent, "step_19", profile, "L-1")
    assert source == "~/vertex-oss-training/nemo_rl/4187/checkpoints/step_19"
    assert target == "~/vertex-oss-training/nemo_rl/from-L-1/checkpoints/step_19"
    assert value == "from-L-1/checkpoints"  # checkpointing.checkpoint_dir, relative to nemo_rl
    assert NEMO_RL.starts_in_copy


@pytest.mark.devcluster
async def test_the_copy_is_made_on_the_login_node_under_the_home(unique: str) -> None:
    """Over the shared connection, with ``~`` the login user's home: linked, then kept."""
    profile = dev_config().clusters["a4"]
    base = f"~/vertex-oss-training/nemo_rl/sectest-{unique}"
    login_run(f"mkdir -p {base}/41/checkpoints/step_3 && echo w > {base}/41/checkpoints/step_3/w")
    try:
        async with SSHPool() as pool:
            source, target = f"{base}/41/checkpoints/step_3", f"{base}/from-L-1/checkpoints/step_3"
            assert await copy_start(pool, profile, source, target) == "linked"
            assert await copy_start(pool, profile, source, target) == "kept"
            with pytest.raises(ClusterError, match="no checkpoint directory"):
                await copy_start(pool, profile, f"{base}/none/step_9", f"{base}/t/step_9")
        inodes = login_run(f"stat -c %i {source}/w {target}/w").split()
        assert len(inodes) == 2 and inodes[0] == inodes[1], inodes
    finally:
        login_run(f"rm -rf {base}", check=False)
