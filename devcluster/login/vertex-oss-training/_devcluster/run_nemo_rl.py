"""Entry point of the NeMo-RL stand-in driver: run_nemo_rl.py <algorithm> [overrides...]."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nemo_rl_standin  # noqa: E402

if __name__ == "__main__":
    algorithm = sys.argv.pop(1) if len(sys.argv) > 1 else ""
    if algorithm not in ("sft", "dpo", "grpo", "rm"):
        sys.exit(f"run_nemo_rl.py: unknown algorithm {algorithm!r} (sft, dpo, grpo, rm)")
    nemo_rl_standin.main(algorithm)
