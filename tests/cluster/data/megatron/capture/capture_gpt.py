# mypy: ignore-errors
"""A small pretrain_gpt.py for the capture, run on a GPU machine (not part of trainbot).

It runs Megatron-LM's own ``pretrain_gpt.py`` (branch core_r0.19.0, whose
megatron/training matches the megatron-core 0.19.2 wheel; copy it beside this file with
``gpt_builders.py`` and ``model_provider.py``) through the steps of its ``__main__``, with
two test hooks in the forward step, read from the environment:

  CAPTURE_STEP_SLEEP_S  sleep this long in each training forward step (slows the loop so an
                        early exit by time or a SIGTERM lands after a few progress lines)
  CAPTURE_NAN_AT        make the per-token losses NaN in the forward step of this iteration
                        (1-based, as the log counts), so the NaN check in loss_func fires
  CAPTURE_NAN_ONCE      with CAPTURE_NAN_AT: only the first forward call of that iteration
                        (a transient fault: the re-run in place gives a finite loss)
"""

import os
import time

import megatron.core.datasets.utils as dataset_utils
import pretrain_gpt as pg
import torch
from megatron.core.enums import ModelType
from megatron.training import get_args, inprocess_restart, pretrain, set_startup_timestamps
from megatron.training.argument_utils import (
    gpt_config_from_args,
    pretrain_cfg_container_from_args,
)
from megatron.training.arguments import parse_and_validate_args

# The wheel ships the dataset helpers built (helpers_cpp) but not their Makefile, so
# Megatron's run-time "make" fails and exits; the built module is what it would make.
dataset_utils.compile_helpers = lambda: None

SLEEP_S = float(os.environ.get("CAPTURE_STEP_SLEEP_S", "0") or 0)
NAN_AT = int(os.environ.get("CAPTURE_NAN_AT", "0") or 0)
NAN_ONCE = os.environ.get("CAPTURE_NAN_ONCE") == "1"
_calls: dict[int, int] = {}


def forward_step(data_iterator, model, return_schedule_plan: bool = False):
    args = get_args()
    output_tensor, loss_func = pg.forward_step(data_iterator, model, return_schedule_plan)
    if model.training:
        if SLEEP_S:
            time.sleep(SLEEP_S)
        it = args.curr_iteration + 1
        if NAN_AT and it == NAN_AT:
            _calls[it] = _calls.get(it, 0) + 1
            if not NAN_ONCE or _calls[it] == 1:
                print(f"[capture] NaN put in the loss at iteration {it} (call {_calls[it]})")
                nan = torch.tensor(float("nan"), device=output_tensor.device)
                output_tensor = output_tensor * nan
    return output_tensor, loss_func


if __name__ == "__main__":
    set_startup_timestamps(program_start=time.time(), main_entry=time.time())
    pg.train_valid_test_datasets_provider.is_distributed = True
    run, store = inprocess_restart.maybe_wrap_for_inprocess_restart(pretrain)
    args = parse_and_validate_args(args_defaults={"tokenizer_type": "GPT2BPETokenizer"})
    model_cfg = gpt_config_from_args(args)
    full_config = pretrain_cfg_container_from_args(args, model_cfg)
    run(
        full_config,
        pg.train_valid_test_datasets_provider,
        ModelType.encoder_or_decoder,
        forward_step,
        store=store,
        get_embedding_ranks=pg.get_embedding_ranks,
    )
