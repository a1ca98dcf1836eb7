"""A running run's health, read from the progress lines the poller already parses. Pure.

Loss: a NaN or inf training loss (the owner is told at once; the run is stopped or left
running as ``watch.health.nan_action`` says for its cluster), a spike well above the
run's recent median, validation loss rising while training loss falls. Speed: step time
well above the run's own median for several steps in a row, and its recovery. Each is
said once per episode; what was said lives on the launch (:class:`bot.lifecycle.launch.Health`),
so a restarted bot does not say it again. See docs/health.md.

What is found is a :data:`Note`: its kind (``note``) and its figures, no words;
``bot.wording.health`` says each in the thread.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from statistics import median
from typing import Any

from bot.lifecycle.launch import Launch
from bot.settings.sections import HealthRules as Rules
from cluster.preflight.gpu import GpuSample
from cluster.watching.progress import Progress

TRAINBOT = "trainbot"  # cancelled_by of a run trainbot stopped itself (its loss went NaN)
Note = dict[str, Any]
"""One thing health has to say, as facts: ``{"move": "health", "note": "loss_spike",
"step": 120, "loss": 9.1, ...}`` (the kinds: loss_nan, loss_spike, reward_collapse,
reward_flat, val_rising, slow, speed_back, gpu_idle). It rides a thread event's data."""


def note(kind: str, **facts: Any) -> Note:
    return {"move": "health", "note": kind, **facts}


STEP_RE = re.compile(r"step=(\d+)")
BASELINE_KEPT = 50


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def observe(
    launch: Launch,
    progress: Progress,
    rules: Rules,
    *,
    ended: bool,
    saved_steps: Iterable[int],
    now: float,
) -> list[Note]:
    """The notes ``progress`` (new since the last poll) calls for, as facts; edits
    ``launch.health`` (and, for a NaN loss under "stop", records trainbot's cancel:
    the poller then sends ``scancel``). Call before the new points join the histories."""
    said = _loss_checks(launch, progress, rules, ended=ended, now=now)
    said += _reward_checks(launch, progress, rules)
    said += _validation_check(launch, progress, rules)
    said += _speed_checks(launch, progress, rules, saved_steps)
    return said


def _loss_checks(
    launch: Launch, progress: Progress, rules: Rules, *, ended: bool, now: float
) -> list[Note]:
    h, said = launch.health, []
    window = [loss for _, loss in launch.progress_history[-rules.spike_window :]]
    # An RL run's loss (GRPO's clipped policy-gradient term) sits near zero, of either sign:
    # a ratio to its median is noise. Its reward is watched instead (_reward_checks).
    rl = bool(launch.reward_history) or any(q.reward is not None for q in progress.points)
    for q in progress.points:
        if q.loss is None:
            continue
        if not math.isfinite(q.loss):
            if h.nan_step is None:
                h.nan_step = q.step
                said.append(_nan(launch, q.step, q.loss, rules, ended=ended, now=now))
            continue
        recent = window[-rules.spike_window :]
        if not rl and len(window) >= rules.spike_min_points and min(recent) > 0:
            typical = median(recent)
            if q.loss > rules.spike_factor * typical:
                if h.spike_step is None:
                    h.spike_step = q.step
                    said.append(
                        note(
                            "loss_spike",
                            step=q.step,
                            loss=q.loss,
                            factor=rules.spike_factor,
                            median=typical,
                        )
                    )
            elif h.spike_step is not None:
                h.spike_step = None  # back under the line: a later spike is a new episode
        window.append(q.loss)
    return said


def _nan(launch: Launch, step: int, loss: float, rules: Rules, *, ended: bool, now: float) -> Note:
    """A NaN or inf loss: what happens to the run (``then``: ended, stop or flag). The
    loss is kept as its text (``nan``, ``inf``): JSON has no NaN."""
    facts = {"owner": launch.user_id, "step": step, "loss": str(loss)}
    if ended:
        return note("loss_nan", then="ended", **facts)
    if (
        rules.nan_action_for(launch.cluster, launch.slurm_account) == "stop"
        and not launch.cancelled_by
    ):
        launch.cancelled_by, launch.cancelled_at = TRAINBOT, now
        return note("loss_nan", then="stop", **facts)
    return note("loss_nan", then="flag", **facts)


