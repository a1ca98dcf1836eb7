"""Image jobs, pure: the batch script, the sbatch line, and what the end of a job means."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cluster.images.jobs import (
    READY_MARK,
    ImageJob,
    job_script,
    outcome,
    plan_fetch,
    plan_import,
    submit_command,
)
from cluster.site.profiles import ClusterProfile

PROFILE = ClusterProfile.model_validate(
    {"name": "a4", "type": "hcc-a4", "login": {"host": "h", "user": "trainer"},
     "partition": "a4", "max_nodes": 4, "region": "us"}
)  # fmt: skip
IMPORT = plan_import(PROFILE, "nvcr.io/nvidia/nemo:26.02", "nemo-26.02")
FETCH = plan_fetch(PROFILE, "nemo")


def test_the_import_script_keeps_the_credentials_private_and_removes_them() -> None:
    script = job_script(IMPORT)
    assert 'dest="$HOME"/vertex-oss-training/images/nemo-26.02.sqsh' in script
    assert "umask 077" in script
    assert 'conf=$(mktemp -d "${TMPDIR:-/tmp}/trainbot-enroot.XXXXXXXX")' in script
    assert 'trap \'rm -rf "$conf" "$part"\' EXIT' in script  # however the job ends
    assert 'creds="${ENROOT_CONFIG_PATH:-$HOME/.config/enroot}/.credentials"' in script
    assert 'export ENROOT_CONFIG_PATH="$conf"' in script
    assert "enroot import -o \"$part\" 'docker://nvcr.io#nvidia/nemo:26.02'" in script
    assert script.index('mv -f "$part" "$dest"') > script.index("enroot import -o")
    assert "password" not in script  # the bot never holds a credential to write


def test_the_fetch_script_links_a_mounted_bucket_or_copies() -> None:
    script = job_script(FETCH)
    mounted = "/gcs/vmds-containers-us/vmds_nemo_squashfs/nemo-20250721.sqsh"
    assert f"if [ -f {mounted} ]; then" in script and f'ln -sfn {mounted} "$dest"' in script
    uri = "gs://vmds-containers-us/vmds_nemo_squashfs/nemo-20250721.sqsh"
    assert f'gcloud storage cp {uri} "$part"' in script


def test_the_scripts_are_valid_bash() -> None:
    for job in (IMPORT, FETCH):
        subprocess.run(["bash", "-n"], input=job_script(job), text=True, check=True)


def test_the_sbatch_line_writes_the_log_beside_the_image() -> None:
    assert submit_command(IMPORT) == (
        'mkdir -p "$HOME"/vertex-oss-training/images && cd "$HOME"/vertex-oss-training/images '
        "&& sbatch --parsable -N 1 -J trainbot-image-import-nemo-26.02 -t 02:00:00 -p a4 "
        '-o "$HOME"/vertex-oss-training/images/.nemo-26.02.%j.log'
    )
    assert IMPORT.log_of("42") == "~/vertex-oss-training/images/.nemo-26.02.42.log"


ENROOT_401 = """[INFO] Querying registry for permission grant
[INFO] Authenticating with user: $oauthtoken
[INFO] Using credentials from file: /tmp/trainbot-enroot.x/.credentials
[ERROR] URL https://nvcr.io/proxy_auth returned error code: 401 Unauthorized
"""
GCLOUD_401 = (
    "ERROR: (gcloud.storage.cp) HTTPError 401: Anonymous caller does not have "
    "storage.objects.get access to the Google Cloud Storage object.\n"
)
ENOSPC = """[INFO] Creating squashfs filesystem...
Write failed because No space left on device

