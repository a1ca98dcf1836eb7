#!/bin/bash
# NeMo-RL grpo. A real cluster runs: uv run examples/run_grpo_math.py --config examples/configs/grpo.yaml "$@"
# The dev cluster runs a stand-in driver that prints what NeMo-RL prints (see ../../_devcluster/).
exec python3 "$(dirname "${BASH_SOURCE[0]}")/../../_devcluster/run_nemo_rl.py" grpo "$@"
