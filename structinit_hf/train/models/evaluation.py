"""Score a classifier with Accelerate: :func:`evaluate` (``structinit-hf evaluate``, ``scripts/evaluate.py``) scores
the model that :class:`~.settings.EvaluationSettings` name and writes its record; :func:`score` is the scoring loop
training validates with.

Models come from :mod:`structinit_hf.train.models.loading` (any model source, prepared its own way). Scoring gathers
predictions across processes with ``accelerator.gather_for_metrics``, so the counts are exact on any number
of processes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from dataclasses import fields
from importlib import metadata
from pathlib import Path
from typing import Any

import accelerate
import datasets
import timm
import torch
import transformers
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from torch import nn
from torch.utils.data import DataLoader

from ...atomic import write_json
from ...init.common import unfuse_attention
from ..cli.errors import UsageError
from ..data.dataloaders import TransformedImages, eval_dataloader
from ..data.images import rgb_image
from ..data.sources import find_columns, load_raw_dataset
from ..data.splits import ImageClassificationData, load_image_classification
from ..data.tensor_data import decode_split
from ..settings import EvaluationRecord, EvaluationSettings
from .kwargs import check_model_kwargs
from .loading import (
    check_label_names,
    check_model_source,
    eval_transform,
    load_model,
    missing_folder,
    num_outputs,
)

__all__ = [
    "EVALUATION_FILE",
    "builds_untrained",
    "evaluate",
    "fused_attention",
    "library_versions",
    "numerics",
    "peak_gpu_memory_mb",
    "results_record",
    "run_evaluation",
    "score",
]


@torch.no_grad()
def score(model: nn.Module, loader: DataLoader, accelerator: Accelerator) -> dict[str, float | int]:
    """Top-1 / top-5 accuracy (percent) and sample count of ``model`` over a prepared ``loader``."""
    model.eval()
    correct1 = correct5 = total = torch.zeros((), dtype=torch.long, device=accelerator.device)
    for images, labels in loader:
        with accelerator.autocast():
            logits = model(images)
        logits, labels = accelerator.gather_for_metrics((logits, labels))
        top = logits.topk(min(5, logits.shape[1]), dim=1).indices == labels[:, None]
        correct1 = correct1 + top[:, 0].sum()
        correct5 = correct5 + top.any(dim=1).sum()
        total = total + labels.numel()
    total = int(total)
    return {
        "top1": 100.0 * int(correct1) / max(total, 1),
        "top5": 100.0 * int(correct5) / max(total, 1),
        "num_samples": total,
    }


def fused_attention(precision: str, device: torch.device) -> bool:
    """Whether a model at autocast ``precision`` on ``device`` computes attention with torch's fused kernel: not bf16
    on a CPU, where training takes timm's unfused path (faster there: docs/benchmarks.md, "The CPU step"). Scoring
    takes the same path, so ``evaluate`` of a run's ``final/`` at the run's precision gives the top-1 the run (or
    ``compare``'s table) printed: the two paths round differently in bf16, enough to flip a prediction whose two best
    logits are close."""
    return not (device.type == "cpu" and precision == "bf16")


def forget_other_precision(precision: str) -> None:
    """accelerate keeps one ``AcceleratorState`` per process and refuses an ``Accelerator`` of another precision; a
    run that follows one of another precision in this process (a notebook's ``train`` then ``compare``) starts from
    a fresh state, as accelerate's own tests do. The distributed state (``PartialState``) stays. The state is shared:
    call it only where no earlier run's ``Accelerator`` is still in use."""
    recorded = AcceleratorState._shared_state.get("_mixed_precision")
    if recorded is not None and recorded != precision:
        AcceleratorState._reset_state()


def peak_gpu_memory_mb(device: torch.device) -> float | None:
    """The most GPU memory this process's allocator held on ``device`` (what another run could not use); CPU: None."""
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_reserved(device) / 2**20, 1)


def library_versions() -> dict[str, str]:
    """The versions a result depends on, recorded in every ``results.json``."""
    from ... import __version__

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
        "datasets": datasets.__version__,
        **{name: metadata.version(name) for name in ("torchvision", "numpy", "pillow")},  # decode, crop, RNG
        "structinit_hf": __version__,
    }


# environment variables that pick the CPU code path of ATen, MKL or oneDNN (each changes the numbers)
CODE_PATH_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


