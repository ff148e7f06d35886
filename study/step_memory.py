"""Peak memory of one training step per image, for the paper's architecture (ViT-Tiny, 32 px, patch 2, depth 12).

Each micro-batch runs in a fresh process: the model and AdamW are built, one step warms the optimizer state, the
peak resident set is reset (``/proc/self/clear_refs``), and one more step (forward, backward, AdamW) is measured.
Printed per micro-batch: memory before the step, its peak, the growth per image, and what ``scripts/train.py``
estimates from the activations autograd saves (``structinit_hf.train.training.memory_plan``).

The entry point is ``study/benchmark_memory.py``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from structinit_hf.train import UsageError
from structinit_hf.train._internal import STEP_OVERHEAD

__all__ = ["measure", "memory_parser"]

ONE_STEP = """
import json, sys, timm, torch, structinit_hf
from pathlib import Path
from timm.optim import create_optimizer_v2
from structinit_hf.train._internal import saved_bytes_per_image

def status(field):
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(field + ":"))
    return int(line.split()[1]) * 1024

model_name, micro = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
model = timm.create_model(model_name, num_classes=10)
optimizer = create_optimizer_v2(model, opt="adamw", lr=1e-3, weight_decay=0.01)
criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
size = model.pretrained_cfg["input_size"]
saved = saved_bytes_per_image(model, tuple(size), torch.device("cpu"))
inputs, labels = torch.randn(micro, *size), torch.randint(0, 10, (micro,))

def step():
    criterion(model(inputs), labels).backward()
    optimizer.step()
    optimizer.zero_grad()

model.train()
step()
Path("/proc/self/clear_refs").write_text("5")
before = status("VmRSS")
step()
print(json.dumps({"micro_batch": micro, "before": before, "peak": status("VmHWM"), "saved_per_image": saved}))
"""


def memory_parser() -> argparse.ArgumentParser:
    """The flags of ``study/benchmark_memory.py``."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description="Peak memory of one training step per image, for the paper's architecture (ViT-Tiny, 32 px, "
        "patch 2, depth 12).",
    )
    parser.add_argument("--model", default="vit_tiny_impulse3", help="timm name (the paper's architecture)")
    parser.add_argument("--micro-batches", type=int, nargs="+", default=[8, 16, 32, 64])
    return parser


def measure(args: argparse.Namespace) -> None:
    """Measure each micro-batch in a fresh process and print the table, then the slope against the estimate."""
    if min(args.micro_batches) < 1:
        raise UsageError(f"--micro-batches must be >= 1, got {' '.join(map(str, args.micro_batches))}")
    rows = []
    for micro in args.micro_batches:
        done = subprocess.run(
            [sys.executable, "-c", ONE_STEP, args.model, str(micro)], capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise RuntimeError(f"micro-batch {micro} failed:\n{done.stderr[-2000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{args.model}, fp32, one AdamW step on CPU (forward, backward, update)")
    print("micro-batch | RSS before (GB) | peak (GB) | growth per image (MB) | saved activations per image (MB)")
    for row in rows:
        growth = (row["peak"] - row["before"]) / row["micro_batch"] / 2**20
        print(
            f"{row['micro_batch']:>11} | {row['before'] / 1e9:>15.2f} | {row['peak'] / 1e9:>9.2f} | "
            f"{growth:>21.1f} | {row['saved_per_image'] / 2**20:>32.1f}"
        )
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        slope = (last["peak"] - first["peak"]) / (last["micro_batch"] - first["micro_batch"]) / 2**20
        ratio = slope / (last["saved_per_image"] / 2**20)
        print(f"slope between micro-batches {first['micro_batch']} and {last['micro_batch']}: {slope:.1f} MB per image")
        print(
            f"measured slope / saved activations: {ratio:.2f} (train.py plans with STEP_OVERHEAD = {STEP_OVERHEAD}, "
            "which must stay above it)"
        )
