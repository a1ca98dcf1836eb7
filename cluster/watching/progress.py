"""Training progress from NeMo and NeMo-RL log text. Pure.

NeMo 2.0 (rank 0; NVIDIA/NeMo 8cfedd7203462cb251a914e700e5605444277561,
nemo/lightning/pytorch/callbacks/progress_printer.py):
  Training epoch 0, iteration 120/149 | lr: 3e-05 | ... | global_step: 120 |
  reduced_train_loss: 1.233 | train_step_timing in s: 0.03146 | val_loss: 1.301
  Validation: iteration 1/4
  `Trainer.fit` stopped: `max_steps=100` reached.
Every metric logged for the progress bar rides on each later line, so ``val_loss``
appears on every training line after the first validation: a validation point is
one that follows a ``Validation: iteration`` block (or a changed value), not each
line that carries it. nemo/lightning/nemo_logger.py logs
"Experiments will be logged at <log dir>/<name>[/<version>]" (name "default" unless
the recipe names it); its ModelCheckpoint saves to "<that>/checkpoints".
NeMo-RL (NVIDIA-NeMo/RL 7ea279abfbeb698b092856d0dab61e7cf39bc909,
nemo_rl/algorithms/{sft,dpo,rm,grpo}.py):
  ========================= Epoch 1/2 =========================
  ========================= Step 3/100 =========================
  📊 Training Results:
    • Loss: 0.6931          (SFT, GRPO; DPO and RM print each metric by its
    • loss: 0.6931           field name, lower case: loss, sft_loss, accuracy, ...)
  ⏱️  Timing:
    • Total step time: 1.23s
The step counter restarts at 1 every epoch (``Step {k}/{min(len(loader), max_steps)}``):
the step number here counts across epochs. GRPO adds ``  • Avg Reward: <x>`` to its
training results, and its validation prints (grpo.py, ``validate``)::

  📊 Validation Results:
      • Accuracy: 0.4800
      • Average response length: 512.3 tokens

A run can stop early on purpose and exit 0 (Slurm: COMPLETED); the line it prints says
why (:func:`early_stop`): NeMo-RL's ``checkpointing.checkpoint_must_save_by`` saves, then
prints "Timeout has been reached, stopping training early" (sft.py, dpo.py, grpo.py,
rm.py: the ``TimeoutChecker`` of nemo_rl/utils/timer.py); Megatron's training loop
(megatron/training/training.py, ``train``) prints "[exiting program after <m> minutes]"
for ``exit_duration_in_mins`` and "[exiting program at iteration <n>]" for
``exit_interval``; Lightning's ``Timer`` callback (``max_time``) logs "Time limit reached.
Elapsed time is <t>. Signaling Trainer to stop." Only the step against the total tells a
finished run: NeMo-RL's normal end also says "stopping training early" (Max number of
steps has been reached).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

NEMO_STEP_RE = re.compile(r"Training epoch \d+, iteration (?P<it>\d+)/(?P<last>\d+)\b")
NEMO_LOSS_RE = re.compile(r"\breduced_train_loss: (?P<loss>[-+]?(?:nan|inf)|[-+0-9.eE]+)")
NEMO_TIME_RE = re.compile(r"\btrain_step_timing in s: (?P<time>[0-9.eE+-]+)")
NEMO_DONE_RE = re.compile(r"`Trainer\.fit` stopped: `max_steps=(\d+)` reached\.")
RL_STEP_RE = re.compile(r"^=+ Step (?P<step>\d+)/(?P<total>\d+) =+\s*$")
RL_EPOCH_RE = re.compile(r"^=+ Epoch (?P<epoch>\d+)/(?P<epochs>\d+) =+\s*$")
# "Loss" for SFT and GRPO, "loss" for DPO and RM (they print their metrics by field name).
RL_LOSS_RE = re.compile(r"^\s*• loss: (?P<loss>[-+0-9.eE]+|nan|inf)\s*$", re.IGNORECASE)
RL_TIME_RE = re.compile(r"^\s*• Total step time: (?P<time>[0-9.]+)s\s*$")  # group 1: seconds
# wandb prints "wandb: 🚀 View run at https://wandb.ai/<entity>/<project>/runs/<id>" (and
# "View run <name> at: <url>" in newer versions), whatever the framework.
WANDB_RUN_RE = re.compile(
    r"\bwandb: .*View run(?: \S+)? at:? (?P<url>https://[A-Za-z0-9.-]+(?::[0-9]+)?/[A-Za-z0-9._~/%-]+)"
)
# TensorBoard: NeMo 2 (a Lightning TensorBoardLogger; its recipes add one by default) warns
#   [NeMo W ... nemo_logger:...] "update_logger_directory" is True. Overwriting tensorboard
#   logger "save_dir" to <NeMo log dir>/tb_logs
# and writes events.out.tfevents.* under <that>/<experiment name>/<version>; NeMo-RL
# (logger.tensorboard_enabled=True) prints "Initialized TensorboardLogger at <dir>" (relative
# to where the job runs, e.g. logs/exp_001/tensorboard) and writes them in <dir>.
TENSORBOARD_RE = re.compile(
    r'(?:Overwriting tensorboard logger "save_dir" to|Initialized TensorboardLogger at) '
    r"(?P<dir>[^\s\x00-\x1f][^\x00-\x1f]{0,1023}?)\s*$"
)
NEMO_VAL_RE = re.compile(r"\bval_loss: (?P<loss>[-+0-9.eE]+)")
NEMO_VALIDATING_RE = re.compile(r"\bValidation: iteration \d+/")
NEMO_LOG_DIR_RE = re.compile(
    r"\bExperiments will be logged at (?P<dir>[^\s\x00-\x1f][^\x00-\x1f]{0,1023}?)\s*$"
)
RL_VAL_RE = re.compile(r"^\s*• (?:Validation loss|val_loss): (?P<loss>[-+0-9.eE]+)\s*$")
# The config NeMo-RL prints at start (examples/run_*.py: "Final config:" and a pprint of
# it, "'max_num_steps': 100"; the dev cluster's stand-in: "sft.max_num_steps=100"): the run
# stops there even mid-epoch, while each step header's total is per epoch.
RL_MAX_STEPS_RE = re.compile(r"""\bmax_num_steps['"]?\s*[:=]\s*(?P<steps>[0-9]+)""")
RL_MAX_REACHED_RE = re.compile(r"\bMax number of steps has been reached, stopping training early")
RL_REWARD_RE = re.compile(r"^\s*• Avg Reward: (?P<reward>[-+0-9.eE]+|nan|inf)\s*$")
RL_VAL_HEADER_RE = re.compile(r"Validation Results:\s*$")
RL_ACCURACY_RE = re.compile(r"^\s*• Accuracy: (?P<acc>[-+0-9.eE]+)\s*$")
# MLflow (NeMo-RL's logger.mlflow_enabled, Megatron-Bridge's MLflow logger) prints
# "🏃 View run <name> at: <tracking uri>/#/experiments/<id>/runs/<run id>" when a run starts
# (mlflow/tracking/_tracking_service/client.py, _log_url).
MLFLOW_RUN_RE = re.compile(
    r"View run \S+ at: (?P<url>https://[A-Za-z0-9.-]+(?::[0-9]+)?/[A-Za-z0-9._~/%#-]*"
    r"experiments/[0-9]+/runs/[0-9a-f]+)"
)
#: Lines that say a run stops early on purpose, and why (a few words for the thread).
EARLY_STOPS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bTimeout has been reached, stopping training early"), "its time budget"),
    (re.compile(r"\[exiting program after [0-9.]+ minutes\]"), "its time budget"),
    (re.compile(r"\bTime limit reached\. Elapsed time is .*Signaling Trainer to stop"),
     "its time budget"),
    (re.compile(r"\[exiting program at iteration [0-9]+\]"), "its exit interval"),
)  # fmt: skip
TIME_BUDGET = "its time budget"


