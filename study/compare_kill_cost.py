"""What a kill -9 at a random moment costs a `compare`: the time of the killed attempt plus its rerun, minus an
uninterrupted comparison's, measured side by side.

    python study/compare_kill_cost.py --trials 3 --out study/records/compare/kill_cost.json

Each trial kills the whole command (its process group) at a moment drawn uniformly from 10-90% of the uninterrupted
time, reruns the same command into the same --output-dir, and checks that the table is the uninterrupted one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

COMPARE = [sys.executable, "-m", "structinit_hf", "compare"]


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def table(folder: Path) -> str:
    return "\n".join(line for line in (folder / "compare.md").read_text().splitlines() if line.startswith("|"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument(
        "--epochs", type=int, default=3, help="per run (compare's default is 10; an epoch costs the same)"
    )
    parser.add_argument("--work-dir", type=Path, default=Path("runs/kill_cost"))
    parser.add_argument("--seed", type=int, default=0, help="draws the kill moments")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [*COMPARE, "--epochs", str(args.epochs)]
    shutil.rmtree(args.work_dir, ignore_errors=True)
    clean = args.work_dir / "clean"
    uninterrupted = timed([*command, "--output-dir", str(clean)], env)
    draws = random.Random(args.seed)
    trials = []
    for trial in range(args.trials):
        folder = args.work_dir / f"killed-{trial}"
        moment = draws.uniform(0.1, 0.9) * uninterrupted
        start = time.perf_counter()
        process = subprocess.Popen(
            [*command, "--output-dir", str(folder)], env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            process.wait(timeout=moment)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        first = time.perf_counter() - start
        finished_before = sorted(path.parent.name for path in folder.glob("*-seed*/results.json"))
        rerun = timed([*command, "--output-dir", str(folder)], env)
        trials.append(
            {
                "killed_at_s": round(moment, 1),
                "runs_finished_before_the_kill": finished_before,
                "rerun_s": round(rerun, 1),
                "lost_s": round(first + rerun - uninterrupted, 1),
                "same_table": table(folder) == table(clean),
            }
        )
        print(json.dumps(trials[-1]), flush=True)
    record = {
        "command": " ".join(["python", "study/compare_kill_cost.py", *sys.argv[1:]]),
        "compare": " ".join(["structinit-hf", "compare", "--epochs", str(args.epochs)]),
        "uninterrupted_s": round(uninterrupted, 1),
        "trials": trials,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
