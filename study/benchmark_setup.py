"""Seconds from a run's process start to its first training batch: what a run pays before its first step (imports,
data decoded once, labels, model, memory plan, loaders, the first batch) and what its first validation waits for its
loader's workers, on this machine, for one or more checkouts side by side.

    python study/benchmark_setup.py --data ../shared/data/cifar10 --workers 5 --start-methods spawn fork \\
        --rounds 2 --trees /tmp/before . > study/records/training/setup_time.md

Each (tree, workers, start method) runs in a fresh process per round (rounds interleaved), with the paper's recipe
on ``--data`` (32 px ViT-Tiny, batch 512, RandAugment, 2% held out), eager, one torch thread. The start method is
that process's default (``multiprocessing.set_start_method``): ``spawn`` is what a benchmark run has, its process
started by multiprocessing's spawn (:mod:`study.small_data_runs`); ``fork`` what ``structinit-hf train`` has on Linux.
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
import json, multiprocessing, os, sys, tempfile, time
from pathlib import Path

def age():  # seconds since this process started (the kernel's record of it)
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")

if __name__ == "__main__":
    data, workers, method = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    multiprocessing.set_start_method(method)
    import torch
    torch.set_num_threads(1)
    from structinit_hf.train import TrainingSettings
    from structinit_hf.train._internal import setup_run
    imported = age()
    with tempfile.TemporaryDirectory() as out:
        settings = TrainingSettings().with_flags(
            model="vit_tiny_impulse3", model_kwargs={"img_size": 32, "patch_size": 2, "depth": 12}, dataset=data,
            output_dir=out + "/run", epochs=10, warmup_epochs=0.5, batch_size=512, workers=workers, val_split=0.02,
            compile=False, mixed_precision="no",
        )
        run = setup_run(settings)
        set_up = age()
        next(iter(run.train_loader))
        first = age()
        next(iter(run.val_loader))
        val = age()
    print(json.dumps({"imports_s": imported, "setup_s": set_up - imported, "first_batch_s": first - set_up,
                      "to_first_batch_s": first, "first_val_batch_s": val - first}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\\n")[0], allow_abbrev=False)
    parser.add_argument("--data", required=True)
    parser.add_argument("--workers", type=int, nargs="+", default=[5])
    parser.add_argument("--start-methods", nargs="+", default=["spawn"], choices=["spawn", "fork", "forkserver"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", nargs="+", default=["."], help="checkouts to time (their structinit_hf)")
    args = parser.parse_args()
    data = str(Path(args.data).resolve())
    times: dict[tuple[str, int, str], list[dict]] = {
        (tree, w, m): [] for tree in args.trees for m in args.start_methods for w in args.workers
    }
    for round_index in range(args.rounds):
        cases = list(times) if round_index % 2 == 0 else list(reversed(times))
        for tree, workers, method in cases:
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "HF_HUB_OFFLINE": "1"}
            done = subprocess.run(
                [sys.executable, "-c", ONE_RUN, data, str(workers), method], env=env, capture_output=True, text=True,
                cwd=tempfile.gettempdir(),
            )  # fmt: skip
            if done.returncode != 0:
                sys.exit(f"{tree}, {workers} workers, {method}: {done.stderr.strip().splitlines()[-1]}")
            times[tree, workers, method].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {round_index + 1}: {tree}, {workers} workers, {method}: {times[tree, workers, method][-1]}",
                  file=sys.stderr)  # fmt: skip
    print(f"`python {' '.join(sys.argv)}` ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end)")
    print()
    print(
        "| tree | loader workers | start method | process start to first batch, s (each round) | imports, s | "
        "setup_run, s | first batch, s | first validation batch, s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (tree, workers, method), rounds in times.items():
        total = ", ".join(f"{r['to_first_batch_s']:.1f}" for r in rounds)
        median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        print(
            f"| `{tree}` | {workers} | {method} | {total} | {median['imports_s']:.1f} | {median['setup_s']:.1f} | "
            f"{median['first_batch_s']:.1f} | {median['first_val_batch_s']:.1f} |"
        )


if __name__ == "__main__":
    main()
