#!/bin/bash
# NeMo-RL dpo. A real cluster runs: uv run examples/run_dpo.py --config examples/configs/dpo.yaml "$@"
# The dev cluster runs a stand-in driver that prints what NeMo-RL prints (see ../../_devcluster/).
exec python3 "$(dirname "${BASH_SOURCE[0]}")/../../_devcluster/run_nemo_rl.py" dpo "$@"