# CPU features MKL and oneDNN pick kernels by, beyond ATen's capability (AVX512 covers several generations)
KERNEL_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile")


def _cpu() -> str:
    """``family 6 model 167; avx2 avx512f ... amx_tile``: the CPU generation and the kernel features it has (Linux's
    ``/proc/cpuinfo``), else what ``platform`` says."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split("\n\n")[0]
    except OSError:
        return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    features = [name for name in KERNEL_FEATURES if name in fields.get("flags", "").split()]
    return f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')}; {' '.join(features) or 'none'}"


def numerics() -> dict[str, Any]:
    """What changes a result's floating-point numbers besides the versions, recorded in every ``results.json``:
    torch's intra-op thread count (it splits reductions, so it orders their sums), the CPU instruction set ATen
    dispatches to, the CPU generation and features MKL and oneDNN choose their kernels by, any variable that
    overrides those choices, the GPU, and torch's deterministic settings ("Reproducing a number" in
    docs/benchmarks.md)."""
    record: dict[str, Any] = {
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu": _cpu(),
        "code_path_variables": {name: os.environ[name] for name in CODE_PATH_VARIABLES if name in os.environ},
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    }
    if torch.cuda.is_available():
        record["gpu"] = torch.cuda.get_device_name()
        record["cudnn"] = {
            "benchmark": torch.backends.cudnn.benchmark,
            "deterministic": torch.backends.cudnn.deterministic,
        }
    return record


def results_record(
    flags: dict[str, Any],
    *,
    init: dict[str, Any],
    split: str,
    label_names: list[str],
    metrics: dict[str, Any],
    epochs: int | None,
    images_seen: int | None,
    wall_time_s: float,
) -> dict[str, Any]:
    """The ``results.json`` record of a run or an evaluation: what was scored, on what, and the command's ``flags``."""
    return {
        "model": flags["model"],
        "model_kwargs": dict(flags["model_kwargs"]),
        "init": init,
        "dataset": flags["dataset"],
        "dataset_config": flags["dataset_config"],
        "split": split,
        "num_classes": len(label_names),
        "label_names": list(label_names),
        "top1": metrics["top1"],
        "top5": metrics["top5"],
        "num_samples": metrics["num_samples"],
        "epochs": epochs,
        "images_seen": images_seen,
        "wall_time_s": round(wall_time_s, 3),
        "args": dict(flags),
        "versions": library_versions(),
        "numerics": numerics(),
    }


EVALUATION_FILE = "evaluation.json"  # the record's name beside the model folder (the default --output)


def builds_untrained(source: str) -> bool:
    """Whether ``--model source`` builds fresh weights: a timm name (no local folder of that name, no ``hf-hub:``)."""
    return not Path(source).expanduser().is_dir() and not source.startswith("hf-hub:") and timm.is_model(source)


def _record_path(settings: EvaluationSettings) -> Path:
    """``--output``, else :data:`EVALUATION_FILE` beside the model folder (a run's ``final/``: in the run folder)."""
    if settings.output is not None:
        return settings.output
    folder = Path(settings.model).expanduser()
    if not folder.is_dir():
        missing = missing_folder(settings.model)  # a mistyped run folder is named as such, not as "no folder beside"
        if missing is not None:
            raise missing
        raise UsageError(
            f"--model {settings.model}: not a local folder, so the record has no folder to go beside; pass --output "
            "FILE"
        )
    return folder.resolve().parent / EVALUATION_FILE


def _check_writable(output: Path) -> None:
    """Refuse, before anything is scored, a record that could not be written: its folder (or the nearest that exists)
    refuses a file, as the OS says (read-only, permissions, a file where a folder should be)."""
    folder = output.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise UsageError(
            f"--output {output}: cannot write there ({folder}: {error.strerror or error}); pass --output FILE in a "
            "writable folder"
        ) from None


