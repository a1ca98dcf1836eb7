#!/usr/bin/env python3
"""Stand-in for Megatron-Bridge's ``scripts/training/run_recipe.py`` on the dev cluster.

Every rank runs it (srun, one task per GPU); as Megatron, only the LAST rank prints
progress (``print_rank_last``) and, here, everything else too, so the log has one copy
of each line. Ranks are read from ``RANK``/``WORLD_SIZE`` (torchrun) or
``SLURM_PROCID``/``SLURM_NTASKS`` (srun). It trains nothing: it prints what the loop
prints, writes checkpoints in Megatron's layout and ends the way the loop ends.

Command line, as upstream's: ``--recipe <function name>`` (``--recipe=...``),
``--dataset``, ``--peft_scheme``, then Hydra-style ``key=value`` overrides; read here:
``train.train_iters``, ``train.exit_interval``, ``train.exit_duration_in_mins``,
``logger.log_interval``, ``logger.tensorboard_dir``, ``checkpoint.save``, ``checkpoint.load``,
``checkpoint.pretrained_checkpoint``, ``checkpoint.save_interval``,
``validation.eval_interval``, ``rerun_state_machine.rerun_mode``.

The container image comes as ``CONTAINER_IMAGE`` when srun has no pyxis (the dev
cluster): a registry reference is "imported" as pyxis says it does, a path must exist.

Knobs (``_devcluster/standin.py``: ~/devcluster-control/*.env, DEVCLUSTER_<KEY>):
  steps, step_time_s, ckpt_every, save_time_s, startup_s, fault, fault_at_step, fault_once,
  val_every, nan_at, teardown_s (as the other stand-ins), and
  nan_mode       raise (Megatron-Bridge's default: re-runs off, RuntimeError) or
                 validate_results (Megatron-LM's default: re-run, save, exit 16);
                 rerun_state_machine.rerun_mode=... on the command line sets it too
  nan_once       1: with validate_results, the re-run in place gives a finite loss (a
                 transient fault): no save, exit 17
  exit_at        stop early at this iteration (as train.exit_interval)
  exit_after_s   stop early after this many seconds (as train.exit_duration_in_mins)
  exit_minute_s  how many seconds one minute of train.exit_duration_in_mins lasts here
                 (default 60), so a test of the time budget need not wait minutes
  sigterm        1: a SIGTERM saves and exits 0 (train.exit_signal_handler=True)
  dialect        bridge (default) or megatron-lm (microseconds in the time stamps)
  log_interval   default logger.log_interval (10 in the recipes; default here 5)
  log_throughput 1: the iteration line has "throughput per GPU" (logger.log_throughput,
                 off in the recipes; Megatron-Bridge prints "Step Time : ..." either way)

Format strings are upstream's: NVIDIA-NeMo/Megatron-Bridge
067f987df03b8355b03192d88d70f1709fedf51a (training/utils/train_utils.py training_log,
training/eval.py, training/train.py checkpoint_and_decide_exit, training/checkpointing.py)
and NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553 (megatron/training/
training.py, checkpointing.py, log_handler.py, megatron/core/rerun_state_machine.py), checked
against the released megatron-bridge 0.6.2 and megatron-core 0.19.2, and megatron.training's
shapes against what it printed on an H100 (tests/cluster/data/megatron/captured/).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_devcluster"))

import standin as s  # noqa: E402

RECIPES = {
    f"llama31_{size}_{kind}_config"
    for size in ("8b", "70b", "405b")
    for kind in ("pretrain", "sft", "peft")
} | {"llama32_1b_pretrain_config", "llama32_3b_pretrain_config", "llama3_8b_pretrain_config"}
GLOBAL_BATCH_SIZE = 64
LR = 3.0e-4


def stamp(dialect: str) -> str:
    fmt = "%Y-%m-%d %H:%M:%S.%f" if dialect == "megatron-lm" else "%Y-%m-%d %H:%M:%S"
    return datetime.now().strftime(fmt)


def ranks(dialect: str) -> str:
    """The ranks a load names: Megatron-Bridge's are 0-based, Megatron-LM's 1-based and
    with the GTP weight-remat group (megatron-core 0.19.2)."""
    return "[ t 1/1, gtp_remat 1/1, p 1/1 ]" if dialect == "megatron-lm" else "[ t 0/1, p 0/1 ]"


def parse_args(argv: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    flags: dict[str, str] = {}
    overrides: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value, i = argv[i + 1], i + 1
            flags[name] = value
        elif "=" in arg:
            key, _, value = arg.partition("=")
            overrides[key.lstrip("+")] = value
        i += 1
    return flags, overrides


def image_check(image: str) -> bool:
    """What pyxis does with the image before the task starts (pyxis_slurmstepd.c)."""
    if not image:
        return True
    if image.startswith(("/", "./", "~")) or image.endswith(".sqsh"):
        path = Path(os.path.expanduser(image))
        if not path.is_file():
            s.warn(f"pyxis: error: could not open image {image}: No such file or directory")
            return False
        return True
    s.say(f"pyxis: importing docker image: {image}")
    s.say(f"pyxis: imported docker image: {image}")
    return True


TRACKER = "latest_checkpointed_iteration.txt"


def tracker(save: Path) -> int:
    try:
        text = (save / TRACKER).read_text().strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def save_checkpoint(save: Path, it: int, dialect: str, save_time_s: float, lines: bool) -> None:
    """Megatron's order: the iter_ directory, then (rank 0, last) the train state and the
    tracker, so a directory newer than the tracker is a save in progress."""
    if lines:  # megatron.training stamps it (checkpointing.py), Megatron-Bridge does not
        said = f"saving checkpoint at iteration {it:7d} to {save} in torch_dist format"
        s.say(f"[{stamp(dialect)}] {said}" if dialect == "megatron-lm" else said)
    where = save / f"iter_{it:07d}"
    s.write_files(where, {".metadata": "", "common.pt": "", "metadata.json": "{}\n"})
    time.sleep(save_time_s)
    s.write_files(where, {"train_state.pt": "", "run_config.yaml": f"step: {it}\n"})
    (save / "latest_train_state.pt").write_text("")
    (save / "latest_checkpointed_iteration.txt").write_text(str(it))
    if not lines:
        return
    if dialect == "megatron-lm":
        s.say(
            f"  [{stamp(dialect)}] successfully saved checkpoint from iteration {it:7d} "
            f"to {save} [ t 1/1, gtp_remat 1/1, p 1/1 ]"
        )
    else:
        s.say(f"  successfully saved checkpoint from iteration {it:7d} to {save} [ t 1/1, p 1/1 ]")


def iteration_line(
    it: int,
    total: int,
    loss: float,
    ms: float,
    nan: int,
    dialect: str,
    throughput: bool,
    qk_clip: bool,
) -> str:
    line = f" [{stamp(dialect)}]"
    line += f" iteration {it:8d}/{total:8d} |"
    line += f" consumed samples: {it * GLOBAL_BATCH_SIZE:12d} |"
    line += f" elapsed time per iteration (ms): {ms:.1f} |"
    if throughput:  # logger.log_throughput (off in the recipes), --log-throughput
        line += f" throughput per GPU (TFLOP/s/GPU): {412.3 + (it % 7) * 0.4:.1f} |"
    line += f" learning rate: {LR * min(1.0, it / 10):.6E} |"
    line += f" global batch size: {GLOBAL_BATCH_SIZE:5d} |"
    if loss >= 0.0:  # upstream: a NaN average is left off the line
        line += f" lm loss: {loss:.6E} |"
    line += " loss scale: 1.0 |"
    line += f" grad norm: {1.5 + 3.0 / it:.3f} |"
    if dialect == "bridge" and qk_clip:  # model.qk_clip (MuonClip): not in the Llama recipes
        line += f" max attention logit: {18.25 + it * 0.01:.3f} |"
    line += f" number of skipped iterations: {0:3d} |"
    line += f" number of nan iterations: {nan:3d} |"
    return line


def validation_block(it: int, loss: float, where: str = "") -> None:
    """evaluate_and_print_results: in the loop the prefix is ``iteration N`` (Megatron-Bridge
    training/train.py, megatron.training), once training is done ``iteration N on
    validation set`` and ``... on test set`` (Bridge training/pretrain.py, as captured)."""
    text = (
        f" validation loss at iteration {it}{where} | "
        f"lm loss value: {loss:.6E} | lm loss PPL: {math.exp(min(20, loss)):.6E} | "
    )
    s.say("-" * (len(text) + 1), text, "-" * (len(text) + 1))


def exiting(what: str, dialect: str) -> None:
    s.say(f"[exiting program {what}] datetime: {stamp(dialect)} ")


def nan_raise(rank: int, it: int) -> None:
    """rerun_state_machine.validate_result with re-runs off: a fatal result raises."""
    host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    local = int(os.environ.get("LOCAL_RANK") or os.environ.get("SLURM_LOCALID") or 0)
    s.warn(
        f"[rank{rank}]: Traceback (most recent call last):",
        f'[rank{rank}]:   File "/opt/Megatron-Bridge/src/megatron/bridge/training/losses.py", '
        "line 73, in masked_next_token_loss",
        f"[rank{rank}]:     rerun_state_machine.validate_result(",
        # megatron-core 0.19.2's validate_result, line 534 (as captured)
        f'[rank{rank}]:   File "/usr/local/lib/python3.12/dist-packages/megatron/core/'
        'rerun_state_machine.py", line 534, in validate_result',
        f"[rank{rank}]:     raise RuntimeError(full_message)",
        f"[rank{rank}]: RuntimeError: Rank {rank}, node {host}, device {local}, iteration {it}: "
        "Unexpected result nan (message='found NaN in local forward loss calculation')",
    )


RERUN_LOGGER = "megatron.core.rerun_state_machine"


def record(level: str, message: str, filter_warnings: bool) -> None:
    """A logging record as both loops print it: megatron/training/__init__.py imports
    training.py, whose ``logging.basicConfig(handlers=[CustomHandler()])`` gives the handler
    logging's default format, ``LEVEL:logger:message`` (as captured); Megatron-Bridge
    imports megatron.training too (training/utils/log_utils.py) and, by default
    (logger.filter_warnings), drops WARNING records."""
    if level == "WARNING" and filter_warnings:
        return
    s.say(f"{level}:{RERUN_LOGGER}:{message}")


def nan_validate(rank: int, it: int, filter_warnings: bool, once: bool) -> None:
    """rerun_state_machine with re-runs on: re-run in place, then the verdict and the exit's
    words, in the captured order: reproducible (the save and exit 16 follow) or, ``once``,
    not (exit 17 follows, no save)."""
    host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    local = int(os.environ.get("LOCAL_RANK") or os.environ.get("SLURM_LOCALID") or 0)
    record(
        "ERROR",
        f"Unexpected result nan on rank {rank} at iteration #{it} invocation #1 "
        "(message='found NaN in local forward loss calculation')",
        filter_warnings,
    )
    record(
        "WARNING", "Need to rerun step to check reproducibility of initial result", filter_warnings
    )
    where = f"Rank {rank}, node {host}, device {local}, iteration #{it}"
    if once:
        record(
            "ERROR",
            f"{where}: First rerun: unexpected result is not reproducible within the "
            f"tolerance ({s.loss_at(it, it, start=10.8, floor=2.1)} != nan)!",
            filter_warnings,
        )
        record("ERROR", f"{where}: Possible transient error!!", filter_warnings)
        record(
            "WARNING",
            "Exiting now. The job can be resumed from a previous checkpoint",
            filter_warnings,
        )
        return
    record(
        "ERROR",
        f"Rank {rank}, node {host}, device {local}, iteration #{it}: First rerun: unexpected "
        "result is reproducible within the tolerance (nan = nan). Need to rerun on a "
        "different GPU to verify correctness.!",
        filter_warnings,
    )
    record(
        "WARNING",
        "Saving a checkpoint and exiting now. Please resume the job from the checkpoint to "
        "rerun the last iteration and establish a diagnostic",
        filter_warnings,
    )


def main() -> None:
    flags, overrides = parse_args(sys.argv[1:])
    rank = int(os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or 0)
    world = int(os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS") or 1)
    if rank != world - 1:
        s.follow_rank0()  # the last rank ends the run; the others end with it
    k = s.knobs()
    dialect = k.get("dialect", "bridge")
    if not image_check(os.environ.get("CONTAINER_IMAGE", "")):
        s.finish(1)
    recipe = flags.get("recipe", "")
    if recipe not in RECIPES:
        s.warn(
            "Traceback (most recent call last):",
            f"AttributeError: Recipe '{recipe}' not found in megatron.bridge.recipes.",
            "Make sure the recipe name is correct and the recipe is exported in its family "
            "__init__.py.",
        )
        s.finish(1)
    total = s.int_knob(overrides, "train.train_iters", s.int_knob(k, "steps", 30))
    interval = s.int_knob(overrides, "logger.log_interval", s.int_knob(k, "log_interval", 5))
    every = s.int_knob(overrides, "checkpoint.save_interval", s.int_knob(k, "ckpt_every", 10))
    val_every = s.int_knob(overrides, "validation.eval_interval", s.int_knob(k, "val_every", 0))
    exit_at = s.int_knob(overrides, "train.exit_interval", s.int_knob(k, "exit_at", 0))
    exit_after_s = s.float_knob(k, "exit_after_s", 0.0)
    if "train.exit_duration_in_mins" in overrides:
        minute_s = s.float_knob(k, "exit_minute_s", 60.0)
        exit_after_s = minute_s * s.float_knob(overrides, "train.exit_duration_in_mins", 0.0)
    step_time_s = s.float_knob(k, "step_time_s", 1.0)
    save_time_s = s.float_knob(k, "save_time_s", 0.5)
    nan_at = s.int_knob(k, "nan_at", -1)
    yes = ("1", "true", "yes")
    throughput = overrides.get("logger.log_throughput", k.get("log_throughput", "0")).lower() in yes
    qk_clip = overrides.get("model.qk_clip", "0").lower() in yes
    # Megatron-Bridge's setup_logging drops WARNING records (logger.filter_warnings, on by
    # default); Megatron-LM's initialize does not.
    filter_warnings = dialect == "bridge" and (
        overrides.get("logger.filter_warnings", "True").lower() in yes
    )
    nan_mode = overrides.get("rerun_state_machine.rerun_mode", k.get("nan_mode", "raise"))
    fault = s.fault_armed(k)
    fault_at = s.int_knob(k, "fault_at_step", max(total // 3, 1))
    save = Path(
        os.path.expanduser(overrides.get("checkpoint.save", "nemo_experiments/default/checkpoints"))
    )
    load = overrides.get("checkpoint.load", "")
    pretrained = overrides.get("checkpoint.pretrained_checkpoint", "")
    save.mkdir(parents=True, exist_ok=True)

    s.say(f"Recipe: {recipe} ({flags.get('dataset') or 'recipe dataset'}) on {world} ranks")
    s.say(*s.secret_fingerprints())
    if dialect == "megatron-lm":  # megatron/training/arguments.py print_args
        s.say("------------------------ arguments ------------------------")
        for arg, value in (
            ("log_interval", interval),
            ("save_interval", every),
            ("train_iters", total),
        ):
            s.say(f"  {arg} {'.' * (48 - len(arg))} {value}")
        s.say("-------------------- end of arguments ---------------------")
    s.startup(
        k,
        [
            "> building train, validation, and test datasets ...",
            "> compiling dataset index builder ...",
        ],
    )
    start = 0
    load_dir = Path(os.path.expanduser(load)) if load else None
    if load_dir is not None and tracker(load_dir):
        start = tracker(load_dir)
        s.say(f"  successfully loaded checkpoint from {load} {ranks(dialect)} at iteration {start}")
    elif load_dir is not None and dialect == "megatron-lm":  # checkpointing.py load_checkpoint
        s.say(
            f"WARNING: could not find the metadata file {load_dir / TRACKER}",
            "    will not load any checkpoints and will start from random",
        )
    elif load_dir is not None:
        s.say(f"WARNING: could not find the metadata file {load_dir / 'latest_train_state.pt'}")
    if pretrained and not start:
        at = tracker(Path(os.path.expanduser(pretrained)))
        s.say(
            f"  successfully loaded checkpoint from {pretrained} {ranks(dialect)} at iteration {at}"
        )
    # GlobalState.tensorboard_logger (last rank), first used once the checkpoint is loaded;
    # the recipes set logger.tensorboard_dir (<cwd>/nemo_experiments/default/tb_logs).
    board = overrides.get("logger.tensorboard_dir", "nemo_experiments/default/tb_logs")
    if board not in ("", "None", "null"):
        s.say("> setting tensorboard ...")
        s.tensorboard_events(Path(os.path.expanduser(board)))
    s.say(f"Starting training loop at iteration {start}")

    got_term: list[bool] = []
    if k.get("sigterm", "0") in ("1", "true", "yes"):
        signal.signal(signal.SIGTERM, lambda *_: got_term.append(True))
    began = time.monotonic()
    saved_at = start
    for it in range(start + 1, total + 1):
        time.sleep(step_time_s)
        s.strike(fault, it, fault_at, s.finish)
        nan = 0 <= nan_at <= it
        if nan and nan_mode == "validate_results":
            once = k.get("nan_once", "0").lower() in yes
            nan_validate(rank, it, filter_warnings, once)
            if once:  # EXIT_CODE_FAILED_ON_RESULT_VALIDATION, without a save
                s.finish(17)
            # train(): the loop's iteration counts completed ones, so the save is of the
            # one before: resuming from it re-runs this one.
            save_checkpoint(save, it - 1, dialect, save_time_s, True)
            s.finish(16)
        if nan:
            nan_raise(rank, it)
            s.finish(1)
        # megatron.training also prints the run's first iteration (training_log's
        # is_first_iteration); Megatron-Bridge prints only multiples of the interval.
        first = dialect == "megatron-lm" and it == start + 1
        if it % interval == 0 or first:
            loss = s.loss_at(it, total, start=10.8, floor=2.1)
            if dialect == "bridge":
                s.say(f"Step Time : {step_time_s:.2f}s GPU utilization: 412.3MODEL_TFLOP/s/GPU")
            s.say(
                iteration_line(it, total, loss, step_time_s * 1000, 0, dialect, throughput, qk_clip)
            )
        if val_every and it % val_every == 0:
            validation_block(it, s.loss_at(it, total, start=10.9, floor=2.2))
        if got_term:
            save_checkpoint(save, it, dialect, save_time_s, True)
            exiting("after receiving SIGTERM.", dialect)
            s.finish(0)
        if every and it % every == 0:
            save_checkpoint(save, it, dialect, save_time_s, True)
            saved_at = it
        if exit_after_s and time.monotonic() - began > exit_after_s:
            if saved_at != it:
                save_checkpoint(save, it, dialect, save_time_s, True)
            exiting(f"after {(time.monotonic() - began) / 60.0} minutes", dialect)
            s.finish(0)
        if exit_at and it % exit_at == 0 and it < total:
            if saved_at != it:
                save_checkpoint(save, it, dialect, save_time_s, True)
            exiting(f"at iteration {it}", dialect)
            s.finish(0)
    if saved_at != total and total > start:
        save_checkpoint(save, total, dialect, save_time_s, True)
    if val_every and total > start:  # do_valid, do_test: once more, at the last iteration
        s.say(f"[after training is done] datetime: {stamp(dialect)} ")
        validation_block(
            total, s.loss_at(total, total, start=10.9, floor=2.2), " on validation set"
        )
        validation_block(total, s.loss_at(total, total, start=11.0, floor=2.3), " on test set")
    s.finish(0)


if __name__ == "__main__":
    main()
