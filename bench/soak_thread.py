"""What the soak reads in a launch's thread: trainbot's words (as
``bot/wording/render.py`` and the notices write them), a launch as the soak planned it
(:class:`Plan`), everything known about it at the end (:class:`View`), and a thread
parsed into its submits, checkpoints and final lines. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bench.soak_slurm import JobRow

# The parent's headline: "<icon> *<WORD>*  ..." (bot/wording/render.py)
PARENT_WORD_RE = re.compile(r"^\S+ \*([A-Z_ -]+)\*")
# Words of a launch still under way (phases, and Slurm states that are not the end).
ACTIVE_WORDS = {
    "AWAITING APPROVAL",
    "QUEUED",
    "PRE-FLIGHT",
    "SUBMITTING",
    "PENDING",
    "RUNNING",
    "RETRYING",
    "CONFIGURING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
}
NO_JOB_WORDS = {"NOT SUBMITTED", "DRY RUN"}
FINAL_RE = re.compile(r"^(?:✅|❌|🚫|⌛|💥|⏸️|❔) ([A-Z_]+) in ")
SUBMITTED_RE = re.compile(
    r"^(?:Submitted|Found the job submitted before a restart): Slurm job (\d+) "
    r"(?:.*\(attempt (\d+)\))?"
)
APPEARED_RE = re.compile(r"^🚫 Slurm job (\d+) appeared after the launch was cancelled")
REQUEUED_RE = re.compile(r"^⚠️ Slurm requeued job \d+|^Job \d+ is pending again")
CHECKPOINT_RE = re.compile(r"^💾 Checkpoint (.+) saved\.$")
FAILED_RE = re.compile(r"^⚠️ Job (\d+) failed \(([A-Z_]+)")
LAUNCH_RE = re.compile(r"\bL-[0-9a-f]{4,12}\b")
MENTION_RE = re.compile(r"^<@[A-Z0-9]+> ")  # the owner's mention on lines that concern them


def unmentioned(text: str) -> str:
    """A thread line without the owner's mention it may start with."""
    return MENTION_RE.sub("", text, count=1)


PAGE_PREFIX = "<!subteam^"


@dataclass
class Plan:
    """One launch as the soak planned it."""

    index: int
    tag: str
    framework: str  # nemo | nemo-rl
    workload: str
    model: str
    cluster: str
    nodes: int
    fault: str  # none oom nccl hang gated wandb tokenizer
    cancel_after_s: float | None = None  # a random cancel, this long after the /train
    long_run: bool = False  # runs long enough for a node failure to be declared under it
    launch_id: str = ""
    sent_at: float = 0.0
    cancel_presses: list[float] = field(default_factory=list)

    @property
    def text(self) -> str:
        words = [self.workload, self.model, f"nodes={self.nodes}", f"cluster={self.cluster}"]
        words.append(f"name={self.tag}")
        if self.workload == "sft":
            words.append(f"framework={self.framework}")
        return " ".join(words)


@dataclass
class View:
    """Everything known about one launch at the end of the soak."""

    plan: Plan
    parent_texts: list[str]  # the parent as posted, then each chat.update, in order
    thread: list[str]  # thread messages, in the order the stand-in received them
    pages: list[str]  # on-call posts that name this launch
    jobs: list[JobRow]  # sacct -X: each job's newest incarnation
    incarnations: list[JobRow]  # sacct -D: every incarnation (NODE_FAIL before a requeue)

    @property
    def launch_id(self) -> str:
        return self.plan.launch_id

    @property
    def final_word(self) -> str:
        for text in reversed(self.parent_texts):
            if match := PARENT_WORD_RE.match(text):
                return match.group(1)
        return ""

    @property
    def final(self) -> bool:
        word = self.final_word
        return bool(word) and word not in ACTIVE_WORDS

    @property
    def last_job(self) -> JobRow | None:
        return max(self.jobs, key=lambda j: int(j.job_id)) if self.jobs else None

    @property
    def cancelled_at(self) -> float | None:
        """When the soak's last Cancel press was sent (the one that took)."""
        return self.plan.cancel_presses[-1] if self.plan.cancel_presses else None


def final_thread_message(thread: list[str]) -> str:
    for text in reversed(thread):
        if FINAL_RE.match(text):
            return text
    return ""


@dataclass
class Parsed:
    submitted: list[tuple[str, int, int]] = field(default_factory=list)  # job, attempt, index
    appeared: list[str] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    finals: list[int] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


def parse_thread(thread: list[str]) -> Parsed:
    parsed = Parsed()
    for index, text in enumerate(thread):
        if match := SUBMITTED_RE.match(text):
            attempt = int(match.group(2) or 1)
            parsed.submitted.append((match.group(1), attempt, index))
        elif match := APPEARED_RE.match(text):
            parsed.appeared.append(match.group(1))
        elif text.startswith("Running"):
            parsed.running.append(index)
        elif match := CHECKPOINT_RE.match(text):
            parsed.checkpoints.append(match.group(1))
        elif FINAL_RE.match(text):
            parsed.finals.append(index)
        elif match := FAILED_RE.match(text):
            parsed.failed.append((match.group(1), match.group(2)))
    return parsed