def _check_evaluation_args(settings: EvaluationSettings, accelerator: Accelerator) -> None:
    """Refuse, in one line naming the flag, its value and what is allowed, a value ``evaluate.py`` cannot use."""
    if builds_untrained(settings.model) and not settings.allow_untrained:
        raise UsageError(
            f"--model {settings.model}: a timm name builds fresh, untrained weights; pass the trained model (a run's "
            "final/ folder, hf-hub:<repo> or a transformers Hub id), or --allow-untrained to score the untrained "
            "network as a baseline"
        )
    for flag, value, allowed in (
        ("batch-size", settings.batch_size, 1),
        ("max-eval-samples", settings.max_eval_samples, 1),
        ("workers", settings.workers, 0),
    ):
        if value is not None and value < allowed:
            raise UsageError(f"--{flag} {value}: out of range; allowed: an integer >= {allowed}")
    output = Path(settings.output or EVALUATION_FILE)
    if output.name == "results.json" and any((output.parent / name).exists() for name in ("metrics.jsonl", "final")):
        raise UsageError(
            f"--output {output}: that is the training run's own record in {output.parent}; pass another file "
            f"(default: {EVALUATION_FILE} beside the model folder)"
        )
    if accelerator.mixed_precision == "fp16" and accelerator.device.type == "cpu":
        raise UsageError(
            "--mixed-precision fp16: not on a CPU (accelerate runs fp32 there); allowed on CPU: bf16 or no"
        )
    check_model_source(settings.model)
    check_model_kwargs(settings.model_kwargs, settings.model)


def _previous_training(source: str) -> dict[str, Any]:
    results = Path(source).expanduser() / "results.json"
    return json.loads(results.read_text()) if results.is_file() else {}


def _same_dataset(one: str | None, other: str | None) -> bool:
    """Whether two ``--dataset`` values name the same data: the same folder, or the same Hub id."""
    if one is None or other is None:
        return False
    first, second = Path(one).expanduser(), Path(other).expanduser()
    if first.exists() and second.exists():
        return first.resolve() == second.resolve()
    return one == other


def _evaluation_splits(settings: EvaluationSettings, trained: dict[str, Any]) -> dict[str, Any]:
    """``load_image_classification``'s split arguments for ``evaluate``: the flags as given, and where a flag is left
    out, what the run that trained the model did on this dataset (its train split, hold-out fraction and seed), so
    a dataset with no test split is scored on the images that run held out."""
    run_args = trained.get("args") or {}
    same_data = _same_dataset(run_args.get("dataset"), settings.dataset) and (
        run_args.get("dataset_config") == settings.dataset_config
    )
    recorded = run_args if same_data else {}
    splits = dict(
        train_split=settings.train_split or recorded.get("train_split") or "train",
        eval_split=settings.eval_split,
        val_split=(settings.val_split if settings.val_split is not None else recorded.get("val_split")) or 0.0,
        seed=settings.seed if settings.seed is not None else recorded.get("seed", 0),
    )
    run_hold_out = all(recorded.get(key) == splits[key] for key in ("train_split", "val_split", "seed"))
    return {**splits, "trained_on": recorded.get("train_split"), "run_hold_out": run_hold_out}


def _say_what_is_scored(run: EvaluationSettings, data: ImageClassificationData, splits: dict[str, Any], say) -> None:
    """One line when the scored images are a hold-out (which one), or a warning when the model trained on them."""
    if splits["trained_on"] is not None and data.evaluation_split == splits["trained_on"]:
        say(
            f"warning: --eval-split {data.evaluation_split}: {run.model} was trained on this split of "
            f"{run.dataset}; its images were seen in training, so this is not a held-out score"
        )
    elif "held-out" in data.evaluation_split:
        whose = "that the model's own run held out" if splits["run_hold_out"] else "held out"
        say(
            f"scoring the {len(data.evaluation)} images {whose} from {run.dataset} "
            f"(--val-split {splits['val_split']:g} of {splits['train_split']!r}, --seed {splits['seed']})"
        )


def run_evaluation(args: argparse.Namespace) -> dict[str, Any]:
    """``structinit-hf evaluate`` (``scripts/evaluate.py``): :func:`evaluate` on the parsed command line; returns the
    record it wrote."""
    return evaluate(EvaluationSettings(**vars(args))).results


