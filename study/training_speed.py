"""Training throughput of scripts/train.py against a bare PyTorch loop, in one process, on this machine's device.

For each precision mode (``fp32``, ``bf16``, ``bf16_compiled``; by default all three on a GPU, ``fp32`` on
CPU), interleaved round by round (the order flips every round) so that a busy shared machine slows the
arms alike:

- ``bare``: the model, AdamW, label-smoothed cross-entropy and gradient clipping on pre-made tensors
  already on the device; autocast and ``torch.compile`` as the mode says.  Images/s over ``steps`` steps
  after three untimed steps (the compilation, and CUDA graphs' recording, for a compiled mode).
- ``script``: :func:`structinit_hf.train.training.loop.train` itself with ``--mixed-precision`` / ``--compile`` set by
  the mode and every other flag at its default (workers, pinned memory, input pipeline, the full
  augmentation recipe): two epochs of ``steps`` global batches of real images, images/s of the second
  epoch as its ``metrics.jsonl`` reports it (data loading included, compilation and warm-up excluded).

plus the input pipeline alone (decode-once tensors and timm's PIL path), one epoch of the training split
through the training DataLoader after a warm-up epoch.  ``results.json`` holds, per device,
``ratio_to_bare.<mode>`` (median over rounds of script / bare).

The entry point is ``study/benchmark_training.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from accelerate.state import AcceleratorState, GradientState
from timm.optim import create_optimizer_v2
from torch import nn

from structinit_hf.init.common import unfuse_attention
from structinit_hf.train import TrainingSettings, run
from structinit_hf.train._internal import (
    KeyValueAction,
    dataset_source,
    device_defaults,
    library_versions,
    load_image_classification,
    load_model,
    model_data_config,
    train_dataloader,
    training_datasets,
)

__all__ = ["MODES", "measure_throughput", "throughput_parser"]

WARMUP_STEPS = 3  # untimed steps of the bare loop before its timed ones

# (precision, compile): True is torch.compile's default mode, as train.py compiles; a mode's name (CUDA graphs,
# autotuned kernels) is timed on the bare loop alone, the speed a train.py option for it could buy
MODES: dict[str, tuple[str, bool | str]] = {
    "fp32": ("no", False),
    "bf16": ("bf16", False),
    "bf16_compiled": ("bf16", True),
    "fp32_compiled": ("no", True),
    "bf16_cudagraphs": ("bf16", "reduce-overhead"),
    "bf16_autotuned": ("bf16", "max-autotune-no-cudagraphs"),
}


def _train_defaults() -> TrainingSettings:
    """The settings of ``scripts/train.py`` with no flag given."""
    return TrainingSettings()


def script_arm(args: argparse.Namespace, mode: str) -> float:
    precision, compiled = MODES[mode]
    with tempfile.TemporaryDirectory() as out:
        settings = TrainingSettings().with_flags(
            model=args.model, model_kwargs=args.model_kwargs, dataset=args.data, output_dir=out, epochs=2,
            warmup_epochs=0.0, batch_size=args.batch_size, max_train_samples=args.batch_size * args.steps,
            max_eval_samples=args.batch_size, val_split=0.0, mixed_precision=precision, compile=compiled,
        )  # fmt: skip
        # accelerate keeps one state per process; forget the previous arm's precision (as its own tests do)
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        run(settings)
        return json.loads((Path(out) / "metrics.jsonl").read_text().splitlines()[1])["images_per_sec"]


def bare_arm(args: argparse.Namespace, mode: str, device: torch.device) -> float:
    precision, compiled = MODES[mode]
    model = load_model(args.model, num_classes=10, model_kwargs=args.model_kwargs).model
    model.to(device).train()
    if device.type == "cpu" and precision == "bf16":  # as train.py trains bf16 on a CPU (DeviceDefaults)
        unfuse_attention(model)
    optimizer = create_optimizer_v2(model, opt="adamw", lr=1e-3, weight_decay=0.01, eps=1e-3)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    forward = torch.compile(model, mode=None if compiled is True else compiled) if compiled else model
    size = model_data_config(model)["input_size"]
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(args.steps + 1, args.batch_size, *size, generator=generator).to(device)
    labels = torch.randint(0, 10, (args.steps + 1, args.batch_size), generator=generator).to(device)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = criterion(forward(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 3.0)
        optimizer.step()
        optimizer.zero_grad()

    for _ in range(WARMUP_STEPS):  # compilation; CUDA graphs are recorded on a later call than the first
        step(images[0], labels[0])
    _synchronize(device)
    start = time.perf_counter()
    for x, y in zip(images[1:], labels[1:], strict=True):
        step(x, y)
    _synchronize(device)
    return args.batch_size * args.steps / (time.perf_counter() - start)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def input_pipeline(args: argparse.Namespace, pipeline: str, workers: int) -> float:
    """Augmented training images per second out of the training DataLoader alone (one epoch after a warm-up)."""
    data = load_image_classification(args.data, val_split=0.0, max_eval_samples=1)
    model = load_model(args.model, num_classes=data.num_classes, model_kwargs=args.model_kwargs).model
    augmentation = {**_train_defaults().recipe.augmentation(), "re_prob": 0.0}
    images = training_datasets(data, model_data_config(model), augmentation, pipeline=pipeline, workers=workers)[0]
    loader = train_dataloader(images, args.batch_size, args.batch_size, seed=0, workers=workers)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        start, count = time.perf_counter(), 0
        for batch, _ in loader:
            count += batch.shape[0]
    return count / (time.perf_counter() - start)


def throughput_parser() -> argparse.ArgumentParser:
    """The flags of ``study/benchmark_training.py``."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description="Training throughput of scripts/train.py against a bare PyTorch loop, in one process, on this "
        "machine's device.",
    )
    parser.add_argument(
        "--data",
        type=dataset_source,
        required=True,
        help="the training images (a dataset folder or Hub id) with at least --batch-size x --steps rows",
    )
    parser.add_argument("--out", type=Path, default=Path("study/records/training"))
    parser.add_argument("--model", default="vit_tiny_impulse3")
    parser.add_argument("--model-kwargs", nargs="*", default={}, action=KeyValueAction, help="e.g. depth=3")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps per arm and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=None, help="default: all on GPU, fp32 on CPU")
    parser.add_argument("--bare-only", action="store_true", help="time the bare loop alone (no train.py arms)")
    parser.add_argument("--workers", type=int, default=None, help="input-pipeline workers (default: train.py's)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument(
        "--pipelines",
        nargs="*",
        choices=("tensor", "pil"),
        default=["tensor", "pil"],
        help="input pipelines timed alone after the arms (default: both; none with no value)",
    )
    return parser


