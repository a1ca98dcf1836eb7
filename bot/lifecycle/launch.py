"""A launch: one /train from queue to its final state, with every attempt.

The record is what Redis keeps (as JSON, :meth:`Launch.to_record`) and what restarts
pick up again.
"""

from __future__ import annotations

import secrets
import time
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_json

from cluster.launching.run_record import RunRecord
from cluster.watching.tracking import Tracking
from commands.requests import InteractiveRequest, TrainRequest


class Phase(StrEnum):
    """Where a launch is. Slurm's own words for a job live in ``Attempt.slurm_state``."""

    AWAITING_APPROVAL = "awaiting_approval"  # above the policy's node threshold
    QUEUED = "queued"
    PREFLIGHT = "preflight"
    SUBMITTING = "submitting"  # sbatch may have run: look the launch id up before retrying
    SUBMITTED = "submitted"  # Slurm has it (PENDING)
    RUNNING = "running"
    RETRYING = "retrying"
    DONE = "done"  # terminal: see ``outcome``
    REJECTED = "rejected"  # pre-flight or submission refused; nothing ran
    DRY_RUN = "dry_run"


ACTIVE_PHASES = frozenset(
    {
        Phase.AWAITING_APPROVAL,
        Phase.QUEUED,
        Phase.PREFLIGHT,
        Phase.SUBMITTING,
        Phase.SUBMITTED,
        Phase.RUNNING,
        Phase.RETRYING,
    }
)
TRACKED_PHASES = frozenset({Phase.SUBMITTED, Phase.RUNNING})


LAUNCH_ID_HEX = 10  # 40 random bits: L-7f3a9c2b41, short enough to type