def evaluate(settings: EvaluationSettings) -> EvaluationRecord:
    """Score ``settings.model`` on ``settings.eval_split`` of ``settings.dataset``; write the record (to
    ``settings.output``, else beside the model folder) and return it with where it went::

        from structinit_hf.train import EvaluationSettings, evaluate

        scores = evaluate(EvaluationSettings(model="runs/x/final", dataset="my_images/"))
        print(scores.top1, scores.output)
    """
    forget_other_precision(settings.mixed_precision)
    accelerator = Accelerator(mixed_precision=settings.mixed_precision)
    _check_evaluation_args(settings, accelerator)
    untrained = builds_untrained(settings.model)
    output = _record_path(settings)
    _check_writable(output)
    start = time.perf_counter()
    model, init, _ = load_model(  # built (and its keywords checked) before any data is read
        settings.model, model_kwargs=settings.model_kwargs, trust_remote_code=settings.trust_remote_code
    )
    trained = _previous_training(settings.model)
    splits = _evaluation_splits(settings, trained)
    data = load_image_classification(
        settings.dataset,
        settings.dataset_config,
        train_split=splits["train_split"] if splits["val_split"] else None,
        eval_split=splits["eval_split"],
        val_split=splits["val_split"],
        image_column=settings.image_column,
        label_column=settings.label_column,
        max_eval_samples=settings.max_eval_samples,
        seed=splits["seed"],
    )
    _say_what_is_scored(settings, data, splits, accelerator.print)
    checked = decode_split(  # every image read once before scoring: an unreadable one is named, or skipped
        data.evaluation, data.image_column, data.evaluation_split, workers=settings.workers,
        skip_bad_images=settings.skip_bad_images, keep_pixels=False,
    )  # fmt: skip
    data.evaluation = checked.split
    if checked.skipped:
        accelerator.print(f"--skip-bad-images: skipped {checked.skipped} unreadable image(s) of the scored split")
    if timm.is_model(settings.model) and num_outputs(model) != data.num_classes:  # a new model: a head for this data
        model.reset_classifier(data.num_classes)
    if num_outputs(model) != data.num_classes:
        raise UsageError(
            f"model {settings.model!r} predicts {num_outputs(model)} classes but {settings.dataset!r} has "
            f"{data.num_classes}; pick a checkpoint trained on this dataset"
        )
    check_label_names(model, settings.dataset, data.label_names, settings.allow_new_label_names)
    images = TransformedImages(data.evaluation, data.image_column, data.label_column, eval_transform(model))
    if not fused_attention(accelerator.mixed_precision, accelerator.device):
        unfuse_attention(model)
    model, loader = accelerator.prepare(model, eval_dataloader(images, settings.batch_size, settings.workers))
    metrics = score(model, loader, accelerator)
    flags = {item.name: getattr(settings, item.name) for item in fields(settings)}
    record = results_record(
        {key: (str(value) if isinstance(value, Path) else value) for key, value in flags.items()}
        | {"output": str(output)},
        init=init or trained.get("init", {}),
        split=data.evaluation_split,
        label_names=data.label_names,
        metrics=metrics,
        epochs=trained.get("epochs"),
        images_seen=trained.get("images_seen"),
        wall_time_s=time.perf_counter() - start,
    )
    record["peak_gpu_memory_mb"] = peak_gpu_memory_mb(accelerator.device)
    record["untrained"] = untrained  # a timm name's fresh weights, scored as a baseline (--allow-untrained)
    if accelerator.is_main_process:
        write_json(output, record)
        accelerator.print(
            f"{settings.model}{' (untrained: fresh weights)' if untrained else ''} on {settings.dataset} "
            f"[{data.evaluation_split}]: top-1 {metrics['top1']:.2f}%  top-5 {metrics['top5']:.2f}%  "
            f"({metrics['num_samples']} images) -> {output}"
        )
    accelerator.end_training()
    return EvaluationRecord(output, record)


def load_images(dataset: str, models: Sequence[nn.Module], num_images: int, split: str = "test") -> list[torch.Tensor]:
    """The readable ones of the first ``num_images`` images of ``split``, prepared (resize, crop, normalize) for each
    of ``models``."""
    if num_images < 1:
        raise ValueError(f"num_images must be >= 1, got {num_images}")
    raw = load_raw_dataset(dataset)
    if split not in raw:
        raise ValueError(f"dataset {dataset!r} has no split {split!r}; it has {', '.join(raw)}")
    rows = raw[split].select(range(min(num_images, len(raw[split]))))
    image_column, _ = find_columns(rows.features)
    rows = decode_split(rows, image_column, split, skip_bad_images=True, keep_pixels=False).split  # readable ones
    pictures = [rgb_image(image) for image in rows[image_column]]
    batches = []
    for model in models:
        transform = eval_transform(model)
        batches.append(torch.stack([transform(picture) for picture in pictures]))
    return batches
