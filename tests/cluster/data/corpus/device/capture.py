"""Capture the real text of three GPU failures on a machine with one NVIDIA GPU, for the
failure corpus: a CUDA illegal memory access, a CUDA out-of-memory, and NCCL's Duplicate
GPU error (two ranks on one GPU). Each case runs in its own process; its stdout and
stderr go to <out>/<case>.log, with the versions in <out>/versions.txt.

    python3 capture.py <out dir>
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

IMA = r"""
import torch, triton, triton.language as tl

@triton.jit
def poke(ptr):
    tl.store(ptr + (1 << 40), 1.0)  # far outside any allocation

x = torch.zeros(16, device="cuda")
poke[(1,)](x)
torch.cuda.synchronize()
"""

OOM = r"""
import torch
x = torch.empty(int(1 << 40), dtype=torch.uint8, device="cuda")  # 1 TiB
"""

DUPLICATE_GPU = r"""
import os, torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29512")
    torch.cuda.set_device(0)  # both ranks on GPU 0
    dist.init_process_group("nccl", rank=rank, world_size=2)
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.start_processes(run, nprocs=2, start_method="spawn")
"""

VERSIONS = r"""
import torch
print("torch", torch.__version__)
print("cuda", torch.version.cuda)
print("nccl", ".".join(map(str, torch.cuda.nccl.version())))
print("gpu", torch.cuda.get_device_name(0))
"""


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NCCL_DEBUG": "WARN", "PYTHONUNBUFFERED": "1"}
    cases = {"versions": VERSIONS, "illegal_memory_access": IMA, "cuda_oom": OOM,
             "nccl_duplicate_gpu": DUPLICATE_GPU}  # fmt: skip
    for name, code in cases.items():
        script = out / f"{name}.py"
        script.write_text(code)
        with open(out / f"{name}.log", "w") as log:
            done = subprocess.run(
                [sys.executable, str(script)], stdout=log, stderr=subprocess.STDOUT,
                env=env, timeout=120, check=False,
            )  # fmt: skip
        script.unlink()
        print(name, "exit", done.returncode)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