@dataclass(frozen=True)
class Point:
    """One training step seen in the log. ``step`` counts from 1 up to ``total``."""

    step: int
    total: int
    loss: float | None = None
    step_time_s: float | None = None
    base: int = 0  # NeMo-RL: the steps of the epochs before this one (``step`` - the printed k)
    val_loss: float | None = None  # NeMo: the val_loss the line carried (the last validation's)
    reward: float | None = None  # RL: the step's mean reward (GRPO's "Avg Reward")
    cap: int = 0  # NeMo-RL: max_num_steps as its config says (0: not known); caps ``total``


@dataclass(frozen=True)
class Progress:
    points: tuple[Point, ...] = ()
    finished: bool = False
    validation: tuple[tuple[int, float], ...] = ()  # (step, validation loss), when reported
    accuracy: tuple[tuple[int, float], ...] = ()  # (step, validation accuracy): RL's validation
    stopped_early: str = ""  # why the run said it stops early (:data:`EARLY_STOPS`), if it did
    # Steps between two printed progress points (Megatron prints every ``log_interval``
    # iterations): a parser sets it when the log says so; 0 means "read it off the points".
    log_interval: int = 0

    @property
    def last(self) -> Point | None:
        return self.points[-1] if self.points else None

    @property
    def interval(self) -> int:
        """Steps between printed points: the parser's word, else the last two points' gap."""
        if self.log_interval > 0:
            return self.log_interval
        if len(self.points) >= 2:
            return max(1, self.points[-1].step - self.points[-2].step)
        return 0


