"""The soak's checks: what each launch's thread said (read by :mod:`bench.soak_thread`),
against Slurm's record and the disk.

Pure but for :func:`checkpoint_on_disk`: threads (as the Slack stand-in received them),
``sacct`` rows and the soak's own notes in, divergences out. trainbot's own records
(Redis) are never read, but for what it charged to budgets (:func:`check_charges`),
which is compared with what ``sacct`` recorded.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.soak_slurm import JobRow
from bench.soak_thread import (
    FINAL_RE,
    NO_JOB_WORDS,
    REQUEUED_RE,
    SUBMITTED_RE,
    Plan,
    View,
    final_thread_message,
    parse_thread,
)


@dataclass(frozen=True)
class Divergence:
    kind: str
    launch: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.launch}: {self.detail}"


def same_state(thread_word: str, slurm_state: str) -> bool:
    """trainbot says Slurm's words; ``CANCELLED by 1001`` is CANCELLED."""
    return slurm_state == thread_word or slurm_state.startswith(thread_word + " ")


def check_final(view: View) -> list[Divergence]:
    """The parent's final word and the thread's final message equal Slurm's final state."""
    lid, word, last = view.launch_id, view.final_word, view.last_job
    out: list[Divergence] = []
    if not view.final:
        said = view.thread[-1][:160] if view.thread else "(no thread)"
        state = f"{last.job_id} {last.state}" if last else "no job"
        return [Divergence("stuck", lid, f"parent says {word or '?'}; thread: {said!r}; {state}")]
    summary = final_thread_message(view.thread)
    if summary:
        match = FINAL_RE.match(summary)
        said = match.group(1) if match else ""
        if said != word:
            detail = f"parent says {word}, the thread's final message {summary[:120]!r}"
            out.append(Divergence("parent_vs_thread", lid, detail))
    if word in NO_JOB_WORDS:
        if view.jobs:
            jobs = ", ".join(f"{j.job_id} {j.state}" for j in view.jobs)
            out.append(Divergence("final_state", lid, f"thread says {word}; Slurm has {jobs}"))
        return out
    if last is None:
        if word not in ("CANCELLED", "INTERNAL_ERROR", "FAILED"):
            out.append(Divergence("final_state", lid, f"thread says {word}; Slurm has no job"))
        return out
    if same_state(word, last.state):
        return out
    cancelled = view.cancelled_at
    if word == "CANCELLED" and cancelled and last.end and last.end <= cancelled + 2:
        return out  # cancelled between attempts: the last job had already ended
    if word == "CANCELLED" and cancelled and last.end and last.state != "COMPLETED":
        return out  # a cancel is final: the job failing as it was cancelled is still CANCELLED
    detail = f"thread says {word}; sacct says job {last.job_id} {last.state}"
    return [*out, Divergence("final_state", lid, detail)]


def check_order(view: View) -> list[Divergence]:
    """Queued first; Submitted before Running; attempts rising; one final, after the rest."""
    lid, thread = view.launch_id, view.thread
    out: list[Divergence] = []
    if not thread:
        return [Divergence("lost", lid, "the /train was acknowledged but no thread message came")]
    if not thread[0].startswith("Queued by"):
        out.append(Divergence("order", lid, f"first thread message is {thread[0][:80]!r}"))
    parsed = parse_thread(thread)
    attempts = [a for _, a, _ in parsed.submitted]
    if any(b <= a for a, b in zip(attempts, attempts[1:], strict=False)):
        out.append(Divergence("order", lid, f"attempt numbers not rising: {attempts}"))
    first_submit = parsed.submitted[0][2] if parsed.submitted else None
    for index in parsed.running:
        if first_submit is None or index < first_submit:
            out.append(Divergence("order", lid, f"{thread[index]!r} before any Submitted"))
    if len(parsed.finals) > 1:
        shown = [thread[i][:60] for i in parsed.finals]
        out.append(Divergence("final_twice", lid, f"{len(parsed.finals)} final messages: {shown}"))
    if parsed.finals:
        end = parsed.finals[-1]
        later = [
            t
            for t in thread[end + 1 :]
            if not t.startswith(("Cancelled Slurm job", "⚠️ Could not cancel"))
        ]
        if later:
            out.append(Divergence("order", lid, f"after the final message: {later[0][:100]!r}"))
    return out


