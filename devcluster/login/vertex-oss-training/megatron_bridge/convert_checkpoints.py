#!/usr/bin/env python3
"""Stand-in for Megatron-Bridge's ``examples/conversion/convert_checkpoints.py`` on the dev
cluster (then=export). Upstream's ``export`` loads a Megatron checkpoint with
``AutoBridge.from_hf_pretrained(<hf model>)`` and writes it in Hugging Face format with
``bridge.export_ckpt``; this one reads the stand-in checkpoint's files and writes a small
Hugging Face layout (config.json, model.safetensors index and shards, tokenizer files),
printing what upstream prints. Usage as upstream's:

    convert_checkpoints.py export --hf-model meta-llama/Llama-3.1-8B \\
        --megatron-path <iter_NNNNNNN> --hf-path <dir>
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description="Convert checkpoints between HF and Megatron")
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="Export a Megatron checkpoint to HuggingFace format")
    export.add_argument("--hf-model", required=True)
    export.add_argument("--megatron-path", required=True)
    export.add_argument("--hf-path", required=True)
    export.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    source = os.path.expanduser(args.megatron_path)
    target = os.path.expanduser(args.hf_path)
    print(f"🔄 Starting export: {source} -> {target}")
    if not os.path.isdir(source):
        print(f"❌ Megatron checkpoint not found: {source}", file=sys.stderr)
        return 1
    print(f"📥 Loading HuggingFace config from: {args.hf_model}")
    print(f"📂 Loading Megatron checkpoint from: {source}")
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, "config.json"), "w") as out:
        json.dump({"_name_or_path": args.hf_model, "architectures": ["LlamaForCausalLM"]}, out)
    shards = 2
    weights = {}
    for n in range(1, shards + 1):
        name = f"model-{n:05d}-of-{shards:05d}.safetensors"
        with open(os.path.join(target, name), "wb") as out:
            out.write(b"\0" * 4096)
        weights[f"model.layers.{n - 1}.weight"] = name
    with open(os.path.join(target, "model.safetensors.index.json"), "w") as out:
        json.dump({"metadata": {"total_size": 4096 * shards}, "weight_map": weights}, out)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        with open(os.path.join(target, name), "w") as out:
            out.write("{}\n")
    print(f"💾 Saving HuggingFace model to: {target}")
    print(f"✅ Successfully exported model to: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