def measure_throughput(args: argparse.Namespace) -> None:
    """Run every arm ``args.rounds`` times, then the input pipeline alone; print the result and merge it into
    ``args.out/results.json`` under this device's kind."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)  # on a shared CPU, more threads than free cores stall each other
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    modes = args.modes or (["fp32", "bf16", "bf16_compiled"] if device.type == "cuda" else ["fp32"])
    workers = args.workers if args.workers is not None else device_defaults(_train_defaults().speed, device).workers
    arms = {}
    scripted = [mode for mode in modes if isinstance(MODES[mode][1], bool)]  # train.py has these modes
    for mode in modes:  # neighbours are the pairs compared
        arms[f"bare/{mode}"] = lambda mode=mode: bare_arm(args, mode, device)
        if mode in scripted and not args.bare_only:
            arms[f"script/{mode}"] = lambda mode=mode: script_arm(args, mode)
    throughput: dict[str, list[float]] = {name: [] for name in arms}
    load_before, start = os.getloadavg(), time.perf_counter()
    for round_index in range(args.rounds):
        for name in arms if round_index % 2 == 0 else reversed(arms):
            throughput[name].append(arms[name]())
            print(f"round {round_index + 1}/{args.rounds}  {name:24s} {throughput[name][-1]:9.1f} img/s", flush=True)
    load_after = os.getloadavg()
    pipelines = {f"{p} ({workers} workers)": input_pipeline(args, p, workers) for p in args.pipelines}

    def ratio(mode: str) -> float:
        pairs = zip(throughput[f"script/{mode}"], throughput[f"bare/{mode}"], strict=True)
        return statistics.median(script / bare for script, bare in pairs)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({os.cpu_count()} cores)"
    result = {
        "device": name,
        "median_images_per_sec": {arm: statistics.median(values) for arm, values in throughput.items()},
        "images_per_sec": throughput,
        "ratio_to_bare": {mode: ratio(mode) for mode in scripted if not args.bare_only},
        "input_pipeline_images_per_sec": pipelines,
        "load_average_before_after": [load_before[0], load_after[0]],
        "wall_time_s": round(time.perf_counter() - start, 1),
        "setting": {
            "model": args.model, "model_kwargs": args.model_kwargs, "batch_size": args.batch_size,
            "steps": args.steps, "rounds": args.rounds, "data": args.data, "platform": platform.platform(),
            "torch_threads": torch.get_num_threads(), "command": " ".join(["python", *sys.argv]),
        },
        "versions": library_versions(),
    }  # fmt: skip
    results_file = args.out / "results.json"
    report = json.loads(results_file.read_text()) if results_file.is_file() else {}
    report = {"devices": {**report.get("devices", {}), device.type: result}}  # one entry per device kind
    args.out.mkdir(parents=True, exist_ok=True)
    results_file.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(result, indent=2))