def early_stop(text: str) -> str:
    """Why ``text`` says the run stops early on purpose ("its time budget"), or ""."""
    found = ""
    for line in text.splitlines():
        for pattern, why in EARLY_STOPS:
            if pattern.search(line):
                found = why
    return found


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def parse_nemo(text: str, carry: Point | None = None) -> Progress:
    """``carry`` is the last point seen before ``text`` (its ``val_loss``: the last
    validation recorded)."""
    points: list[Point] = []
    validation: list[tuple[int, float]] = []
    finished = False
    seen = carry.val_loss if carry else None
    validating = False
    for line in text.splitlines():
        if NEMO_VALIDATING_RE.search(line):
            validating = True
            continue
        val = NEMO_VAL_RE.search(line)
        value = _float(val["loss"]) if val is not None else None
        if value is not None and (validating or value != seen):
            last = points[-1] if points else carry
            validation.append((last.step if last else 0, value))
            validating = False
        seen = value if value is not None else seen
        match = NEMO_STEP_RE.search(line)
        if match:
            loss = NEMO_LOSS_RE.search(line)
            timing = NEMO_TIME_RE.search(line)
            points.append(
                Point(
                    step=int(match["it"]) + 1,
                    total=int(match["last"]) + 1,
                    loss=_float(loss["loss"]) if loss else None,
                    step_time_s=_float(timing["time"]) if timing else None,
                    val_loss=seen,
                )
            )
        elif NEMO_DONE_RE.search(line):
            finished = True
    return Progress(tuple(points), finished, tuple(validation), stopped_early=early_stop(text))


def _rl_step(
    k: int, per_epoch: int, epoch: tuple[int, int] | None, prev: Point | None, cap: int = 0
) -> Point:
    """Step ``k``/``per_epoch`` as printed, numbered across epochs: from the epoch header
    when one came before it, else following the step before it (k restarts each epoch).
    ``cap`` (max_num_steps, when known) bounds the total: the run stops there mid-epoch."""
    if epoch is not None:
        base, total = (epoch[0] - 1) * per_epoch, epoch[1] * per_epoch
    elif prev is not None:
        base = prev.base if k > prev.step - prev.base else prev.step + 1 - k
        total = max(base + per_epoch, prev.total)
    else:
        base, total = 0, per_epoch
    if cap:
        total = min(total, cap)
    return Point(step=base + k, total=max(total, base + k), base=base, cap=cap)


def _rl_cap(text: str, carry: Point | None) -> int:
    """max_num_steps from the config printed before the first step header (or carried)."""
    head = text.split("=" * 10 + " Step ", 1)[0] if carry is None or not carry.cap else ""
    found = RL_MAX_STEPS_RE.search(head)
    return int(found["steps"]) if found else (carry.cap if carry else 0)


