"""Pre-flight checks before a submission, all in one SSH round trip, and the dry run.

Checked: the partition exists and is up, the nodes fit (node count and GPUs per
node), the image and the recipe exist, the launcher is there, the cache (and
log) directories are writable, the directories the container mounts exist (a
real cluster's pyxis fails the container when a mount source is missing, and
nothing creates it), secret files are readable, the file the job sources for
its secrets (NeMo-RL's ``configs/auth.sh``) does not replace the ones the launch
exports, and the site's launcher has what the launch needs: its ``--help`` is
read in the same round trip while its options are not known, and the launch
leaves out what it lacks (:attr:`PreflightResult.notes` say how it does without).
A failed check has a user-facing message that says what to change.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from typing import Any

from cluster.launching.launch import REMOTE_SHELL, LaunchPlan, plan_launch
from cluster.launching.spec import LaunchSpec
from cluster.site.launcher_options import LauncherOptions, parse_help
from cluster.slurm.sinfo import (
    PartitionInfo,
    build_sinfo,
    format_partitions,
    parse_sinfo,
    partitions,
)
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import join_remote, run_remote_python

PREFLIGHT_TIMEOUT_S = 30.0
#: At most this long for the launcher's --help (a run.py that imports NeMo first is slow);
#: past it, nothing is learned and the launch sends every flag, as before the help was read.
HELP_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str


@dataclass(frozen=True)
class PreflightResult:
    cluster: str
    checks: tuple[Check, ...]
    partitions: tuple[PartitionInfo, ...] = ()
    launcher: LauncherOptions | None = None  # the site's launcher's options, when known
    notes: tuple[str, ...] = ()  # what the launcher lacks and how the launch does without it

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def message(self) -> str:
        """The user-facing text: one line per failed check ("" when all passed)."""
        return "\n".join(c.message for c in self.failures)


def exported_secrets(spec: LaunchSpec) -> list[str]:
    """The secret variables the launch script exports for the person."""
    return sorted({*spec.secrets, *spec.secret_files()})


def preflight_payload(spec: LaunchSpec) -> dict[str, Any]:
    fw = spec.fw
    payload: dict[str, Any] = {
        "sinfo_argv": shlex.split(build_sinfo()),
        "files": fw.preflight_files(spec),
        "writable": fw.preflight_writable(spec),
        "dirs": {label: m.path for label, m in fw.preflight_mounts(spec).items()},
        "readable": spec.secret_files(),
        "recipes_dir": spec.profile.recipes_dir,
        "recipe_globs": [f"{fw.subdir}/{g}" for g in fw.recipe_globs],
        "image_globs": [f"{fw.subdir}/*.sqsh"],
    }
    if spec.launcher is None and fw.help_argv:
        payload["help"] = {
            "cwd": spec.work_dir,
            "argv": list(fw.help_argv),
            "timeout_s": HELP_TIMEOUT_S,
        }
    auth, names = fw.auth_file(spec), exported_secrets(spec)
    if auth and names:
        payload["assigns"] = {"path": auth, "names": names}
    return payload


def evaluate_preflight(spec: LaunchSpec, raw: dict[str, Any]) -> PreflightResult:
    """Turn the probe's answer into checks (pure)."""
    cluster = spec.cluster
    sinfo = raw.get("sinfo") or {}
    infos = partitions(parse_sinfo(sinfo.get("stdout", "")))
    checks = _slurm_checks(spec, infos, sinfo)
    payload = preflight_payload(spec)
    files = raw.get("files", {})
    recipes = [r for r in raw.get("recipes", []) if r.startswith(spec.work_dir.rsplit("/", 1)[-1])]
    for label, path in payload["files"].items():
        ok = bool(files.get(label))
        if label == "recipe":
            known = ", ".join(r.split("/", 1)[1] for r in recipes) or "none"
            text = f"Recipe '{spec.script}' does not exist in {spec.work_dir} on {cluster}. "
            text += f"Recipes there: {known}."
        elif label == "image":
            found = list(raw.get("images", []))
            images = ", ".join(found) or "none"
            text = f"Image {path} does not exist on {cluster}. Images in the recipes dir: {images}."
            if found:  # e.g. a newer release than the default (nemo_rl-h20260302.sqsh)
                other = join_remote(spec.profile.recipes_dir, found[-1])
                text += (
                    f" Use one with image={other}, or name it in the cluster's config "
                    f"(images: {{{spec.framework}: {other}}})."
                )
        else:
            text = f"Launcher {path} does not exist on {cluster} (recipes dir not set up?)."
        checks.append(Check(label, ok, f"{label.capitalize()} {path} found." if ok else text))
    for label, path in payload["writable"].items():
        ok = bool(raw.get("writable", {}).get(label))
        text = f"Directory {path} ({label}) is not writable on {cluster}."
        checks.append(Check(label, ok, f"Directory {path} ({label}) is writable." if ok else text))
    for name, path in payload["readable"].items():
        ok = bool(raw.get("readable", {}).get(name))
        text = f"Secret file for {name} ({path}) is not readable on {cluster}."
        good = f"Secret file for {name} ({path}) is readable."
        checks.append(Check(f"secret {name}", ok, good if ok else text))
    options = spec.launcher or parse_help(str((raw.get("help") or {}).get("stdout", "")))
    fitted = dataclasses.replace(spec, launcher=options) if options else spec
    checks += _mount_checks(fitted, raw.get("dirs", {}))
    checks += _auth_checks(fitted, raw.get("assigns"))
    checks += [Check("launcher", False, text) for text in fitted.fw.launcher_problems(fitted)]
    notes = tuple(fitted.fw.launcher_notes(fitted))
    checks += [Check("launcher", True, f"{note}.") for note in notes]
    return PreflightResult(
        cluster=cluster,
        checks=tuple(checks),
        partitions=tuple(infos),
        launcher=options,
        notes=notes,
    )


