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
the step number here counts across epochs.
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
RL_TIME_RE = re.compile(r"^\s*• Total step time: (?P<time>[0-9.]+)s\s*$")
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


@dataclass(frozen=True)
class Point:
    """One training step seen in the log. ``step`` counts from 1 up to ``total``."""

    step: int
    total: int
    loss: float | None = None
    step_time_s: float | None = None
    base: int = 0  # NeMo-RL: the steps of the epochs before this one (``step`` - the printed k)
    val_loss: float | None = None  # NeMo: the val_loss the line carried (the last validation's)


@dataclass(frozen=True)
class Progress:
    points: tuple[Point, ...] = ()
    finished: bool = False
    validation: tuple[tuple[int, float], ...] = ()  # (step, validation loss), when reported

    @property
    def last(self) -> Point | None:
        return self.points[-1] if self.points else None


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
    return Progress(tuple(points), finished, tuple(validation))


def _rl_step(k: int, per_epoch: int, epoch: tuple[int, int] | None, prev: Point | None) -> Point:
    """Step ``k``/``per_epoch`` as printed, numbered across epochs: from the epoch header
    when one came before it, else following the step before it (k restarts each epoch)."""
    if epoch is not None:
        base, total = (epoch[0] - 1) * per_epoch, epoch[1] * per_epoch
    elif prev is not None:
        base = prev.base if k > prev.step - prev.base else prev.step + 1 - k
        total = max(base + per_epoch, prev.total)
    else:
        base, total = 0, per_epoch
    return Point(step=base + k, total=max(total, base + k), base=base)


def parse_nemo_rl(text: str, carry: Point | None = None) -> Progress:
    """NeMo-RL prints the step header first and the loss after it: pair them up.

    ``carry`` is the step seen last time: a chunk may start with the loss of a
    step whose header came in the chunk before."""
    points: list[Point] = []
    validation: list[tuple[int, float]] = []
    current: Point | None = carry
    epoch: tuple[int, int] | None = None
    for line in text.splitlines():
        if current is not None and (val := RL_VAL_RE.match(line)):
            if (value := _float(val["loss"])) is not None:
                validation.append((current.step, value))
        elif match := RL_EPOCH_RE.match(line):
            epoch = (int(match["epoch"]), int(match["epochs"]))
        elif match := RL_STEP_RE.match(line):
            if current is not None and current != carry:
                points.append(current)
            current = _rl_step(int(match["step"]), int(match["total"]), epoch, current)
            epoch = None  # the next step follows this one, until the next header
        elif current is not None and (match := RL_LOSS_RE.match(line)):
            current = replace(current, loss=_float(match["loss"]))
        elif current is not None and (match := RL_TIME_RE.match(line)):
            current = replace(current, step_time_s=_float(match["time"]))
    if current is not None and current != carry:
        points.append(current)
    finished = bool(points) and points[-1].step >= points[-1].total and points[-1].loss is not None
    return Progress(tuple(points), finished, tuple(validation))


def run_links(text: str) -> list[str]:
    """Experiment-tracker links in log text (W&B run pages), in order, once each."""
    return list(dict.fromkeys(m["url"] for m in WANDB_RUN_RE.finditer(text)))


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
