"""Training throughput on this CPU, side by side in one process (issue 4's benchmark).

Arms, interleaved round by round (the order flips every round) so a busy shared machine slows them alike:

- ``script``: :func:`structinit_hf.training.train` itself, one epoch of ``steps`` global batches of real
  CIFAR-10 images with the full recipe (RandAugment, flip, random-resized crop, label smoothing, AdamW,
  grad clipping, cosine schedule); images/s as its ``metrics.jsonl`` reports it (data loading included).
- ``bare``: the same model and optimizer fed pre-made tensors, nothing else.

for the structured-init ``vit_tiny_impulse3`` and the control ``vit_tiny_patch2_32`` (same architecture),
and the script once more with DataLoader workers.  One untimed bare step warms the process up first.
Peak memory is measured apart: each arm runs once more in a fresh process whose peak resident set
(``ru_maxrss``, DataLoader workers not included) is reported.

    python scripts/benchmark_training.py --data ../shared/data/cifar10-small --out benchmarks/training
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from timm.optim import create_optimizer_v2
from torch import nn

from structinit_hf.evaluation import library_versions, load_model
from structinit_hf.training import train, training_parser

MODELS = ("vit_tiny_impulse3", "vit_tiny_patch2_32")


def own_peak_memory_mb() -> float:
    """This process's peak resident set (VmHWM starts afresh at exec, unlike a child's ru_maxrss)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def peak_memory_mb(arm: str, args: argparse.Namespace) -> float:
    """Peak resident memory of a fresh process that runs ``arm`` once (two steps reach the steady state)."""
    command = [sys.executable, __file__, "--arm", arm, "--data", args.data, "--batch-size", str(args.batch_size)]
    command += ["--steps", "2", "--workers", str(args.workers)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_mb"]


def script_arm(model: str, data: str, batch: int, steps: int, workers: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        argv = [
            "--model", model, "--dataset", data, "--output-dir", out, "--epochs", "1", "--warmup-epochs", "0",
            "--batch-size", str(batch), "--max-train-samples", str(batch * steps), "--max-eval-samples", str(batch),
            "--val-split", "0", "--workers", str(workers),
        ]  # fmt: skip
        train(training_parser().parse_args(argv))
        return json.loads((Path(out) / "metrics.jsonl").read_text().splitlines()[0])["images_per_sec"]


def bare_arm(model_name: str, batch: int, steps: int) -> float:
    model, _ = load_model(model_name, num_classes=10)
    model.train()
    optimizer = create_optimizer_v2(model, opt="adamw", lr=1e-3, weight_decay=0.01, eps=1e-3)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(steps, batch, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (steps, batch), generator=generator)
    start = time.perf_counter()
    for x, y in zip(images, labels, strict=True):
        loss = criterion(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 3.0)
        optimizer.step()
        optimizer.zero_grad()
    return batch * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/cifar10-small")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/training"))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per arm and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2, help="workers of the extra script arm")
    parser.add_argument("--arm", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    impulse, control = MODELS
    arms = {  # neighbours are the pairs compared; every other round runs them in reverse order
        f"script/{impulse}": lambda: script_arm(impulse, args.data, args.batch_size, args.steps, 0),
        f"bare/{impulse}": lambda: bare_arm(impulse, args.batch_size, args.steps),
        f"bare/{control}": lambda: bare_arm(control, args.batch_size, args.steps),
        f"script/{control}": lambda: script_arm(control, args.data, args.batch_size, args.steps, 0),
        f"script+workers/{impulse}": lambda: script_arm(impulse, args.data, args.batch_size, args.steps, args.workers),
    }
    if args.arm is not None:  # one arm in this fresh process, for the memory pass
        arms[args.arm]()
        print(json.dumps({"peak_rss_mb": own_peak_memory_mb()}))
        return
    bare_arm(MODELS[1], args.batch_size, 1)  # warm-up: the first step of a process is slow
    throughput: dict[str, list[float]] = {name: [] for name in arms}
    load_before = os.getloadavg()
    start = time.perf_counter()
    for round_index in range(args.rounds):
        order = list(arms) if round_index % 2 == 0 else list(reversed(arms))
        for name in order:
            throughput[name].append(arms[name]())
            print(f"round {round_index + 1}/{args.rounds}  {name:34s} {throughput[name][-1]:6.2f} img/s", flush=True)
    load_after = os.getloadavg()
    memory = {name: peak_memory_mb(name, args) for name in arms}

    def ratio(numerator: str, denominator: str) -> float:
        return statistics.median(a / b for a, b in zip(throughput[numerator], throughput[denominator], strict=True))

    summary = {
        "script_over_bare": {m: ratio(f"script/{m}", f"bare/{m}") for m in MODELS},
        "script_with_workers_over_bare": ratio(f"script+workers/{MODELS[0]}", f"bare/{MODELS[0]}"),
        "impulse_over_control": {
            kind: ratio(f"{kind}/{MODELS[0]}", f"{kind}/{MODELS[1]}") for kind in ("bare", "script")
        },
    }
    report = {
        "setting": dict(
            batch_size=args.batch_size,
            steps=args.steps,
            rounds=args.rounds,
            workers=args.workers,
            data=args.data,
            image_size=32,
            recipe="train.py defaults (RandAugment m9 mstd0.5, flip, RRC, AdamW, clip 3, ls 0.1)",
        ),
        "machine": dict(
            platform=platform.platform(),
            cpus=os.cpu_count(),
            torch_threads=torch.get_num_threads(),
            load_average_before=load_before,
            load_average_after=os.getloadavg(),
        ),
        "images_per_sec": throughput,
        "median_images_per_sec": {name: statistics.median(values) for name, values in throughput.items()},
        "peak_memory_mb": memory,
        "ratios_median_of_rounds": summary,
        "wall_time_s": round(time.perf_counter() - start, 1),
        "versions": library_versions(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# Training throughput (scripts/benchmark_training.py)",
        "",
        f"ViT-Tiny, 32 px, patch 2, batch {args.batch_size}, {args.steps} steps x {args.rounds} interleaved rounds, "
        f"{os.cpu_count()} shared CPU cores, torch threads {torch.get_num_threads()}, load average "
        f"{load_before[0]:.1f} before / {load_after[0]:.1f} after the throughput rounds. Peak RSS: one fresh "
        "process per arm.",
        "",
        "| arm | median img/s | per round | peak RSS (MB) |",
        "|---|---|---|---|",
        *(
            f"| {name} | {statistics.median(runs):.2f} | {', '.join(f'{v:.2f}' for v in runs)} | {memory[name]:.0f} |"
            for name, runs in throughput.items()
        ),
        "",
        "| ratio (median over rounds) | value |",
        "|---|---|",
        *(f"| script / bare, {m} | {v:.3f} |" for m, v in summary["script_over_bare"].items()),
        f"| script with {args.workers} workers / bare, {MODELS[0]} | {summary['script_with_workers_over_bare']:.3f} |",
        *(f"| impulse3 / control, {k} | {v:.3f} |" for k, v in summary["impulse_over_control"].items()),
        "",
    ]
    (args.out / "README.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
