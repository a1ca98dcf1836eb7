"""After training (``then=export``, ``then=eval:<tasks>``): one Slurm job of one node, as
the launch's person, in the launch's container, that converts the final checkpoint to
Hugging Face format with the framework's own tool and, for ``then=eval``, runs the
site's evaluation recipe (the cluster's ``eval_command``) on it.

Building the job and reading what it printed are pure (table-tested); submitting it,
asking Slurm for its state and reading its log are one round trip each.

The export goes beside the run's checkpoints: ``<checkpoints>/../hf/<checkpoint>``; the
job's log (``after-<job id>.out``) and the evaluation's results (``eval-<checkpoint>/``)
go in that ``hf/`` directory too.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from cluster.errors import SlurmCommandFailed
from cluster.launching.jobs import tail_log
from cluster.launching.spec import LaunchSpec
from cluster.site.image_refs import is_registry_ref, pyxis_image
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import is_terminal, normalize_state
from cluster.slurm.sacct import build_sacct, parse_sacct
from cluster.slurm.sbatch import parse_sbatch_parsable, sbatch_options
from cluster.ssh.pool import SSHPool
from cluster.ssh.remote import export_lines, join_argv, join_remote, quote_path

STEP_TIME_LIMIT = "02:00:00"
#: What each framework's converter prints last, the directory after it: Megatron-Bridge's
#: convert_checkpoints.py, NeMo-RL's convert_dcp_to_hf.py, NeMo's ``nemo llm export``.
EXPORTED_RE = re.compile(
    r"(?:Successfully exported model to:?|Saved HF checkpoint to:?|Checkpoint exported to)"
    r"[ \t]*(.*)"
)
#: NeMo's line goes through rich, which folds a long path at the console's width (80 in a
#: log file): the lines after it that are one word each are the rest of the path.
FOLDED_AFTER = "Checkpoint exported to"
LOG_LINES = 400


@dataclass(frozen=True)
class StepPlan:
    """What one after-training job does: export ``checkpoint`` into ``hf_dir``, then
    (``tasks`` not empty) evaluate it, its results in ``eval_dir``."""

    checkpoint: str
    hf_dir: str
    log_path_pattern: str  # with %j for the job id
    eval_dir: str = ""
    tasks: tuple[str, ...] = ()

    def log_path(self, job_id: str) -> str:
        return self.log_path_pattern.replace("%j", job_id)


def plan_step(checkpoint_dir: str, checkpoint: str, tasks: tuple[str, ...] = ()) -> StepPlan:
    """Where the export, its log and the evaluation's results go for ``checkpoint`` (a
    name in ``checkpoint_dir``)."""
    base = join_remote(checkpoint_dir.rstrip("/").rsplit("/", 1)[0] or "/", "hf")
    return StepPlan(
        checkpoint=join_remote(checkpoint_dir, checkpoint),
        hf_dir=join_remote(base, checkpoint),
        log_path_pattern=join_remote(base, "after-%j.out"),
        eval_dir=join_remote(base, f"eval-{checkpoint}") if tasks else "",
        tasks=tasks,
    )


def eval_line(template: str, plan: StepPlan) -> str:
    """The site's ``eval_command`` with its placeholders filled in, each shell-quoted."""
    return template.format(
        model=quote_path(plan.hf_dir),
        tasks=shlex.quote(",".join(plan.tasks)),
        output=quote_path(plan.eval_dir),
    )


def step_script(
    spec: LaunchSpec, plan: StepPlan, *, model: str, job_name: str, redact: bool = True
) -> str:
    """The script (for ``bash -l -s`` as the person) that submits the step: ``sbatch
    --parsable`` of one node whose batch script runs the export (and the evaluation) with
    ``srun`` in the launch's container where pyxis is there.

    The launch's job secrets (``HF_TOKEN`` for a gated tokenizer) are exported in this
    script, as the launch's own submit does, and reach the job through sbatch's environment:
    never in an argument (``--wrap`` holds none); their values are written only when
    ``redact`` is false. A framework whose job sources a file of secrets (NeMo-RL's
    ``configs/auth.sh``) has it sourced by the step too."""
    profile = spec.profile
    here = quote_path(spec.work_dir)
    registry = is_registry_ref(spec.image_path)
    image = shlex.quote(pyxis_image(spec.image_path)) if registry else quote_path(spec.image_path)
    mounts = ",".join(
        f"{quote_path(m)}:{quote_path(m)}"
        for m in dict.fromkeys((spec.work_dir, profile.cache_dir, profile.data_dir))
    )
    inner = [
        "set -e",
        f"export CONTAINER_IMAGE={image}",
        "if srun --help 2>&1 | grep -q -- --container-image; then",
        f'  set -- --container-image="$CONTAINER_IMAGE" --container-mounts={mounts} '
        f"--container-workdir={here} --container-writable --no-container-mount-home",
        "else",
        "  echo 'trainbot: srun has no --container-image here (no pyxis): the step runs "
        "outside a container'",
        "  set --",
        "fi",
    ]
    if auth := spec.fw.auth_file(spec):
        inner.append(f"if [ -f {quote_path(auth)} ]; then . {quote_path(auth)}; fi")
    inner += [
        f"mkdir -p {quote_path(plan.hf_dir)}",
        f"echo 'trainbot: export {plan.checkpoint}'",
        'srun --ntasks=1 "$@" '
        + join_argv(spec.fw.export_argv(spec, model, plan.checkpoint, plan.hf_dir)),
    ]
    if plan.tasks:
        inner += [
            f"mkdir -p {quote_path(plan.eval_dir)}",
            f"echo 'trainbot: evaluate {','.join(plan.tasks)}'",
            'srun --ntasks=1 "$@" ' + eval_line(profile.eval_command, plan),
        ]
    shape = spec.shape
    options = sbatch_options(type(shape)(1, shape.partition, STEP_TIME_LIMIT, shape.account))
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={job_name}",
        *options,
        f"--output={plan.log_path_pattern}",
        *([f"--comment={spec.comment}"] if spec.comment else []),
        f"--wrap={chr(10).join(inner)}",
    ]
    log_dir = plan.log_path_pattern.rsplit("/", 1)[0]
    return (
        "\n".join(
            [
                "set -euo pipefail",
                *export_lines({}, spec.secrets, spec.secret_files(), redact=redact),
                f"mkdir -p {quote_path(log_dir)}",
                f"cd {here}",
                " ".join(
                    quote_path(w[len("--output=") :]).join(("--output=", ""))
                    if w.startswith("--output=")
                    else shlex.quote(w)
                    for w in argv
                )
                + " </dev/null",
            ]
        )
        + "\n"
    )


