"""What a preemption costs a `train` run: a signal at a random moment, then the same command with `--resume auto`;
per-epoch checkpoints against step and minute checkpoints, a graceful stop (SIGTERM) against a hard one (SIGKILL: a
grace period that ran out, an OOM kill, a lost node).

    python study/preemption_cost.py --trials 3 --out study/records/preemption

For each checkpoint policy: one uninterrupted run (its wall time is the baseline, its checkpoints' cost included),
then per trial and signal a run stopped at a moment drawn uniformly from 25-75% of the baseline, and its resume.
``redone_s`` is the training the resume repeats: from the newest checkpoint written before the signal (its
``trainer_state.json`` time; the process start if none) to the signal, 0 where the signal itself wrote the checkpoint;
``extra_s`` is the stopped run plus its resume less the baseline (the redone training, a second setup, the stop).
Every resumed run must end with the baseline's weights, bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from safetensors.torch import load_file

# a tiny run with long epochs for its size: 2,048 of the embedded CIFAR-10 sample's images, 32 steps an epoch
# (about 10 s each on 2 shared cores) beside about 15 s of setup
TRAIN = [
    sys.executable, "-m", "structinit_hf", "train", "--model", "vit_tiny_impulse3", "--model-kwargs", "depth=8",
    "img_size=16", "patch_size=2", "embed_dim=48", "--dataset", "cifar10-sample", "--max-train-samples", "2048",
    "--batch-size", "64", "--epochs", "3", "--warmup-epochs", "1", "--aa", "none", "--val-split", "0.1",
    "--max-eval-samples", "200", "--keep-checkpoints", "2", "--resume", "auto",
]  # fmt: skip

POLICIES = {
    "per-epoch": [],
    "every 8 steps": ["--checkpoint-steps", "8"],
    "every 0.1 min": ["--checkpoint-minutes", "0.1"],
}

SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def newest_checkpoint_before(folder: Path, moment: float) -> tuple[str | None, float | None]:
    """The newest complete checkpoint written before ``moment`` (epoch seconds) and when it was written."""
    written = [
        (state.stat().st_mtime, state.parent.name)
        for state in (folder / "checkpoints").glob("epoch_*/trainer_state.json")
        if state.stat().st_mtime <= moment
    ]
    return (max(written)[1], max(written)[0]) if written else (None, None)


def trial(command: list[str], folder: Path, number: int, moment: float, env: dict[str, str]) -> dict | None:
    start_wall, start = time.time(), time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        process.wait(timeout=moment)
        return None  # it finished first (the machine was faster than for the baseline): the caller draws again
    except subprocess.TimeoutExpired:
        signalled = time.time()
        process.send_signal(number)
    stderr = process.communicate()[1]
    stopped = time.perf_counter()
    first = stopped - start
    if number == signal.SIGTERM:  # the stop wrote its checkpoint at the signal's step: nothing to redo
        assert process.returncode == 75, stderr[-2000:]
        line = stderr.strip().splitlines()[-1]  # stopped by SIGTERM ...: saved <checkpoint>; resume with: ...
        redone, checkpoint = 0.0, line.split("saved ")[1].split(";")[0] if "saved " in line else None
    else:
        checkpoint, written = newest_checkpoint_before(folder, signalled)
        redone = signalled - (written if written is not None else start_wall)
    resume = timed(command, env)
    return {
        "signal_at_s": round(moment, 1),
        "stop_s": round(first - moment, 2),  # signal to exit
        "resumed_from": Path(checkpoint).name if checkpoint else None,
        "redone_s": round(redone, 1),
        "resume_s": round(resume, 1),
        "extra_s": None,  # filled in against the baseline
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--trials", type=int, default=3, help="per policy and signal")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/preemption_cost"))
    parser.add_argument("--seed", type=int, default=0, help="draws the signal moments")
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json and results.md")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    shutil.rmtree(args.work_dir, ignore_errors=True)
    draws = random.Random(args.seed)
    policies = {}
    for policy, flags in POLICIES.items():
        clean = args.work_dir / policy.replace(" ", "-") / "clean"
        baseline = timed([*TRAIN, *flags, "--output-dir", str(clean)], env)
        expected = load_file(clean / "final" / "model.safetensors")
        reach = baseline
        trials = []
        for name, number in SIGNALS.items():
            for index in range(args.trials):
                folder = args.work_dir / policy.replace(" ", "-") / f"{name}-{index}"
                command = [*TRAIN, *flags, "--output-dir", str(folder)]
                result = None
                while result is None:  # a moment the run reaches: 25-75% of the baseline, less after a miss
                    shutil.rmtree(folder, ignore_errors=True)
                    result = trial(command, folder, number, draws.uniform(0.25, 0.75) * reach, env)
                    reach *= 1 if result is not None else 0.8
                got = load_file(folder / "final" / "model.safetensors")
                result["same_weights"] = all(got[key].equal(value) for key, value in expected.items())
                result["extra_s"] = round(result["signal_at_s"] + result["stop_s"] + result["resume_s"] - baseline, 1)
                trials.append({"signal": name, **result})
                print(json.dumps({"policy": policy, **trials[-1]}), flush=True)
        policies[policy] = {"flags": flags, "uninterrupted_s": round(baseline, 1), "trials": trials}
    record = {
        "command": " ".join(["python", "study/preemption_cost.py", *sys.argv[1:]]),
        "train": " ".join(["structinit-hf", "train", *TRAIN[4:]]),
        "policies": policies,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(record, indent=1) + "\n")
    (args.out / "results.md").write_text(render(record))


def render(record: dict) -> str:
    lines = [
        "# What a preemption costs a `train` run",
        "",
        f"`{record['command']}`; each run: `{record['train']}` (2 cores shared with other work, one torch thread).",
        "Means over the trials; `redone` is training repeated after the resume, `extra` the stopped run plus its",
        "resume less the uninterrupted run (a second setup included).",
        "",
        "| checkpoints | uninterrupted (s) | signal | redone (s) | extra wall (s) | stop (s) | same weights |",
        "|---|---|---|---|---|---|---|",
    ]
    for policy, entry in record["policies"].items():
        for name in SIGNALS:
            trials = [trial for trial in entry["trials"] if trial["signal"] == name]
            redone, extra, stop = (
                statistics.mean(trial[key] for trial in trials) for key in ("redone_s", "extra_s", "stop_s")
            )
            same = sum(trial["same_weights"] for trial in trials)
            lines.append(
                f"| {policy} | {entry['uninterrupted_s']:.1f} | {name} | {redone:.1f} | {extra:.1f} | {stop:.2f} "
                f"| {same}/{len(trials)} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