def _rl_metric(current: Point, line: str) -> Point | None:
    """``current`` with the metric ``line`` gives it (loss, reward, step time), else None."""
    if match := RL_LOSS_RE.match(line):
        return replace(current, loss=_float(match["loss"]))
    if match := RL_REWARD_RE.match(line):
        return replace(current, reward=_float(match["reward"]))
    if match := RL_TIME_RE.match(line):
        return replace(current, step_time_s=_float(match["time"]))
    return None


def _rl_validation(line: str, validating: bool) -> tuple[bool, str, float | None] | None:
    """A line of a validation block: (inside the block after it, what it gives: "accuracy",
    "loss" or "", its value); None for any other line."""
    if RL_VAL_HEADER_RE.search(line):
        return True, "", None
    if validating and (acc := RL_ACCURACY_RE.match(line)):
        return False, "accuracy", _float(acc["acc"])
    if val := RL_VAL_RE.match(line):
        return validating, "loss", _float(val["loss"])
    return None


def parse_nemo_rl(text: str, carry: Point | None = None) -> Progress:
    """NeMo-RL prints the step header first and the loss after it: pair them up.

    ``carry`` is the step seen last time: a chunk may start with the loss of a
    step whose header came in the chunk before."""
    points: list[Point] = []
    validation: list[tuple[int, float]] = []
    accuracy: list[tuple[int, float]] = []
    current: Point | None = carry
    epoch: tuple[int, int] | None = None
    validating = False  # inside a "Validation Results" block (its Accuracy is validation's)
    cap = _rl_cap(text, carry)
    for line in text.splitlines():
        if (read := _rl_validation(line, validating)) is not None:
            validating, what, value = read
            if value is not None and current is not None:
                (accuracy if what == "accuracy" else validation).append((current.step, value))
        elif match := RL_EPOCH_RE.match(line):
            epoch = (int(match["epoch"]), int(match["epochs"]))
        elif match := RL_STEP_RE.match(line):
            if current is not None and current != carry:
                points.append(current)
            current = _rl_step(int(match["step"]), int(match["total"]), epoch, current, cap)
            epoch, validating = None, False  # the next step follows this one
        elif current is not None and (metric := _rl_metric(current, line)) is not None:
            current = metric
    if current is not None and current != carry:
        if RL_MAX_REACHED_RE.search(text):  # its own word that this step was the last
            current = replace(current, total=current.step)
        points.append(current)
    finished = bool(points) and points[-1].step >= points[-1].total and points[-1].loss is not None
    return Progress(
        tuple(points),
        finished,
        tuple(validation),
        accuracy=tuple(accuracy),
        stopped_early=early_stop(text),
        log_interval=1,  # NeMo-RL prints every step
    )


def run_links(text: str) -> list[str]:
    """Experiment-tracker links in log text (W&B and MLflow run pages), in order, once each."""
    found = [
        (m.start(), m["url"])
        for regex in (WANDB_RUN_RE, MLFLOW_RUN_RE)
        for m in regex.finditer(text)
    ]
    return list(dict.fromkeys(url for _, url in sorted(found)))


def tensorboard_dirs(text: str) -> list[str]:
    """The TensorBoard directories the log names (as printed), in order, once each."""
    found = (m["dir"] for line in text.splitlines() if (m := TENSORBOARD_RE.search(line)))
    return list(dict.fromkeys(d for d in found if d != "None"))


def complete_lines(data: str) -> tuple[str, int]:
    """The whole lines of ``data`` and how many bytes (UTF-8) they take: a line
    cut at the end of a chunk is read again, whole, next time."""
    whole = data[: data.rfind("\n") + 1]
    return whole, len(whole.encode("utf-8"))


def experiment_dirs(text: str) -> list[str]:
    """NeMo: the experiment directories the log names ("Experiments will be logged at"),
    in order, once each; checkpoints are saved in ``<it>/checkpoints``."""
    found = (m["dir"] for line in text.splitlines() if (m := NEMO_LOG_DIR_RE.search(line)))
    return list(dict.fromkeys(found))