async def submit_step(pool: SSHPool, profile: ClusterProfile, script: str) -> str:
    """Submit the step (as ``profile``'s user); its Slurm job id."""
    result = await pool.run(
        profile.login, "bash -l -s", input=script, timeout_s=60.0, cluster=profile.name
    )
    try:
        return parse_sbatch_parsable(result.stdout).job_id
    except ValueError as exc:
        raise SlurmCommandFailed(
            command="sbatch", returncode=result.returncode, stderr=str(exc), cluster=profile.name
        ) from exc


async def step_state(pool: SSHPool, profile: ClusterProfile, job_id: str) -> str:
    """Slurm's state of the step's job ("" while accounting does not know it yet)."""
    result = await pool.run(
        profile.login,
        build_sacct([job_id], duplicates=False),
        timeout_s=30.0,
        check=False,
        cluster=profile.name,
    )
    rows = [r for r in parse_sacct(result.stdout) if r.job_id == job_id]
    return normalize_state(rows[-1].state) if rows else ""


def ended(state: str) -> bool:
    return bool(state) and is_terminal(state)


async def step_log(
    pool: SSHPool, profile: ClusterProfile, path: str, roots: tuple[str, ...]
) -> str:
    """The step's log (its last :data:`LOG_LINES` lines), read as the person."""
    return await tail_log(pool, profile, path, lines=LOG_LINES, roots=roots)


# --- what the tools printed ---------------------------------------------------------------


@dataclass(frozen=True)
class EvalRow:
    task: str
    metric: str
    value: float
    stderr: float | None = None


@dataclass(frozen=True)
class StepOutcome:
    exported_to: str = ""  # the directory the converter said it wrote ("": it did not say)
    results: tuple[EvalRow, ...] = field(default_factory=tuple)


def parse_exported(text: str) -> str:
    """Where the converter said it wrote the model, from its last such line (Megatron-Bridge:
    ``Successfully exported model to: <dir>``, NeMo-RL: ``Saved HF checkpoint to: <dir>``,
    NeMo: ``✓ Checkpoint exported to <dir>``, the path folded onto the lines after it);
    "" when it did not say."""
    found = list(EXPORTED_RE.finditer(text))
    if not found:
        return ""
    last = found[-1]
    words = last.group(1).split()
    if words or FOLDED_AFTER not in last.group(0):
        return words[0] if words else ""
    # rich moved the path to the next line and folded it there: every line but its last is
    # as wide as the first
    lines = [line.rstrip() for line in text[last.end() :].splitlines()[1:]]
    if not lines or len(lines[0].split()) != 1:
        return ""
    parts, width = [lines[0]], len(lines[0])
    for line in lines[1:]:
        if len(parts[-1]) != width or len(line.split()) != 1:
            break
        parts.append(line)
    return "".join(parts).strip()


def parse_results_table(text: str) -> tuple[EvalRow, ...]:
    """lm-evaluation-harness's results table (its ``make_table``: ``|Tasks|Version|Filter|
    n-shot|Metric| |Value| |Stderr|``, a task's further metrics on rows with the task cell
    empty) as rows; the last table printed, the groups table left out."""
    rows: list[EvalRow] = []
    header: list[str] = []
    task = ""
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            if header and rows:
                break
            header = [] if not header else header
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "Metric" in cells and ("Tasks" in cells or "Groups" in cells):
            if "Groups" in cells:
                break
            header, rows, task = cells, [], ""
            continue
        if not header or set("".join(cells)) <= set("-: "):
            continue
        row = dict(zip(header, cells, strict=False))
        task = row.get("Tasks", "").lstrip(" -") or task
        value = _number(row.get("Value", ""))
        if not task or value is None:
            continue
        stderr_cells = [c for h, c in zip(header, cells, strict=False) if h == "Stderr"]
        rows.append(
            EvalRow(
                task=task,
                metric=row.get("Metric", ""),
                value=value,
                stderr=_number(stderr_cells[-1]) if stderr_cells else None,
            )
        )
    return tuple(rows)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def read_outcome(text: str) -> StepOutcome:
    return StepOutcome(exported_to=parse_exported(text), results=parse_results_table(text))