def _reward_checks(launch: Launch, progress: Progress, rules: Rules) -> list[Note]:
    """RL: the reward collapsing (its recent median under (1 - ``reward_collapse``) x its best)
    or going flat (``reward_flat_steps`` steps with one value): each said once per episode."""
    h, said = launch.health, []
    rewards = [
        r for _, r in launch.reward_history[-max(rules.reward_window, rules.reward_flat_steps) :]
    ]
    for q in progress.points:
        if q.reward is None or not math.isfinite(q.reward):
            continue
        rewards.append(q.reward)
        if len(rewards) >= rules.reward_window:
            typical = median(rewards[-rules.reward_window :])
            best = h.reward_best
            if best is not None and best > 0 and typical < (1 - rules.reward_collapse) * best:
                if h.reward_collapse_step is None:
                    h.reward_collapse_step = q.step
                    said.append(
                        note(
                            "reward_collapse",
                            step=q.step,
                            window=rules.reward_window,
                            median=typical,
                            best=best,
                        )
                    )
            elif h.reward_collapse_step is not None:
                h.reward_collapse_step = None
            h.reward_best = typical if best is None else max(best, typical)
        flat = rewards[-rules.reward_flat_steps :]
        if len(flat) == rules.reward_flat_steps and max(flat) - min(flat) <= 1e-9:
            if h.reward_flat_step is None:
                h.reward_flat_step = q.step
                said.append(
                    note("reward_flat", reward=flat[-1], steps=rules.reward_flat_steps, step=q.step)
                )
        elif h.reward_flat_step is not None:
            h.reward_flat_step = None
    return said


def _validation_check(launch: Launch, progress: Progress, rules: Rules) -> list[Note]:
    """Validation loss higher at each of the last ``val_rising`` validations while the
    training loss fell over the same steps: one note per episode."""
    if not progress.validation:
        return []
    h = launch.health
    vals = [*launch.validation_history, *progress.validation][-rules.val_rising :]
    rising = len(vals) == rules.val_rising and all(
        b[1] > a[1] for a, b in zip(vals, vals[1:], strict=False)
    )
    if not rising:
        h.val_rising_step = None
        return []
    train = [
        (s, loss)
        for s, loss in [*launch.progress_history, *((q.step, q.loss) for q in progress.points)]
        if loss is not None and math.isfinite(loss)
    ]
    before = [loss for s, loss in train if s <= vals[0][0]]
    if not before or not train or train[-1][1] >= before[-1] or h.val_rising_step is not None:
        return []
    h.val_rising_step = vals[-1][0]
    return [
        note(
            "val_rising",
            validations=[v for _, v in vals],
            step=vals[-1][0],
            train_from=before[-1],
            train_to=train[-1][1],
        )
    ]


def _speed_checks(
    launch: Launch, progress: Progress, rules: Rules, saved_steps: Iterable[int]
) -> list[Note]:
    h, said = launch.health, []
    times = h.usual_step_times_s  # slow steps stay out: a long slow window moves no median
    saved = set(saved_steps) | {
        int(m.group(1)) for name in launch.checkpoints if (m := STEP_RE.search(name))
    }
    for q in progress.points:
        t = q.step_time_s
        if not t:
            continue
        if len(times) >= rules.slow_min_points:
            typical = median(times)
            if t > rules.slow_factor * typical:
                if h.slow_run == 0:
                    h.slow_from = q.step
                h.slow_run += 1
                if h.slow_run >= rules.slow_steps and h.slow_since is None:
                    h.slow_since = h.slow_from
                    in_window = sorted(x for x in saved if h.slow_from - 1 <= x <= q.step)
                    said.append(
                        note(
                            "slow",
                            first=h.slow_from,
                            step=q.step,
                            step_time_s=t,
                            median_s=typical,
                            saves=in_window,
                        )
                    )
            else:
                if h.slow_since is not None:
                    said.append(note("speed_back", step=q.step, step_time_s=t, median_s=typical))
                h.slow_run, h.slow_since = 0, None
        if h.slow_run == 0:
            times[:] = [*times, t][-BASELINE_KEPT:]
    return said


def gpu_sampled(launch: Launch, sample: GpuSample, rules: Rules, now: float) -> list[Note]:
    """One GPU sample of ``launch``'s running job: kept for the status line; GPUs at or
    under ``idle_util_pct`` for ``idle_window_s`` are warned of once per idle stretch."""
    h = launch.health
    h.gpu_util_pct, h.gpu_sampled_at = sample.util_pct, now
    h.gpu_mem_used_mib, h.gpu_mem_total_mib = sample.mem_used_mib, sample.mem_total_mib
    if sample.util_pct > rules.idle_util_pct:
        h.gpu_idle_since, h.gpu_idle_said = None, False
        return []
    if h.gpu_idle_since is None:
        h.gpu_idle_since = now
    if h.gpu_idle_said or now - h.gpu_idle_since < rules.idle_window_s:
        return []
    h.gpu_idle_said = True
    return [
        note(
            "gpu_idle",
            owner=launch.user_id,
            gpus=sample.gpus,
            job=launch.job_id,
            minutes=round((now - h.gpu_idle_since) / 60),
            sample=sample.describe(),
        )
    ]


def gpu_text(launch: Launch) -> str:
    """The status line's GPU figure ("GPU 93%"), while the job runs and has been sampled."""
    util = launch.health.gpu_util_pct
    return f"GPU {util:.0f}%" if util is not None and launch.active else ""