def check_duplicates(view: View) -> list[Divergence]:
    """No message twice: within one run of a job (between Submitted lines and Slurm's
    requeues) nothing repeats, and a message naming a job or a checkpoint never repeats."""
    out: list[Divergence] = []
    segment: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    for text in view.thread:
        if SUBMITTED_RE.match(text) or REQUEUED_RE.match(text):
            segment = Counter()
        segment[text] += 1
        anywhere[text] += 1
        if segment[text] == 2 or (
            anywhere[text] == 2 and re.search(r"[Jj]ob \d+|Checkpoint|^\S+ [A-Z_]+ in ", text)
        ):
            out.append(Divergence("duplicate_message", view.launch_id, repr(text[:140])))
    repeated = [t for t, n in Counter(view.pages).items() if n > 1]
    out += [Divergence("duplicate_page", view.launch_id, repr(t[:140])) for t in repeated]
    return out


def check_jobs(view: View) -> list[Divergence]:
    """Each attempt one Slurm job; every job the thread names exists, every job Slurm ran
    for the launch is named in the thread; no job runs for a cancelled launch."""
    lid, parsed = view.launch_id, parse_thread(view.thread)
    said = [job for job, _, _ in parsed.submitted] + parsed.appeared
    slurm = {j.job_id: j for j in view.jobs}
    out: list[Divergence] = []
    for job, count in Counter(said).items():
        if count > 1 and job not in parsed.appeared:
            out.append(Divergence("duplicate_message", lid, f"job {job} announced {count} times"))
        if job not in slurm:
            out.append(Divergence("job_unknown_to_slurm", lid, f"thread names job {job}"))
    for job_id, row in slurm.items():
        if job_id not in said:
            detail = f"Slurm job {job_id} ({row.state}, {row.name}) never named in the thread"
            out.append(Divergence("job_not_in_thread", lid, detail))
    cancelled = view.cancelled_at
    if view.final_word == "CANCELLED" and cancelled:
        for row in view.jobs:
            if row.start and row.start > cancelled + 5 and not row.state.startswith("CANCELLED"):
                detail = f"job {row.job_id} started {row.start - cancelled:.0f} s after the cancel"
                out.append(Divergence("ran_after_cancel", lid, f"{detail} ({row.state})"))
    for row in view.jobs:
        if row.state in ("RUNNING", "PENDING", "REQUEUED", "SUSPENDED") or not row.end:
            out.append(Divergence("stuck", lid, f"job {row.job_id} still {row.state} at the end"))
    return out


def step_of(label: str) -> int | None:
    match = re.fullmatch(r"step ([0-9,]+)", label)
    return int(match.group(1).replace(",", "")) if match else None


def checkpoint_on_disk(plan: Plan, jobs: list[JobRow], step: int, dirs: dict[str, Path]) -> str:
    """ "" when a complete checkpoint of ``step`` is on disk, else what is wrong."""
    if plan.framework == "nemo":
        # NeMo's logger puts them under its name, "default" (nemo/lightning/nemo_logger.py)
        ckpts = dirs["nemo_logs"] / f"{plan.tag}-{plan.launch_id}" / "default" / "checkpoints"
        if not ckpts.is_dir():
            return f"no {ckpts}"
        found = [
            p
            for p in ckpts.iterdir()
            if re.search(rf"-step={step}(?:-|$)", p.name) and not p.name.endswith("-unfinished")
        ]
        if not found:
            return f"no *-step={step}-* in {ckpts}"
        for path in found:
            if (path / "weights").is_dir() and not Path(f"{path}-unfinished").exists():
                return ""
        return f"{found[0]} incomplete (no weights/ or an -unfinished marker)"
    looked = []
    for job in sorted(jobs, key=lambda j: int(j.job_id)):
        ckpts = dirs["nemo_rl"] / job.job_id / "checkpoints"
        looked.append(str(ckpts))
        if (ckpts / f"step_{step}").is_dir():
            return ""
        if (ckpts / f"tmp_step_{step}").exists():
            return f"only {ckpts}/tmp_step_{step} (unfinished)"
    return f"no step_{step} in {', '.join(looked) or 'any job directory'}"


