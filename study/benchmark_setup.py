"""Seconds from ``setup_run`` to the first training batch: what a run pays before its first step (data decoded once,
labels, model, memory plan, loaders), on this machine, for one or more checkouts side by side.

    python study/benchmark_setup.py --data ../shared/data/cifar10 --workers 0 5 --rounds 2 \\
        --trees /tmp/before . > study/records/training/setup_time.md

Each (tree, workers) pair runs in a fresh process per round (rounds interleaved), with the paper's recipe on
``--data`` (32 px ViT-Tiny, batch 512, RandAugment, 2% held out), eager, one torch thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ONE_RUN = """
import json, sys, tempfile, time
import torch
torch.set_num_threads(1)
from structinit_hf.train import TrainingSettings
from structinit_hf.train._internal import setup_run
data, workers = sys.argv[1], int(sys.argv[2])
with tempfile.TemporaryDirectory() as out:
    settings = TrainingSettings().with_flags(
        model="vit_tiny_impulse3", model_kwargs={"img_size": 32, "patch_size": 2, "depth": 12}, dataset=data,
        output_dir=out + "/run", epochs=10, warmup_epochs=0.5, batch_size=512, workers=workers, val_split=0.02,
        compile=False, mixed_precision="no",
    )
    start = time.perf_counter()
    run = setup_run(settings)
    setup = time.perf_counter() - start
    next(iter(run.train_loader))
    print(json.dumps({"setup_s": setup, "first_batch_s": time.perf_counter() - start - setup}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\\n")[0], allow_abbrev=False)
    parser.add_argument("--data", required=True)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 5])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", nargs="+", default=["."], help="checkouts to time (their structinit_hf)")
    args = parser.parse_args()
    data = str(Path(args.data).resolve())
    times: dict[tuple[str, int], list[dict]] = {(tree, w): [] for tree in args.trees for w in args.workers}
    for round_index in range(args.rounds):
        pairs = list(times) if round_index % 2 == 0 else list(reversed(times))
        for tree, workers in pairs:
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "HF_HUB_OFFLINE": "1"}
            done = subprocess.run(
                [sys.executable, "-c", ONE_RUN, data, str(workers)], env=env, capture_output=True, text=True,
                cwd=tempfile.gettempdir(),
            )  # fmt: skip
            if done.returncode != 0:
                sys.exit(f"{tree}, {workers} workers: {done.stderr.strip().splitlines()[-1]}")
            times[tree, workers].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {round_index + 1}: {tree}, {workers} workers: {times[tree, workers][-1]}", file=sys.stderr)
    print(f"`python {' '.join(sys.argv)}` ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end)")
    print()
    print("| tree | loader workers | setup_run, s (each round) | first batch, s (median) |")
    print("|---|---|---|---|")
    for (tree, workers), rounds in times.items():
        setups = ", ".join(f"{r['setup_s']:.1f}" for r in rounds)
        first = statistics.median(r["first_batch_s"] for r in rounds)
        print(f"| `{tree}` | {workers} | {setups} | {first:.2f} |")


if __name__ == "__main__":
    main()
