"""Where `structinit-hf compare`'s time goes on a CPU, and what each speed setting does to its training step.

    python study/cpu_step.py profile --mixed-precision no --steps 100    # as before: fp32, fused attention
    python study/cpu_step.py profile --mixed-precision bf16 --steps 100  # compare's default on a CPU with native bf16
    python study/cpu_step.py variants --rounds 3 --steps 8
    python study/cpu_step.py workers --rounds 2 --epochs 3

``profile`` runs `compare`'s default recipe (the CPU proxy, 2,500 images of the embedded CIFAR-10 sample, 10 epochs,
batch 256, 2 torch threads, no loader workers) for the arms given and splits its wall clock by phase from what each
run records per epoch in ``metrics.jsonl`` (training, waiting for batches, evaluating) and its wall time: the step
(forward, backward, optimizer), the input pipeline (inline), the evaluation after every epoch, the rest of each run
(set-up: data, model, init; the final evaluation; checkpoints), and what the comparison spent around its runs
(`study/benchmark_compare.sh` adds the process's start-up). Then torch's profiler splits the step itself
over ``--steps`` steps after warm-up (the same model and precision on a fixed batch): matmuls, attention, norms,
activations, the loss, copies and element-wise ops, the optimizer, other operators, and the Python and dispatch time
between them. ``profile-<precision>.json`` holds the seconds and shares.

``variants`` times the step alone (forward, loss, backward, gradient clipping, AdamW step, zero_grad on a fixed batch of
256 random images) in one process, each variant once per round, rounds interleaved with their order reversed every
other round: fp32 and bf16 autocast, torch's fused attention kernel or timm's unfused one, AdamW as timm creates it
(torch's default loop), ``foreach`` or ``fused``, ``torch.compile`` (its first step, compilation included, apart), and
1 or 2 torch threads. ``variants.json`` holds the median milliseconds per step of each and its speed against before.

``workers`` trains `compare`'s impulse3 run with 0 and with 1 loader worker (the other of the two cores' work beside
the step's 2 threads), rounds interleaved: ``workers.json`` holds the seconds per epoch and the wait for batches.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

import timm
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from structinit_hf.benchmark import CompareSettings, compare
from structinit_hf.benchmark.arms import select_arms
from structinit_hf.benchmark.compare_inits import _profile as compare_profile
from structinit_hf.benchmark.compare_settings import PROFILE, THREADS
from structinit_hf.benchmark.runs import run_settings
from structinit_hf.init.common import unfuse_attention
from structinit_hf.train import run
from structinit_hf.train._internal import library_versions, numerics

# operator kinds of the training step, by the first pattern an operator's name contains
OPERATOR_KINDS = {
    "loss": ("cross_entropy", "log_softmax", "nll_loss"),
    "attention": ("scaled_dot_product", "softmax", "bmm"),
    "matmuls": ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "convolution"),
    "norms": ("layer_norm",),
    "activations": ("gelu",),
    "copies and element-wise": ("copy_", "aten::add", "aten::mul", "aten::cat", "aten::sum", "fill_", "_to_copy"),
}


def _operator_kind(name: str) -> str:
    return next((kind for kind, patterns in OPERATOR_KINDS.items() if any(p in name for p in patterns)), "other ops")


def step_operators(mixed_precision: str, steps: int) -> dict[str, float]:
    """Milliseconds per step by operator kind, from torch's profiler over ``steps`` steps (after 3 of warm-up) of the
    proxy's step as `compare` trains it at that precision (:func:`_proxy_step`), the rest of the step's wall clock as
    Python and dispatch."""
    bf16 = mixed_precision == "bf16"
    one_step = _proxy_step(bf16=bf16, fused=not bf16, adamw={}, compiled=False, threads=THREADS)
    for _ in range(3):
        one_step()
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        start = time.perf_counter()
        for _ in range(steps):
            one_step()
        wall_ms = (time.perf_counter() - start) * 1e3
    kinds: dict[str, float] = defaultdict(float)
    for event in profiler.events():  # each operator's own time (nothing counted twice), by the optimizer or not
        parents, parent = [], event.cpu_parent
        while parent is not None:
            parents.append(parent.name)
            parent = parent.cpu_parent
        if event.name.startswith("aten::"):
            optimizer = any(name.startswith("Optimizer.") for name in parents)
            kind = "optimizer (AdamW's step, zero_grad)" if optimizer else _operator_kind(event.name)
            kinds[kind] += event.self_cpu_time_total / 1e3 / steps
    kinds["Python and dispatch"] = max(wall_ms / steps - sum(kinds.values()), 0.0)
    return {kind: round(value, 1) for kind, value in sorted(kinds.items(), key=lambda item: -item[1])}


def phases(out: Path, compare_wall_s: float) -> dict[str, float]:
    """Seconds of a comparison by phase, from what its runs record per epoch: training (``train_s``) less the wait for
    batches (``data_wait_s``: the input pipeline, inline without workers), the evaluation after every epoch
    (``val_s``); the rest is each run's set-up (data, model, init), final evaluation, export and checkpoints, and what
    `compare` does around its runs."""
    seconds: dict[str, float] = defaultdict(float)
    for metrics in sorted(out.glob("*/metrics.jsonl")):
        epochs = [json.loads(line) for line in metrics.read_text().splitlines()]
        train, waited, val = (sum(epoch[key] for epoch in epochs) for key in ("train_s", "data_wait_s", "val_s"))
        seconds["step: forward, backward, optimizer"] += train - waited
        seconds["input pipeline (augmentation, collation; inline)"] += waited
        seconds["evaluation after every epoch"] += val
    seconds["set-up, init, final evaluation, export, checkpoints, the table"] = compare_wall_s - sum(seconds.values())
    return dict(seconds)


def run_profile(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        settings = CompareSettings(arms=tuple(args.arms), mixed_precision=args.mixed_precision, output_dir=Path(out))
        result = compare(settings)
        wall_s = time.perf_counter() - start
        seconds = phases(Path(out), wall_s)
    ordered = sorted(seconds.items(), key=lambda item: -item[1])
    record = {
        "command": " ".join(["python", *sys.argv]),
        "mixed_precision": args.mixed_precision,
        "arms": args.arms,
        "compare_wall_s": round(wall_s, 1),
        "phases_s": {key: round(value, 1) for key, value in ordered},
        "phase_shares": {key: round(value / wall_s, 3) for key, value in ordered},
        "step_profile_steps": args.steps,
        "step_ms_by_operator": step_operators(args.mixed_precision, args.steps),
        "top1": result.top1,
        "load_average": os.getloadavg(),
        "numerics": numerics(),
        "versions": library_versions(),
    }
    _write(args.out / f"profile-{args.mixed_precision}.json", record)


VARIANTS = {  # name: (bf16 autocast, fused attention, AdamW option, compiled, threads)
    "fp32, fused attention, AdamW loop (before)": (False, True, {}, False, 2),
    "fp32, unfused attention": (False, False, {}, False, 2),
    "fp32, fused attention, foreach AdamW": (False, True, {"foreach": True}, False, 2),
    "fp32, fused attention, fused AdamW": (False, True, {"fused": True}, False, 2),
    "bf16, fused attention": (True, True, {}, False, 2),
    "bf16, unfused attention (compare's default where bf16 is native)": (True, False, {}, False, 2),
    "bf16, unfused attention, fused AdamW": (True, False, {"fused": True}, False, 2),
    "bf16, unfused attention, compiled": (True, False, {}, True, 2),
    "bf16, unfused attention, 1 thread": (True, False, {}, False, 1),
}


def _proxy_step(bf16: bool, fused: bool, adamw: dict, compiled: bool, threads: int):
    """One training step of a fresh proxy model on a fixed batch, as a function (``threads`` torch threads set)."""
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_impulse3", num_classes=10, **PROFILE.architecture)
    if not fused:
        unfuse_attention(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, **adamw)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    network = torch.compile(model) if compiled else model
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(256, 3, *[PROFILE.architecture["img_size"]] * 2, generator=generator)
    labels = torch.randint(0, 10, (256,), generator=generator)

    def one_step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = criterion(network(images), labels)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 3.0)
        optimizer.step()
        optimizer.zero_grad()

    torch.set_num_threads(threads)
    return one_step


def _step_timer(*variant, steps: int) -> tuple[float, float]:
    """The median seconds of ``steps`` steps of a variant (after two), and what its first step took (compiling)."""
    one_step = _proxy_step(*variant)
    start = time.perf_counter()
    one_step()
    first_s = time.perf_counter() - start
    one_step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        one_step()
        times.append(time.perf_counter() - start)
    return statistics.median(times), first_s


def run_variants(args: argparse.Namespace) -> None:
    medians: dict[str, list[float]] = defaultdict(list)
    first_step_s: dict[str, list[float]] = defaultdict(list)
    names = list(VARIANTS)
    for round_index in range(args.rounds):
        for name in names if round_index % 2 == 0 else reversed(names):
            median_s, first_s = _step_timer(*VARIANTS[name], steps=args.steps)
            medians[name].append(median_s * 1e3)
            first_step_s[name].append(first_s)
            print(f"round {round_index + 1}/{args.rounds}  {name:70s} {median_s * 1e3:7.1f} ms", flush=True)
    before = statistics.median(medians[names[0]])
    record = {
        "command": " ".join(["python", *sys.argv]),
        "median_step_ms": {name: round(statistics.median(values), 1) for name, values in medians.items()},
        "speed_vs_before": {name: round(before / statistics.median(values), 2) for name, values in medians.items()},
        "step_ms_per_round": {name: [round(value, 1) for value in values] for name, values in medians.items()},
        "first_step_s_per_round": {
            name: [round(value, 2) for value in values] for name, values in first_step_s.items()
        },
        "load_average": os.getloadavg(),
        "numerics": numerics(),
        "versions": library_versions(),
    }
    _write(args.out / "variants.json", record)


def run_workers(args: argparse.Namespace) -> None:
    """`compare`'s impulse3 run (its default recipe, precision and threads) with 0 and with 1 loader worker, rounds
    interleaved: seconds per epoch, and of them waiting for batches (``metrics.jsonl``), after the first epoch."""
    settings = CompareSettings()
    profile = compare_profile(replace(settings, lr=settings.resolved_lr()))
    arm = select_arms(["impulse3"])[0]
    epoch_s: dict[int, list[float]] = defaultdict(list)
    waited_s: dict[int, list[float]] = defaultdict(list)
    torch.set_num_threads(settings.threads)
    for round_index in range(args.rounds):
        for workers in (0, 1) if round_index % 2 == 0 else (1, 0):
            with tempfile.TemporaryDirectory() as out:
                run_dir = Path(out) / "run"
                training = run_settings(profile, arm, 0, profile.datasets["data"], run_dir)
                run(training.with_flags(workers=workers, epochs=args.epochs))
                epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]
            epoch_s[workers].append(statistics.median(epoch["train_s"] for epoch in epochs))
            waited_s[workers].append(statistics.median(epoch["data_wait_s"] for epoch in epochs))
            print(f"round {round_index + 1}/{args.rounds}  {workers} workers  {epoch_s[workers][-1]:.2f} s/epoch "
                  f"(waiting {waited_s[workers][-1]:.2f} s)", flush=True)  # fmt: skip
    record = {
        "command": " ".join(["python", *sys.argv]),
        "median_epoch_s": {workers: round(statistics.median(values), 2) for workers, values in epoch_s.items()},
        "median_data_wait_s": {workers: round(statistics.median(values), 2) for workers, values in waited_s.items()},
        "epoch_s_per_round": epoch_s,
        "load_average": os.getloadavg(),
        "versions": library_versions(),
    }
    _write(args.out / "workers.json", record)


def _write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({key: record[key] for key in record if key not in ("numerics", "versions")}, indent=2))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("what", choices=("profile", "variants", "workers"))
    parser.add_argument("--out", type=Path, default=Path("study/records/training/cpu-step"))
    parser.add_argument("--mixed-precision", choices=("no", "bf16"), default="bf16", help="profile: the runs' autocast")
    parser.add_argument("--arms", nargs="+", default=["default", "mimetic", "impulse3"], help="profile: the arms run")
    parser.add_argument("--rounds", type=int, default=3, help="variants, workers: rounds")
    parser.add_argument("--epochs", type=int, default=3, help="workers: epochs of each run (the first not timed)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per variant and round; profile: profiled")
    return parser


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    flags = parser()
    arguments = flags.parse_args()
    if arguments.what == "workers" and arguments.epochs < 2:
        flags.error(f"--epochs {arguments.epochs}: the first epoch is not timed; allowed: 2 or more")
    {"profile": run_profile, "variants": run_variants, "workers": run_workers}[arguments.what](arguments)