def check_checkpoints(view: View, dirs: dict[str, Path]) -> list[Divergence]:
    out: list[Divergence] = []
    labels = parse_thread(view.thread).checkpoints
    for label, count in Counter(labels).items():
        if count > 1:
            out.append(Divergence("checkpoint_twice", view.launch_id, f"{label} x{count}"))
        step = step_of(label)
        if step is None:
            out.append(Divergence("checkpoint_missing", view.launch_id, f"unreadable {label!r}"))
            continue
        wrong = checkpoint_on_disk(view.plan, view.jobs, step, dirs)
        if wrong:
            out.append(Divergence("checkpoint_missing", view.launch_id, f"{label}: {wrong}"))
    return out


HUMAN_FAULTS = {"oom": "gpu_oom", "gated": "gated_repo", "wandb": "wandb_key"}


def expected_pages(view: View, *, page_user_faults: bool) -> list[str]:
    """The causes, by Slurm's record and what the soak injected, that need on-call."""
    causes = []
    if any(r.state.startswith("NODE_FAIL") for r in view.incarnations + view.jobs):
        causes.append("node failure")
    ran = any(j.start for j in view.jobs)
    if view.plan.fault == "hang" and ran and view.final_word == "CANCELLED":
        causes.append("silent hang")
    failed = view.last_job is not None and view.last_job.state == "FAILED"
    if page_user_faults and view.plan.fault in HUMAN_FAULTS and failed:
        causes.append(HUMAN_FAULTS[view.plan.fault])
    return causes


def check_pages(view: View, *, page_user_faults: bool) -> list[Divergence]:
    wanted = expected_pages(view, page_user_faults=page_user_faults)
    if len(view.pages) == len(wanted):
        return []
    got = [p.split(": ", 1)[-1][:90] for p in view.pages]
    detail = f"expected {len(wanted)} page(s) {wanted}, on-call got {len(view.pages)}: {got}"
    return [Divergence("page_count", view.launch_id, detail)]


def check_launch(view: View, dirs: dict[str, Path], *, page_user_faults: bool) -> list[Divergence]:
    out = check_order(view)
    if not view.thread:
        return out
    out += check_final(view)
    out += check_duplicates(view)
    out += check_jobs(view)
    out += check_checkpoints(view, dirs)
    out += check_pages(view, page_user_faults=page_user_faults)
    return out


CHARGE_TOLERANCE_GPU_H = 1e-6  # the same ElapsedRaw and GPUs, summed in another order


def check_charges(
    views: list[View],
    charged: dict[str, float | None],
    charged_total: float,
    incarnations: list[JobRow],
) -> list[Divergence]:
    """Every GPU-hour charged once, as Slurm recorded it. ``charged``: launch id -> the
    GPU-hours trainbot charged it (None: not charged); ``charged_total``: the sum of every
    budget's usage; ``incarnations``: ``sacct -D`` rows of all the soak's jobs. Each
    launch Slurm ran a job for is charged the sum over its jobs' incarnations of ElapsedRaw
    x AllocTRES gres/gpu, and the budgets hold, in all, what sacct reports in all."""
    out: list[Divergence] = []
    for view in views:
        used = sum(row.gpu_hours for row in view.incarnations)
        got = charged.get(view.launch_id)
        if got is None:
            if view.incarnations:
                detail = f"never charged; sacct: {used:.6f} GPU-hours"
                out.append(Divergence("uncharged", view.launch_id, detail))
        elif abs(got - used) > CHARGE_TOLERANCE_GPU_H:
            jobs = ", ".join(sorted({row.job_id for row in view.incarnations})) or "none"
            detail = f"charged {got:.6f} GPU-hours; sacct: {used:.6f} (jobs {jobs})"
            out.append(Divergence("charge_mismatch", view.launch_id, detail))
    total = sum(row.gpu_hours for row in incarnations)
    if abs(charged_total - total) > CHARGE_TOLERANCE_GPU_H * max(1, len(incarnations)):
        detail = (
            f"budgets charged {charged_total:.6f} GPU-hours in all; sacct reports "
            f"{total:.6f} for the soak's {len(incarnations)} job incarnations"
        )
        out.append(Divergence("charged_total", "all", detail))
    return out