FATAL ERROR:Failed to write to output filesystem
"""

ENDS = [
    (IMPORT, "COMPLETED", f"...\n{READY_MARK}~/x.sqsh\n", "ok", True),
    (IMPORT, "COMPLETED", "[INFO] Creating squashfs filesystem...\n", "failed", False),
    (IMPORT, "FAILED", ENROOT_401, "auth", True),
    (FETCH, "FAILED", GCLOUD_401, "auth", True),
    (IMPORT, "FAILED", ENOSPC, "disk_full", True),
    (FETCH, "FAILED", "ERROR: (gcloud.storage.cp) [Errno 28] No space left on device: 'x'\n",
     "disk_full", True),
    (IMPORT, "CANCELLED", "[INFO] Fetching image manifest\n", "cancelled", True),
    (IMPORT, "FAILED", "bash: enroot: command not found\n", "failed", False),
    (IMPORT, "TIMEOUT", "", "failed", False),
    (FETCH, "NODE_FAIL", "Copying gs://...\n", "node", True),
]  # fmt: skip


@pytest.mark.parametrize(("job", "state", "log", "cause", "site"), ENDS)
def test_the_end_of_a_job(job: ImageJob, state: str, log: str, cause: str, site: bool) -> None:
    end = outcome(job, state, "1:0", log)
    assert (end.cause, end.ok, end.site) == (cause, cause == "ok", site)


def test_the_words_say_what_to_do() -> None:
    end = outcome(IMPORT, "FAILED", "1:0", ENROOT_401)
    assert end.text.startswith(
        "The registry refused the import of `docker://nvcr.io#nvidia/nemo:26.02`: 401 "
        "Unauthorized (https://nvcr.io/proxy_auth). The job used the enroot credentials file"
    )
    assert "`machine nvcr.io login $oauthtoken password <API key>`" in end.text
    assert end.text.endswith("then run the same /images import again.")
    end = outcome(FETCH, "FAILED", "1:0", GCLOUD_401)
    assert "run `gcloud auth login`" in end.text and "/images fetch again" in end.text
    end = outcome(IMPORT, "FAILED", "1:0", ENOSPC)
    assert "the disk is full (No space left on device) where it writes (`~/vertex-oss-training/" \
        "images`, or enroot's temporary directory)" in end.text  # fmt: skip
    end = outcome(IMPORT, "FAILED", "1:0", "a\nb\nbash: enroot: command not found\n")
    assert end.text == (
        "The import of nemo-26.02 failed (FAILED, exit 1:0): a; b; bash: enroot: command not "
        "found. Log: `~/vertex-oss-training/images/.nemo-26.02.<job id>.log`."
    )


# --- the dev cluster's stand-ins, run here as the programs they are ----------------------

BIN = Path(__file__).resolve().parents[2] / "devcluster" / "bin"


def standin(tool: str, *args: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / tool), *args], capture_output=True, text=True, timeout=30, cwd=home,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "DEVCLUSTER_IMAGE_S": "0", **env},
    )  # fmt: skip


def test_the_enroot_standin_imports_and_fails_as_enroot_does(tmp_path: Path) -> None:
    done = standin("enroot", "import", "-o", "x.sqsh", "docker://nvcr.io#nvidia/nemo:26.02",
                   home=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "x.sqsh").read_text().startswith("hsqs ")
    again = standin("enroot", "import", "-o", "x.sqsh", "docker://ubuntu", home=tmp_path)
    assert again.returncode == 1 and "[ERROR] File already exists: x.sqsh" in again.stderr
    private = "docker://registry.devcluster.test#team/model:1"
    denied = standin("enroot", "import", "-o", "p.sqsh", private, home=tmp_path)
    assert denied.returncode == 1 and not (tmp_path / "p.sqsh").exists()
    assert "[INFO] Authenticating with user: <anonymous>" in denied.stdout
    assert denied.stderr == (
        "[ERROR] URL https://registry.devcluster.test/v2/team/model/manifests/1 returned error "
        "code: 401 Unauthorized\n"
    )
    config = tmp_path / "conf"
    config.mkdir()
    (config / ".credentials").write_text(
        "machine registry.devcluster.test login team password devcluster-registry-key\n"
    )
    allowed = standin("enroot", "import", "-o", "p.sqsh", private, home=tmp_path,
                      ENROOT_CONFIG_PATH=str(config))  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    assert f"[INFO] Using credentials from file: {config}/.credentials" in allowed.stdout
    full = standin("enroot", "import", "-o", "f.sqsh", "docker://ubuntu", home=tmp_path,
                   DEVCLUSTER_ENROOT_FAULT="disk_full")  # fmt: skip
    assert full.returncode == 1
    assert "Write failed because No space left on device" in full.stderr
    assert "FATAL ERROR:Failed to write to output filesystem" in full.stderr


def test_the_gcloud_standin_copies_and_fails_as_gcloud_does(tmp_path: Path) -> None:
    uri = "gs://vmds-containers-europe/vmds_nemo_squashfs/nemo-20250721.sqsh"
    done = standin("gcloud", "storage", "cp", uri, "n.sqsh", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "n.sqsh").read_text().startswith("hsqs ")
    assert not (tmp_path / "n.sqsh_.gstmp").exists()
    missing = standin("gcloud", "storage", "cp", uri.replace("nemo-", "nemo-x"), "m",
                      home=tmp_path)  # fmt: skip
    assert missing.returncode == 1 and "matched no objects or files" in missing.stderr
    (tmp_path / "devcluster-control").mkdir()
    (tmp_path / "devcluster-control" / "default.env").write_text("gcloud_fault=401\n")
    denied = standin("gcloud", "storage", "cp", uri, "d.sqsh", home=tmp_path)
    assert denied.returncode == 1 and denied.stderr.startswith(
        "ERROR: (gcloud.storage.cp) HTTPError 401: Anonymous caller does not have "
        "storage.objects.get access to the Google Cloud Storage object."
    )
    (tmp_path / "devcluster-control" / "default.env").write_text("gcloud_fault=disk_full\n")
    full = standin("gcloud", "storage", "cp", uri, "f.sqsh", home=tmp_path)
    assert full.returncode == 1 and not (tmp_path / "f.sqsh").exists()
    assert "ERROR: (gcloud.storage.cp) [Errno 28] No space left on device:" in full.stderr
