"""What Megatron's training loop prints, read. Pure.

Two loops print the same shapes: Megatron-LM's ``megatron.training`` (NVIDIA/Megatron-LM
d98e8a64ddf34856e74b24714e3bedb2f5a39553, ``training.py`` ``training_log``,
``evaluate_and_print_results``, ``print_datetime``; ``checkpointing.py``) and
Megatron-Bridge's own (NVIDIA-NeMo/Megatron-Bridge 067f987df03b8355b03192d88d70f1709fedf51a,
``training/utils/train_utils.py`` ``training_log``, ``training/eval.py``,
``training/train.py``, ``training/checkpointing.py``), as released in ``megatron-core``
0.19.2 and ``megatron-bridge`` 0.6.2 (checked against both). The last rank prints, every
``logger.log_interval`` iterations (10 in the recipes)::

   [2026-03-02 10:15:02] iteration       10/     100 | consumed samples:          640 |
  elapsed time per iteration (ms): 1234.5 | ... | learning rate: 1.500000E-04 |
  global batch size:    64 | lm loss: 9.876543E+00 | loss scale: 1.0 | grad norm: 3.214 |
  number of skipped iterations:   0 | number of nan iterations:   0 |

(one line; Megatron-LM stamps ``%Y-%m-%d %H:%M:%S.%f``, Megatron-Bridge drops the
microseconds). A loss whose average is NaN is left off the line (``if avg >= 0.0``), so
a NaN shows as ``number of nan iterations`` above 0. The NaN check itself
(``megatron/core/rerun_state_machine.py``) raises, when re-runs are off (Megatron-Bridge's
default, ``rerun_mode: disabled``)::

  RuntimeError: Rank 0, node dev1, device 0, iteration 7: Unexpected result nan
  (message='found NaN in local forward loss calculation')

and, when they are on (Megatron-LM's default, ``validate_results``), logs ``Unexpected
result nan on rank 0 at iteration #7 invocation #1 (message='...')``, re-runs the step,
says the re-run's verdict (``Rank 0, node dev1, device 0, iteration #7: First rerun:
unexpected result is reproducible within the tolerance (nan = nan). Need to rerun on a
different GPU to verify correctness.!``), saves and exits with code 16
(``EXIT_CODE_RESUME_TO_DISAMBIGUATE``) or 17 (not reproducible: a transient fault). As
captured from megatron.training (megatron-core 0.19.2 on an H100,
``tests/cluster/data/megatron/captured/``) its records carry logging's default prefix
(``ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 0 at iteration
#13 ...``), the step is the one being computed (13 for a NaN after 12 complete ones) and
the save before exit 16 is of iteration 11; resumed on the same GPU it says ``Got
rescheduled on the same GPU. ...`` and ``Exiting now. Please resume the job from the same
checkpoint ...`` and exits 16 again, before any iteration line. Its WARNINGs (``Saving a
checkpoint and exiting now ...``) are dropped by Megatron-Bridge unless
``logger.filter_warnings`` is off.

megatron.training also prints the first iteration of a run (1, or 16 after a resume from
15) whatever the interval, stamps ``saving checkpoint ...`` too, and once training is
done evaluates again at the last iteration ``on validation set`` and ``on test set``: the
test set's loss is not read as validation.
``exit_duration_in_mins``, ``exit_interval`` and SIGTERM end the run early on purpose
(exit 0, Slurm: COMPLETED) after a save: ``[exiting program after 1.5 minutes] datetime:
...``, ``[exiting program at iteration 40] datetime: ...``, ``[exiting program after
receiving SIGTERM.] datetime: ...``.

Checkpoints: rank 0 prints ``saving checkpoint at iteration      20 to <dir> in torch_dist
format`` and, once written, ``  successfully saved checkpoint from iteration      20 to
<dir> [ t 1/1, p 1/1 ]``; the directory is ``<save>/iter_0000020`` and the tracker
``<save>/latest_checkpointed_iteration.txt`` (Megatron-Bridge also writes
``latest_train_state.pt``) names the newest complete one: it is written last.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from cluster.watching.progress import Point, Progress, early_stop

ITERATION_RE = re.compile(
    r"^\s*\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\]"
    r" iteration\s+(?P<it>\d+)/\s*(?P<total>\d+) \|"
)
LM_LOSS_RE = re.compile(r"\| lm loss: (?P<loss>[-+]?(?:[0-9.]+(?:E[-+]?\d+)?|nan|inf)) \|", re.I)
MS_PER_ITER_RE = re.compile(r"\| elapsed time per iteration \(ms\): (?P<ms>[0-9.]+) \|")
NAN_ITERS_RE = re.compile(r"\| number of nan iterations:\s+(?P<n>\d+) \|")
SKIPPED_ITERS_RE = re.compile(r"\| number of skipped iterations:\s+(?P<n>\d+) \|")
TFLOPS_RE = re.compile(r"\| throughput per GPU \(TFLOP/s/GPU\): (?P<tflops>[0-9.]+) \|")
VALIDATION_RE = re.compile(
    r"^\s*validation loss at iteration (?P<it>\d+)(?P<where> on [a-z ]+ set)? \|.*?"
    r"\blm loss value: (?P<loss>[-+0-9.Eenaif]+) \|"
)
SAVED_RE = re.compile(
    r"successfully saved checkpoint from iteration\s+(?P<it>\d+) to (?P<dir>\S+)(?: \[|\s*$)"
)
# rerun_state_machine: "iteration 7: Unexpected result nan" (re-runs off, it raises) and
# "Unexpected result nan on rank 0 at iteration #7 invocation #1" (re-runs on).
NAN_CHECK_RE = re.compile(
    r"(?:iteration #?(?P<it1>\d+): Unexpected result (?P<r1>nan|inf|-inf)\b"
    r"|Unexpected result (?P<r2>nan|inf|-inf) on rank \d+ at iteration #(?P<it2>\d+))"
    r".*?\(message='(?P<message>[^']{1,200})'\)"
)
EXIT_RE = re.compile(
    r"^\s*\[exiting program (?P<why>after (?P<minutes>[0-9.]+) minutes"
    r"|at iteration (?P<it>\d+)|after receiving SIGTERM\.)\] datetime:"
)
# Its verdicts: the first re-run's (logger.error, always printed) and the exit's own words
# (WARNINGs, which Megatron-Bridge's default warning filter, logger.filter_warnings, drops).
RERUN_EXIT_RE = re.compile(
    r"(?P<text>Saving a checkpoint and exiting now\. Please resume the job from the checkpoint"
    r"(?: to rerun the last iteration and establish a diagnostic)?"
    r"|Exiting now\. (?:The job can be resumed from a previous checkpoint"
    r"|A checkpoint at the last iteration"
    r"|Please resume the job from the same checkpoint to rerun the last iteration"
    r" and establish a diagnostic|Please resume)"
    r"|First rerun: unexpected result is (?:not )?reproducible within the tolerance"
    r" \([^)]{1,80}\)(?:\. Need to rerun on a different GPU to verify correctness\.)?)"
)
# The checkpoint a run starts from: megatron.training's "  successfully loaded checkpoint
# from <dir> [ t 1/1, gtp_remat 1/1, p 1/1 ] at iteration 15" (Megatron-Bridge's names
# 0-based ranks, "[ t 0/1, p 0/1 ]").
LOADED_RE = re.compile(
    r"^\s*successfully loaded checkpoint from (?P<dir>\S+) \[[^\]]{1,120}\] at iteration"
    r" (?P<it>\d+)\s*$"
)
# What the re-run state machine's exit codes mean (megatron/core/rerun_state_machine.py,
# EXIT_CODE_RESUME_TO_DISAMBIGUATE and EXIT_CODE_FAILED_ON_RESULT_VALIDATION).
RERUN_EXIT_CODES = {
    16: "the NaN was reproducible on this GPU: resume from the checkpoint it saved, on"
    " another GPU, to tell a fault of this GPU from one of the model or data",
    17: "the NaN did not come back when the step was re-run: a transient fault; resume"
    " from the last checkpoint",
}
# The configuration printed at start: Megatron-Bridge's YAML ("  log_interval: 10") or
# Megatron-LM's argument list ("  log_interval .......... 10").
LOG_INTERVAL_RE = re.compile(r"^\s*log_interval\s*(?::|=|\.{2,})\s*(?P<n>\d+)\s*$")


@dataclass(frozen=True)
class StopEarly:
    """The run ended on purpose before its total (it saved first): why, and at which step."""

    reason: str  # "time budget" | "exit interval" | "SIGTERM"
    step: int | None
    line: str


@dataclass(frozen=True)
class NanCheck:
    """Megatron's NaN check fired: the step, the value and its own message."""

    step: int
    value: str  # nan | inf | -inf
    message: str  # "found NaN in local forward loss calculation"
    line: str


