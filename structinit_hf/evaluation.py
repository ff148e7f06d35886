"""Load a classifier from any model source, score it with Accelerate, and write ``results.json``.

A model source is a timm name (registered by structinit_hf or timm's own), a local checkpoint folder
(timm's ``config.json`` + ``model.safetensors``, or a transformers checkpoint), ``hf-hub:<repo>`` (timm
weights on the Hub) or a transformers Hub id.  Scoring gathers predictions across processes with
``accelerator.gather_for_metrics``, so the counts are exact on any number of processes.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import accelerate
import datasets
import timm
import torch
import transformers
from accelerate import Accelerator
from timm.data import resolve_model_data_config
from timm.utils import ParseKwargs
from torch import nn
from torch.utils.data import DataLoader

from .atomic import write_json
from .data import (
    TransformedImages,
    build_transform,
    ensure_hub_reachable,
    eval_dataloader,
    load_image_classification,
)

__all__ = [
    "ClassifierLogits",
    "evaluate",
    "evaluation_parser",
    "library_versions",
    "load_model",
    "model_data_config",
    "num_outputs",
    "results_record",
    "run_evaluation",
]


class ClassifierLogits(nn.Module):
    """A transformers image classifier seen as ``pixel_values -> logits``, like a timm model."""

    def __init__(self, model: transformers.PreTrainedModel, data_config: dict[str, Any]) -> None:
        super().__init__()
        self.model = model
        self.data_config = data_config

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


def _transformers_data_config(source: str, model: transformers.PreTrainedModel) -> dict[str, Any]:
    """The preprocessing of a transformers checkpoint, as a timm data config."""
    try:
        processor = transformers.AutoImageProcessor.from_pretrained(source)
    except (OSError, ValueError):
        processor = None
    size = getattr(processor, "size", None) or {}
    side = getattr(model.config, "image_size", 224)
    height = size.get("height", size.get("shortest_edge", side))
    width = size.get("width", size.get("shortest_edge", side))
    resample = getattr(processor, "resample", None)
    return {
        "input_size": (getattr(model.config, "num_channels", 3), height, width),
        "mean": tuple(getattr(processor, "image_mean", None) or (0.5, 0.5, 0.5)),
        "std": tuple(getattr(processor, "image_std", None) or (0.5, 0.5, 0.5)),
        "interpolation": "bicubic" if resample == 3 else "bilinear",
        "crop_pct": 1.0,
    }


def _transformers_model(
    source: str, num_classes: int | None, label_names: list[str] | None, trust_remote_code: bool
) -> ClassifierLogits:
    overrides: dict[str, Any] = {}
    if num_classes is not None:
        names = label_names or [str(i) for i in range(num_classes)]
        overrides = dict(
            num_labels=num_classes,
            id2label=dict(enumerate(names)),
            label2id={name: i for i, name in enumerate(names)},
            ignore_mismatched_sizes=True,
        )
    model = transformers.AutoModelForImageClassification.from_pretrained(
        source, trust_remote_code=trust_remote_code, **overrides
    )
    return ClassifierLogits(model, _transformers_data_config(source, model))


def _read_config(folder: Path) -> dict[str, Any]:
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ValueError(f"model folder {str(folder)!r} has no config.json; expected a timm or transformers checkpoint")
    return json.loads(config_file.read_text())


def load_model(
    source: str,
    *,
    num_classes: int | None = None,
    label_names: list[str] | None = None,
    model_kwargs: dict[str, Any] | None = None,
    trust_remote_code: bool = False,
) -> tuple[nn.Module, dict[str, Any]]:
    """Build or load the classifier ``source`` names; return it with its attention-init settings.

    ``num_classes`` (with ``label_names``) replaces the classifier head when it differs from the
    checkpoint's; ``model_kwargs`` go to ``timm.create_model`` (builder and init options alike).
    The init settings are those structinit_hf applied (or recorded in the checkpoint), else ``{}``.
    """
    timm_kwargs = dict(model_kwargs or {})
    if num_classes is not None:
        timm_kwargs["num_classes"] = num_classes
    folder = Path(source).expanduser()
    if folder.is_dir():
        config = _read_config(folder)
        init = dict(config.get("structinit") or {})
        if "architecture" in config:
            return timm.create_model(f"local-dir:{folder}", pretrained=True, **timm_kwargs), init
        if "model_type" in config:
            return _transformers_model(str(folder), num_classes, label_names, trust_remote_code), init
        raise ValueError(f"{folder}/config.json has neither timm's 'architecture' nor transformers' 'model_type'")
    if source.startswith("hf-hub:"):
        ensure_hub_reachable(source.removeprefix("hf-hub:"), "model")
        return timm.create_model(source, pretrained=True, **timm_kwargs), {}
    if timm.is_model(source):
        model = timm.create_model(source, **timm_kwargs)
        return model, dict(getattr(model, "structinit_settings", {}))
    if source.count("/") == 1 and not source.startswith((".", "/", "~")):
        ensure_hub_reachable(source, "model")
        return _transformers_model(source, num_classes, label_names, trust_remote_code), {}
    raise ValueError(
        f"unknown model {source!r}: expected a timm model name (timm.list_models()), a local checkpoint "
        "folder, 'hf-hub:<repo id>' or a transformers Hub id"
    )


def num_outputs(model: nn.Module) -> int:
    """How many classes ``model`` (a timm model or :class:`ClassifierLogits`) predicts."""
    if isinstance(model, ClassifierLogits):
        return model.model.config.num_labels
    return model.num_classes


def model_data_config(model: nn.Module) -> dict[str, Any]:
    """Input size, mean, std, interpolation and crop of ``model`` (timm's data config)."""
    if isinstance(model, ClassifierLogits):
        return dict(model.data_config)
    return resolve_model_data_config(model)


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, accelerator: Accelerator) -> dict[str, float | int]:
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


