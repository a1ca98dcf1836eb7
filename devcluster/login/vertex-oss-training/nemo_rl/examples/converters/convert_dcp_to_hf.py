#!/usr/bin/env python3
"""Stand-in for NeMo-RL's ``examples/converters/convert_dcp_to_hf.py`` on the dev cluster
(then=export of a NeMo-RL launch). Upstream (NVIDIA-NeMo/RL
0563dc35d59bde51ea44d2821009368d9a3751d2) reads ``policy.model_name`` from the run's
``config.yaml`` (the model and the tokenizer), converts the Torch DCP checkpoint in
``--dcp-ckpt-path`` (``step_N/policy/weights``) with
``nemo_rl.utils.native_checkpoint.convert_dcp_to_hf`` and prints ``Saved HF checkpoint to:
<dir>``; a missing config or checkpoint fails with Python's traceback. This one reads the
stand-in checkpoint's files and writes a small Hugging Face layout. The job's secrets are
said by fingerprint, never by value.

    convert_dcp_to_hf.py --config <step_N>/config.yaml \\
        --dcp-ckpt-path <step_N>/policy/weights --hf-ckpt-path <dir>
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys


def model_name(config_text: str) -> str:
    """``policy.model_name`` of the run's config.yaml (the stand-in's YAML is two levels)."""
    match = re.search(r"^policy:\n(?:[ ]+.*\n)*?[ ]+model_name:[ ]*(\S+)", config_text, re.M)
    return match.group(1).strip("'\"") if match else ""


def main() -> int:
    parser = argparse.ArgumentParser(description="Convert Torch DCP checkpoint to HF checkpoint")
    parser.add_argument("--config", type=str, default=None)
    parser.add_argument("--dcp-ckpt-path", type=str, default=None)
    parser.add_argument("--hf-ckpt-path", type=str, default=None)
    parser.add_argument("--safe-serialization", type=bool, default=False)
    args = parser.parse_args()
    token = os.environ.get("HF_TOKEN", "")
    print(
        f"HF_TOKEN is set (sha256 {hashlib.sha256(token.encode()).hexdigest()[:12]})"
        if token
        else "HF_TOKEN is not set"
    )
    with open(args.config) as f:  # a missing config fails here, as upstream's open() does
        config = f.read()
    model = model_name(config)
    if not model:
        print("KeyError: 'policy'", file=sys.stderr)
        return 1
    weights = os.path.join(args.dcp_ckpt_path, "model.safetensors.index.json")
    if not os.path.isfile(weights) and not os.path.isfile(
        os.path.join(args.dcp_ckpt_path, ".metadata")
    ):
        print(
            f"FileNotFoundError: [Errno 2] No such file or directory: "
            f"'{os.path.join(args.dcp_ckpt_path, '.metadata')}'",
            file=sys.stderr,
        )
        return 1
    out = args.hf_ckpt_path
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"_name_or_path": model, "architectures": ["LlamaForCausalLM"]}, f)
    with open(os.path.join(out, "pytorch_model.bin"), "wb") as f:
        f.write(b"\0" * 4096)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(out, name), "w") as f:
            f.write("{}\n")
    print(f"Saved HF checkpoint to: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