@dataclass(frozen=True)
class MegatronFacts:
    """What the log says beside progress, for the hang rule and the run's ending."""

    log_interval: int | None = None  # iterations between two progress lines
    stop_early: StopEarly | None = None
    nan: NanCheck | None = None
    rerun_exit: str = ""  # the re-run state machine's last verdict or exit words (code 16/17)
    saved: tuple[tuple[int, str], ...] = ()  # (iteration, save dir), as announced
    tflops_per_gpu: float | None = None
    skipped_iterations: int = 0
    loaded: tuple[int, str] | None = None  # (iteration, load dir) the run started from


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _stop_early(match: re.Match[str], line: str, last: int | None) -> StopEarly:
    """An ``exiting program`` line: its reason, and the step (the interval's own, else the
    last iteration printed)."""
    if match["minutes"] is not None:
        return StopEarly(reason="time budget", step=last, line=line.strip())
    if match["it"] is not None:
        return StopEarly(reason="exit interval", step=int(match["it"]), line=line.strip())
    return StopEarly(reason="SIGTERM", step=last, line=line.strip())


def parse_megatron(text: str, carry: Point | None = None) -> Progress:
    """Progress in new log text: one point per iteration line (the step is the
    iteration: Megatron counts completed iterations), the NaN check's step as a NaN point,
    and the validation losses. ``finished``: the last iteration reached the total."""
    points: list[Point] = []
    validation: list[tuple[int, float]] = []
    total = carry.total if carry else 0
    for line in text.splitlines():
        if match := ITERATION_RE.search(line):
            total = int(match["total"])
            loss_m, ms_m, nan_m = LM_LOSS_RE.search(line), MS_PER_ITER_RE.search(line), None
            loss = _float(loss_m["loss"]) if loss_m else None
            nan_m = NAN_ITERS_RE.search(line)
            if loss is None and nan_m is not None and int(nan_m["n"]) > 0:
                loss = math.nan  # the average was NaN, so the line leaves the loss off
            ms = _float(ms_m["ms"]) if ms_m else None
            points.append(
                Point(
                    step=int(match["it"]),
                    total=total,
                    loss=loss,
                    step_time_s=ms / 1000 if ms is not None else None,
                )
            )
        elif match := VALIDATION_RE.search(line):
            # megatron.training evaluates again once training is done, "on validation set"
            # and "on test set", at the last iteration: the test set's loss is no
            # validation, and an iteration already validated in the loop keeps its value.
            step, value = int(match["it"]), _float(match["loss"])
            if value is None or match["where"] == " on test set":
                continue
            if not any(seen == step for seen, _ in validation):
                validation.append((step, value))
        elif (match := NAN_CHECK_RE.search(line)) and total:
            step = int(match["it1"] or match["it2"])
            if not any(
                p.step == step and p.loss is not None and math.isnan(p.loss) for p in points
            ):
                points.append(Point(step=step, total=total, loss=float(match["r1"] or match["r2"])))
    finished = bool(points) and points[-1].step >= points[-1].total
    interval = next(
        (int(m["n"]) for line in text.splitlines() if (m := LOG_INTERVAL_RE.match(line))), 0
    )
    return Progress(
        tuple(points),
        finished,
        tuple(validation),
        stopped_early=early_stop(text),  # exit_duration_in_mins / exit_interval: on purpose
        log_interval=interval,  # the recipe's printed log_interval, when the log has it
    )