def _mount_checks(spec: LaunchSpec, found: dict[str, Any]) -> list[Check]:
    checks = []
    who = spec.profile.login.user
    for label, mount in spec.fw.preflight_mounts(spec).items():
        path = mount.path
        if found.get(label):
            checks.append(Check(label, True, f"Directory {path} ({mount.source}) exists."))
            continue
        text = (
            f"Directory {path} ({mount.source}) does not exist on {spec.cluster}. The job's "
            "container mounts it, and a missing mount source fails the container at start: "
            f"nothing creates it. Create it on the login node as {who} with "
            f"`mkdir -p {path}`, or point {mount.setting} at a directory that exists."
        )
        checks.append(Check(label, False, text))
    return checks


def _auth_checks(spec: LaunchSpec, raw: Any) -> list[Check]:
    path = spec.fw.auth_file(spec)
    if not path or not isinstance(raw, dict) or not raw.get("exists"):
        return []
    if raw.get("error"):
        text = f"{path} on {spec.cluster} cannot be read ({raw['error']}); the job sources it."
        return [Check("auth file", False, text)]
    by_name: dict[str, list[str]] = {}
    for hit in raw.get("lines", []):
        by_name.setdefault(str(hit.get("name")), []).append(str(hit.get("line")))
    checks = []
    for name, lines in sorted(by_name.items()):
        where = f"line{'s' if len(lines) > 1 else ''} {', '.join(lines)}"
        text = (
            f"{path} on {spec.cluster} sets {name} ({where}, a line like "
            f"`export {name}=...`), and the job sources it after trainbot exported your "
            f"{name}: the job would run with that file's value instead of yours. Change "
            f"the line to `export {name}=${{{name}:-...}}` (the file's value only when none "
            "was exported), or remove it."
        )
        checks.append(Check(f"auth {name}", False, text))
    if not checks:
        names = ", ".join(exported_secrets(spec))
        checks.append(Check("auth file", True, f"{path} keeps the exported {names}."))
    return checks


def _slurm_checks(
    spec: LaunchSpec, infos: list[PartitionInfo], sinfo: dict[str, Any]
) -> list[Check]:
    cluster, part = spec.cluster, spec.slurm_partition
    if sinfo.get("rc"):
        err = str(sinfo.get("stderr", "")).strip()
        return [Check("partition", False, f"sinfo failed on {cluster}: {err}")]
    found = {p.name: p for p in infos}
    info = found.get(part)
    if info is None:
        text = f"Partition '{part}' does not exist on {cluster}. "
        text += f"Partitions there: {format_partitions(infos) or 'none'}."
        return [Check("partition", False, text)]
    up = f"Partition '{part}' on {cluster} is up."
    checks = [
        Check("partition", info.up, up if info.up else f"Partition '{part}' on {cluster} is down.")
    ]
    if spec.nodes > info.nodes:
        text = f"Partition '{part}' on {cluster} has {info.nodes} nodes; {spec.nodes} asked for."
        checks.append(Check("nodes", False, text))
    else:
        checks.append(Check("nodes", True, f"{spec.nodes} of its {info.nodes} nodes asked for."))
    need = spec.profile.gpus_per_node
    ok = info.gpus_per_node >= need
    text = f"Nodes in '{part}' on {cluster} have {info.gpus_per_node} GPUs; the job needs {need}."
    good = f"{info.gpus_per_node} GPUs per node; the job needs {need}."
    checks.append(Check("gpus", ok, good if ok else text))
    return checks


async def preflight(pool: SSHPool, spec: LaunchSpec) -> PreflightResult:
    """Every check in one round trip."""
    payload = preflight_payload(spec)
    raw = await run_remote_python(
        pool,
        spec.profile.login,
        "preflight/probe_remote.py",
        payload,
        timeout_s=PREFLIGHT_TIMEOUT_S + (HELP_TIMEOUT_S if "help" in payload else 0.0),
        cluster=spec.cluster,
    )
    return evaluate_preflight(spec, raw)


@dataclass(frozen=True)
class DryRun:
    """What a launch would do: the remote shell, the script (secrets redacted), the checks."""

    plan: LaunchPlan
    remote_shell: str
    script: str
    command_line: str
    preflight: PreflightResult


async def dry_run(pool: SSHPool, spec: LaunchSpec) -> DryRun:
    """Pre-flight and plan (as the site's launcher allows); nothing is submitted."""
    checks = await preflight(pool, spec)
    if spec.launcher is None and checks.launcher is not None:
        spec = dataclasses.replace(spec, launcher=checks.launcher)
    plan = plan_launch(spec)
    return DryRun(plan, REMOTE_SHELL, plan.script(redact=True), plan.command_line, checks)