def library_versions() -> dict[str, str]:
    """The versions a result depends on, recorded in every ``results.json``."""
    from . import __version__

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
        "datasets": datasets.__version__,
        "structinit_hf": __version__,
    }


def results_record(
    args: argparse.Namespace,
    *,
    init: dict[str, Any],
    split: str,
    label_names: list[str],
    metrics: dict[str, Any],
    epochs: int | None,
    images_seen: int | None,
    wall_time_s: float,
) -> dict[str, Any]:
    """The ``results.json`` record of a run or an evaluation (the project's contract, item 2)."""
    return {
        "model": args.model,
        "model_kwargs": dict(args.model_kwargs),
        "init": init,
        "dataset": args.dataset,
        "dataset_config": args.dataset_config,
        "split": split,
        "num_classes": len(label_names),
        "label_names": list(label_names),
        "top1": metrics["top1"],
        "top5": metrics["top5"],
        "num_samples": metrics["num_samples"],
        "epochs": epochs,
        "images_seen": images_seen,
        "wall_time_s": round(wall_time_s, 3),
        "args": {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()},
        "versions": library_versions(),
    }


def add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """The dataset flags shared by ``train.py`` and ``evaluate.py``."""
    group = parser.add_argument_group("dataset")
    group.add_argument("--dataset", default="uoft-cs/cifar10", help="Hub id, local data folder or save_to_disk folder")
    group.add_argument(
        "--dataset-config", default=None, help="dataset configuration name (e.g. cropped_digits for svhn)"
    )
    group.add_argument("--image-column", default=None, help="image column (default: img or image)")
    group.add_argument("--label-column", default=None, help="label column (default: label, labels or fine_label)")
    group.add_argument("--max-eval-samples", type=int, default=None, help="score only the first N rows")
    group.add_argument("--workers", type=int, default=0, help="DataLoader worker processes per training process")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The model flags shared by ``train.py`` and ``evaluate.py``."""
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model",
        default="vit_tiny_impulse3",
        help="timm name, local checkpoint folder, hf-hub:<repo> or a transformers Hub id",
    )
    group.add_argument(
        "--model-kwargs",
        nargs="*",
        default={},
        action=ParseKwargs,
        help="builder arguments as key=value (e.g. depth=2 patch_size=4 kernel_size=5)",
    )
    group.add_argument("--trust-remote-code", action="store_true", help="allow a transformers checkpoint's own code")


def evaluation_parser() -> argparse.ArgumentParser:
    """Every flag of ``scripts/evaluate.py``."""
    parser = argparse.ArgumentParser(description="Score an image classifier on one split of a dataset.")
    add_model_arguments(parser)
    add_dataset_arguments(parser)
    parser.add_argument("--split", default=None, help="split to score (default: test, else validation)")
    parser.add_argument("--batch-size", type=int, default=256, help="images per process and batch")
    parser.add_argument("--mixed-precision", choices=("no", "fp16", "bf16"), default=None)
    parser.add_argument("--output", type=Path, default=Path("results.json"), help="where to write results.json")
    return parser


def _previous_training(source: str) -> dict[str, Any]:
    results = Path(source).expanduser() / "results.json"
    return json.loads(results.read_text()) if results.is_file() else {}


def run_evaluation(args: argparse.Namespace) -> dict[str, Any]:
    """Score ``args.model`` on ``args.split`` of ``args.dataset``; write and return the results record."""
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    start = time.perf_counter()
    data = load_image_classification(
        args.dataset,
        args.dataset_config,
        train_split=None,
        eval_split=args.split,
        val_split=0.0,
        image_column=args.image_column,
        label_column=args.label_column,
        max_eval_samples=args.max_eval_samples,
    )
    num_classes = data.num_classes if timm.is_model(args.model) else None
    model, init = load_model(
        args.model,
        num_classes=num_classes,
        label_names=data.label_names,
        model_kwargs=args.model_kwargs,
        trust_remote_code=args.trust_remote_code,
    )
    if num_outputs(model) != data.num_classes:
        raise ValueError(
            f"model {args.model!r} predicts {num_outputs(model)} classes but {args.dataset!r} has "
            f"{data.num_classes}; pick a checkpoint trained on this dataset"
        )
    transform = build_transform(model_data_config(model), is_training=False)
    images = TransformedImages(data.evaluation, data.image_column, data.label_column, transform)
    model, loader = accelerator.prepare(model, eval_dataloader(images, args.batch_size, args.workers))
    metrics = evaluate(model, loader, accelerator)
    trained = _previous_training(args.model)
    record = results_record(
        args,
        init=init or trained.get("init", {}),
        split=data.evaluation_split,
        label_names=data.label_names,
        metrics=metrics,
        epochs=trained.get("epochs"),
        images_seen=trained.get("images_seen"),
        wall_time_s=time.perf_counter() - start,
    )
    if accelerator.is_main_process:
        write_json(args.output, record)
        accelerator.print(
            f"{args.model} on {args.dataset} [{data.evaluation_split}]: top-1 {metrics['top1']:.2f}%  "
            f"top-5 {metrics['top5']:.2f}%  ({metrics['num_samples']} images) -> {args.output}"
        )
    accelerator.end_training()
    return record