def _interval_from(iterations: list[int]) -> int | None:
    """The log interval read off the iterations printed: megatron.training prints the
    first iteration of a run (1, or 16 after a resume from 15) whatever the interval, the
    others are its multiples."""
    if len(iterations) >= 3:
        return math.gcd(*iterations[1:]) or None
    if len(iterations) == 2 and iterations[1] > iterations[0]:
        return iterations[1] - iterations[0]
    return None


def megatron_facts(text: str) -> MegatronFacts:
    """The facts beside progress in new log text: the log interval (from the recipe's
    printed config, else from two progress lines in a row), an early exit, the NaN check,
    the re-run machine's exit, checkpoints announced, throughput."""
    interval: int | None = None
    iterations: list[int] = []
    stop: StopEarly | None = None
    nan: NanCheck | None = None
    rerun, tflops, skipped = "", None, 0
    saved: list[tuple[int, str]] = []
    loaded: tuple[int, str] | None = None
    for line in text.splitlines():
        if match := ITERATION_RE.search(line):
            iterations.append(int(match["it"]))
            if (t := TFLOPS_RE.search(line)) is not None:
                tflops = _float(t["tflops"])
            if (s := SKIPPED_ITERS_RE.search(line)) is not None:
                skipped += int(s["n"])
        elif match := LOG_INTERVAL_RE.match(line):
            interval = int(match["n"]) or None
        elif match := EXIT_RE.search(line):
            stop = _stop_early(match, line, iterations[-1] if iterations else None)
        elif (match := NAN_CHECK_RE.search(line)) and nan is None:
            nan = NanCheck(
                step=int(match["it1"] or match["it2"]),
                value=match["r1"] or match["r2"],
                message=match["message"],
                line=line.strip(),
            )
        elif match := RERUN_EXIT_RE.search(line):
            rerun = match["text"]
        elif match := SAVED_RE.search(line):
            saved.append((int(match["it"]), match["dir"]))
        elif match := LOADED_RE.match(line):
            loaded = (int(match["it"]), match["dir"])
    if interval is None:
        interval = _interval_from(iterations)
    return MegatronFacts(
        log_interval=interval,
        stop_early=stop,
        nan=nan,
        rerun_exit=rerun,
        saved=tuple(saved),
        tflops_per_gpu=tflops,
        skipped_iterations=skipped,
        loaded=loaded,
    )