def new_launch_id() -> str:
    """A fresh launch id. With 40 random bits two of 100,000 launches share an id with
    odds of about 1 in 200; :meth:`bot.store.launches.Launches.create` checks every new id against
    the stored launches and history and draws again when one is taken. Ids of earlier
    versions (``L-`` and 6 hex digits) keep resolving: 4 to 12 hex digits are accepted."""
    return "L-" + secrets.token_hex(LAUNCH_ID_HEX // 2)


class Terms(BaseModel):
    """Who a launch runs as on a cluster and on what terms, derived from the config for
    its owner there: the Unix user ("": the shared account), the Slurm account ("": the
    cluster's) and whether a custom image gets the job secrets."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    cluster_user: str = ""
    slurm_account: str = ""
    image_secrets: bool = False


class Attempt(BaseModel):
    """One Slurm job of a launch. A retry is a new attempt (a new job)."""

    model_config = ConfigDict(extra="ignore")

    number: int
    job_id: str = ""
    reason: str = ""  # why this attempt was made (empty for the first)
    submitted_at: float = 0.0
    started_at: float = 0.0
    ended_at: float = 0.0
    slurm_state: str = ""
    exit_code: str = ""
    node_list: str = ""
    restarts: int = 0
    tracking: Tracking | None = None  # where the job's files are: the framework's record
    attach_ready: bool = False
    checkpoints_at_start: int = 0
    exclude: str = ""  # node(s) this attempt keeps away from
    seed_tokenizer: bool = False  # seed the GPT-2 tokenizer cache before submitting
    resume: bool = False
    not_before: float = 0.0  # retry backoff: not submitted before this time
    held: bool = False  # a Retry waiting for the old job to be cancelled: not to submit yet
    held_at: float = 0.0  # when the Retry held it (a worker waits for the old job from then)
    from_step: int = 0  # the training step when this attempt was decided (a retry's mark)
    cause_key: str = ""  # why it failed (cluster.watching.diagnosis key)
    hang_reported: bool = False
    cluster: str = ""  # the cluster its job is (or is to be) on when not the launch's (reroute)
    terms: Terms | None = None  # a reroute: who the launch runs as on that cluster, derived there
    log_grew_at: float = 0.0  # when its log last grew (any output counts against a hang)
    log_size: int = 0  # how far into the log any read reached when it last grew
    tail: str = ""  # the last lines of the main log, for the failure message
    pending_reason: str = ""  # squeue's reason while the job waits (said when it changes)
    gpu_hours: float | None = None  # what Slurm's accounting says the job used (None: not read)
    record: RunRecord | None = None  # what its submit ran: command, env names, checkout, image

    def close(self, now: float) -> None:
        """The attempt's job was cancelled for a retry and is gone: it ran until ``now`` at
        the latest, not until the launch ends."""
        self.ended_at = self.ended_at or now
        self.slurm_state = self.slurm_state or "CANCELLED"


class LaunchProgress(BaseModel):
    model_config = ConfigDict(extra="ignore")

    step: int = 0
    total: int = 0
    loss: float | None = None
    step_time_s: float | None = None
    base: int = 0  # NeMo-RL: the steps of earlier epochs (its step counter restarts each epoch)
    reward: float | None = None  # RL: the last step's mean reward
    accuracy: float | None = None  # RL: the last validation's accuracy
    log_interval: int = 1  # steps between two printed progress points
    max_steps: int = 0  # NeMo-RL: max_num_steps as the run's config says (0: not known)
    finished: bool = False  # the run said it reached its last step (NeMo's max_steps line)
    stopped_early: str = ""  # why the run said it stops early ("its time budget"), this attempt
    recent_step_times_s: list[float] = Field(default_factory=list)  # the last few, for the median

    @property
    def median_step_time_s(self) -> float | None:
        times = sorted(self.recent_step_times_s)
        return times[len(times) // 2] if times else self.step_time_s

    updated_at: float = 0.0


class Health(BaseModel):
    """What trainbot said about a run's health (bot/lifecycle/health.py): each episode once, kept on
    the record so a restarted bot does not say it again."""

    model_config = ConfigDict(extra="ignore")

    nan_step: int | None = None  # the first step whose loss was NaN or inf (said)
    spike_step: int | None = None  # the open loss-spike episode (said; ends when loss is back)
    val_rising_step: int | None = None  # the open "validation loss rising" episode (said)
    slow_run: int = 0  # steps in a row above the slow threshold
    slow_from: int = 0  # the first of them
    slow_since: int | None = None  # the open slow-step episode (said; ends on recovery)
    usual_step_times_s: list[float] = Field(default_factory=list)  # the baseline: not slow ones
    gpu_util_pct: float | None = None  # the last GPU sample: mean utilisation over the job's GPUs
    gpu_mem_used_mib: float = 0.0
    gpu_mem_total_mib: float = 0.0
    gpu_sampled_at: float = 0.0
    gpu_idle_since: float | None = None  # the first sample of the current idle stretch
    gpu_idle_said: bool = False  # the idle warning of that stretch was said
    reward_collapse_step: int | None = None  # the open "reward collapsed" episode (said)
    reward_best: float | None = None  # the best median reward over reward_window steps so far
    reward_flat_step: int | None = None  # the open "reward went flat" episode (said)


class Launch(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(default_factory=new_launch_id)
    request: TrainRequest | InteractiveRequest = Field(discriminator="kind")
    user_id: str
    user_name: str = ""
    channel: str
    parent_ts: str = ""
    phase: Phase = Phase.QUEUED
    outcome: str = ""  # Slurm's final word (COMPLETED, FAILED, ...) or why it was rejected
    detail: str = ""  # the outcome's sentence (mrkdwn) of a record written before `ending`
    # How it ended, as facts (``move`` and what its words need): bot.wording.endings says it
    ending: dict[str, Any] = Field(default_factory=dict)
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    attempts: list[Attempt] = Field(default_factory=list)
    progress: LaunchProgress = Field(default_factory=LaunchProgress)
    checkpoints: list[str] = Field(default_factory=list)
    checkpoint_bytes: dict[str, int] = Field(default_factory=dict)  # name -> size when saved
    progress_history: list[tuple[int, float]] = Field(default_factory=list)  # (step, loss)
    validation_history: list[tuple[int, float]] = Field(default_factory=list)  # (step, loss)
    reward_history: list[tuple[int, float]] = Field(default_factory=list)  # (step, mean reward)
    accuracy_history: list[tuple[int, float]] = Field(default_factory=list)  # (step, val acc.)
    resumes: int = 0  # attempts made to go on after the run stopped early on its own
    run_links: list[str] = Field(default_factory=list)  # experiment-tracker pages (W&B)
    wandb_summary: dict[str, float] = Field(default_factory=dict)  # read back at the end
    wandb_read: bool = False  # the read-back was tried (once per launch)
    after_then: str = ""  # Export / Evaluate buttons: what was asked ("": the request's then=)
    after_step: int | None = None  # /checkpoints' Export of one: its step (None: the newest)
    after_job: str = ""  # then=: the Slurm job that exports (and evaluates), once submitted
    after_state: str = ""  # then=: how it ended (Slurm's word, or why it was not run)
    exported_to: str = ""  # then=: the Hugging Face directory its export wrote
    eval_results: dict[str, float] = Field(default_factory=dict)  # then=eval: "task/metric"
    tensorboard_dirs: list[str] = Field(default_factory=list)  # said in the thread, once each
    open_alerts: list[str] = Field(default_factory=list)  # on-call dedup keys not yet resolved
    slurm_account: str = ""  # policy.accounts: the --account for this person ("": the cluster's)
    cluster_user: str = ""  # the Unix user the launch runs as ("": the shared login account)
    image_secrets: bool = False  # a custom image= gets the job secrets only when policy says so
    parent_rendered_at: float = 0.0
    permalink: str = ""  # the parent message's link, once known (App Home, /jobs history)
    gpu_hours: float = 0.0  # what the finished launch used (Slurm's accounting, once charged)
    waits_for: str = ""  # after=: the launch this one starts after (bot.planning.pipelines)
    sweep: str = ""  # the sweep this launch is a member of (bot.lifecycle.sweeps), if any
    placed: str = ""  # cluster=auto: the cluster chosen and Slurm's start estimates then
    starts_from: str = ""  # from=: the launch whose newest checkpoint this one starts from
    start_key: str = ""  # from=: the recipe key and checkpoint path, noted before its first job
    start_path: str = ""
    rerouted: bool = (
        False  # policy.placement.reroute_after_s moved it (once at most), or refused to
    )
    approved_by: str = ""  # who approved it (a Slack user id): admitted again when it goes
    tz: str = ""  # the owner's time zone when it was made: at= is shown back in it
    # The owner's policy groups then: the budget of a launch that waited, a reroute's policy
    groups: list[str] = Field(default_factory=list)
    charged: bool = False  # its GPU-hours were charged to its owner's budget (once, from sacct)
    estimate_gpu_hours: float | None = None  # the estimate at /train: held against the budget
    submit_started_at: float = 0.0  # a submit ran and Slurm has not yet said what came of it
    preflight_said: int = -1  # len(attempts) when "Pre-flight ok" was posted: said once per attempt
    fence: int = 0  # raised by each worker that takes the launch: an older holder's writes fail
    cancelled_by: str = ""  # who cancelled it (a Slack user id), written before any scancel:
    cancelled_at: float = 0.0  # from then on it ends CANCELLED and is never retried
    health: Health = Field(default_factory=Health)

    def to_record(self) -> str:
        """The JSON Redis keeps of the launch: every field at its default left out (reading
        fills it in again, docs/upgrade.md), except the request's ``kind``, which says what
        the request is. Most fields stay at their defaults for most of a launch's life: a
        tracked launch's record is about a third of its JSON written out in full."""
        data = self.model_dump(mode="json", exclude_defaults=True)
        data["request"]["kind"] = self.request.kind
        return to_json(data, inf_nan_mode="null").decode()

    @property
    def cluster(self) -> str:
        return self.request.cluster

    @property
    def attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def job_id(self) -> str:
        return self.attempts[-1].job_id if self.attempts else ""

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE_PHASES

    @property
    def interactive(self) -> bool:
        return isinstance(self.request, InteractiveRequest)

    @property
    def words(self) -> str:
        """``sft llama3p1_8b``: the title as plain words, for sentences."""
        return self.title.replace(" · ", " ")

    @property
    def recipe_key(self) -> str:
        """``sft:llama3p1_8b:nemo``: which recipe ran ("" for interactive allocations)."""
        return recipe_key(self.request)

    @property
    def title(self) -> str:
        """``sft · llama3p1_8b`` or ``interactive``."""
        req = self.request
        if isinstance(req, TrainRequest):
            return f"{req.workload} · {req.model}"
        return "interactive"


def recipe_key(request: TrainRequest | InteractiveRequest) -> str:
    """The recipe a request runs, as ``workload:model:framework`` ("" when interactive)."""
    if isinstance(request, TrainRequest):
        return f"{request.workload}:{request.model}:{request.framework}"
    return ""


class StepRun(BaseModel):
    """An earlier run of a recipe at one size on one cluster: its median step time and its
    steps, for the GPU-hour estimate of the next one."""

    model_config = ConfigDict(extra="ignore")

    step_time_s: float
    steps: int = 0
    ended_at: float = 0.0


class HistoryEntry(BaseModel):
    """What ``/jobs history`` shows of a finished launch; kept after the launch record expires."""

    model_config = ConfigDict(extra="ignore")

    id: str
    user_id: str
    user_name: str = ""
    cluster: str
    title: str
    nodes: int = 1
    job_id: str = ""
    phase: str
    outcome: str = ""
    detail: str = ""  # (a record written before `ending`)
    ending: dict[str, Any] = Field(default_factory=dict)
    attempts: int = 0
    created_at: float
    ended_at: float
    run_s: float = 0.0  # summed over attempts: from start (or submit) to end
    gpu_hours: float = 0.0
    permalink: str = ""  # the launch's thread

    @classmethod
    def of(cls, launch: Launch) -> HistoryEntry:
        run_s = 0.0
        for attempt in launch.attempts:
            begun = attempt.started_at or attempt.submitted_at
            if begun and attempt.ended_at > begun:
                run_s += attempt.ended_at - begun
        return cls(
            id=launch.id,
            user_id=launch.user_id,
            user_name=launch.user_name,
            cluster=launch.cluster,
            title=launch.title,
            nodes=launch.request.nodes,
            job_id=launch.job_id,
            phase=str(launch.phase),
            outcome=launch.outcome,
            detail=launch.detail[:300],
            ending=launch.ending,
            attempts=len(launch.attempts),
            created_at=launch.created_at,
            ended_at=launch.updated_at,
            run_s=run_s,
            gpu_hours=launch.gpu_hours,
            permalink=launch.permalink,
        )


SWEEP_ID_HEX = 16  # 64 random bits: a sweep id is not guessed, nor drawn twice


def new_sweep_id() -> str:
    """A fresh sweep id (``S-`` and 16 hex digits). Ids of earlier versions (``S-`` and 6
    hex digits) keep resolving: 4 to 16 hex digits are accepted."""
    return "S-" + secrets.token_hex(SWEEP_ID_HEX // 2)


class Sweep(BaseModel):
    """The record of one sweep."""

    id: str = Field(default_factory=new_sweep_id)
    user_id: str
    channel: str
    title: str  # sft · llama3p1_8b
    text: str  # the /train line, canonical
    where: str  # 2 nodes × a4
    keys: list[str]  # the keys that vary, in product order
    members: list[str] = Field(default_factory=list)  # launch ids, in product order
    values: list[list[str]] = Field(default_factory=list)  # each member's values of ``keys``
    estimate_gpu_hours: float | None = None
    parent_ts: str = ""
    created_at: float = Field(default_factory=time.time)

    def label(self, index: int) -> str:
        """``lr=3e-5, max_steps=100``: a member by the values that differ."""
        return ", ".join(
            f"{short_key(key)}={value}"
            for key, value in zip(self.keys, self.values[index], strict=True)
        )


def short_key(key: str) -> str:
    """``optim.config.lr`` -> ``lr``: the last part of a dotted key."""
    return key.rsplit(".", 1)[-1]
