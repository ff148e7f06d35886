"""Build or load a classifier from any model source, and how its images are prepared.

A model source is a timm name (registered by structinit_hf or timm's own), a local checkpoint folder
(timm's ``config.json`` + ``model.safetensors``, or a transformers checkpoint), ``hf-hub:<repo>`` (timm
weights on the Hub) or a transformers Hub id. Images are prepared the checkpoint's own way
(:func:`eval_transform`): a transformers checkpoint's image processor as transformers applies it, timm's
eval transform of a timm model's data config.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

import timm
import torch
import transformers
from huggingface_hub import is_offline_mode
from safetensors import SafetensorError, safe_open
from timm.data import resolve_input_data_config
from torch import nn

from ...init.options import IMPULSE_KWARGS
from ..cli.errors import UsageError, did_you_mean
from ..data.dataloaders import build_transform
from ..data.sources import ensure_hub_reachable
from .kwargs import create_timm_model

__all__ = [
    "ClassifierLogits",
    "LOADED_MODEL_KWARGS",
    "LoadedModel",
    "MODEL_WEIGHT_FILES",
    "ProcessorTransform",
    "check_model_source",
    "create_timm_model",
    "describe_fine_tuning",
    "eval_transform",
    "load_model",
    "model_data_config",
    "num_outputs",
]


class ClassifierLogits(nn.Module):
    """A transformers image classifier seen as ``pixel_values -> logits``, like a timm model.

    ``processor`` is the checkpoint's image processor (``None`` when it saved none); evaluation applies it
    as is, ``data_config`` is its nearest timm data config (for training augmentation).
    """

    def __init__(self, model: transformers.PreTrainedModel, processor: Any | None) -> None:
        super().__init__()
        self.model = model
        self.processor = processor
        self.data_config = _processor_data_config(processor, model)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


class ProcessorTransform:
    """A transformers image processor as a one-image transform: ``PIL image -> (C, H, W) tensor``."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor

    def __call__(self, image: Any) -> torch.Tensor:
        return self.processor(images=image, return_tensors="pt")["pixel_values"][0]


def _edges(size: Any) -> tuple[int, int] | int | None:
    """``(height, width)``, or the shortest edge, of a processor's ``size`` / ``crop_size`` (dict or SizeDict)."""
    if size is None:
        return None
    get = size.get if isinstance(size, dict) else lambda key: getattr(size, key, None)
    if get("height") and get("width"):
        return get("height"), get("width")
    return get("shortest_edge")


def _processor_data_config(processor: Any | None, model: transformers.PreTrainedModel) -> dict[str, Any]:
    """timm's data config closest to ``processor`` (for training augmentation; evaluation uses the processor).

    The input size is the centre crop when the processor crops, else its resize; ``crop_pct`` is crop over resize.
    """
    channels, side = getattr(model.config, "num_channels", 3), getattr(model.config, "image_size", 224)
    if processor is None and hasattr(model, "timm_model"):  # a TimmWrapper saved without a data cfg: timm's own
        return resolve_input_data_config(model.timm_model)
    if processor is None:
        return {
            "input_size": (channels, side, side),
            "mean": (0.5,) * channels,
            "std": (0.5,) * channels,
            "crop_pct": 1.0,
        }
    resize = _edges(getattr(processor, "size", None)) if getattr(processor, "do_resize", True) else None
    crop = _edges(getattr(processor, "crop_size", None)) if getattr(processor, "do_center_crop", False) else None
    final = crop or resize or side
    height, width = (final, final) if isinstance(final, int) else final
    crop_pct = 1.0
    if crop is not None and resize is not None:
        crop_pct = height / (resize if isinstance(resize, int) else resize[0])
    normalize = getattr(processor, "do_normalize", True)
    resample = getattr(processor, "resample", None)
    return {
        "input_size": (channels, height, width),
        "mean": tuple(processor.image_mean) if normalize else (0.0,) * channels,
        "std": tuple(processor.image_std) if normalize else (1.0,) * channels,
        "interpolation": "bicubic" if getattr(resample, "value", resample) in (3, "bicubic") else "bilinear",
        "crop_pct": crop_pct,
    }


def _image_processor(source: str, trust_remote_code: bool) -> Any | None:
    """The image processor saved with a transformers checkpoint, or ``None`` when it has none."""
    try:
        return transformers.AutoImageProcessor.from_pretrained(source, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return None


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
    return ClassifierLogits(model, _image_processor(source, trust_remote_code))


def _read_config(folder: Path) -> dict[str, Any]:
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ValueError(f"model folder {str(folder)!r} has no config.json; expected a timm or transformers checkpoint")
    return json.loads(config_file.read_text())


class LoadedModel(NamedTuple):
    """What :func:`load_model` returns: the classifier, the attention init its weights started from (``{}`` when
    unknown), and, for weights loaded from a checkpoint, what the load changed (``None`` for a fresh build)."""

    model: nn.Module
    init: dict[str, Any]
    fine_tuned_from: dict[str, Any] | None


# what a loaded checkpoint may be given through --model-kwargs: timm resamples the input size and patch size as it
# loads; regularisation does not change the weights. Everything else (depth, width, heads ...) is fixed by the weights.
LOADED_MODEL_KWARGS = ("img_size", "patch_size", "drop_rate", "drop_path_rate", "attn_drop_rate", "proj_drop_rate")


_RESAMPLED = {"img_size": "position embedding", "patch_size": "patch embedding"}


def _checkpoint_kwargs(source: str, config: dict[str, Any], model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``--model-kwargs`` of a loaded checkpoint, refused in one line where no load can honour them; the input
    size they set becomes the data cfg's."""
    init_options = sorted(set(model_kwargs) & {*IMPULSE_KWARGS, "attention_init", "weight_init"})
    if init_options:
        raise UsageError(
            f"--model-kwargs {', '.join(init_options)}: init options do not apply to {source}: its weights are loaded "
            "and no init runs on them; to train from an init, pass a registered name (e.g. vit_tiny_impulse5)"
        )
    saved = config.get("model_args") or {}
    fixed = sorted(
        name for name in set(model_kwargs) - set(LOADED_MODEL_KWARGS) if model_kwargs[name] != saved.get(name)
    )
    if fixed:
        shown = ", ".join(f"{name}={model_kwargs[name]!r} (saved: {saved.get(name, 'default')!r})" for name in fixed)
        raise UsageError(
            f"--model-kwargs {shown}: the weights of {source} fix the network (depth, width, heads ...); a loaded "
            f"checkpoint takes only {', '.join(LOADED_MODEL_KWARGS)}"
        )
    resized = set(model_kwargs) & set(_RESAMPLED)
    if resized and not config.get("architecture", "").startswith("vit_"):
        raise UsageError(
            f"--model-kwargs {', '.join(sorted(resized))}: timm resamples these only for its ViTs; "
            f"{source} is a {config.get('architecture')!r}, loaded at its own size"
        )
    kwargs, overlay = dict(model_kwargs), {}
    pretrained_cfg = config.get("pretrained_cfg") or {}
    if "img_size" in kwargs:  # timm resamples the weights; the data cfg must follow the new size
        size = kwargs["img_size"]
        size = (size, size) if isinstance(size, int) else tuple(size)
        overlay["input_size"] = (pretrained_cfg.get("input_size", (3,))[0], *size)
    if "pretrained_cfg" in config and "classifier" not in pretrained_cfg:  # folders of 0.2 did not name it
        registered = timm.models.get_pretrained_cfg(config["architecture"])
        overlay["classifier"] = getattr(registered, "classifier", None) or "head"
    if overlay:
        kwargs["pretrained_cfg_overlay"] = overlay
    return kwargs


def _fine_tune_record(
    source: str, config: dict[str, Any], num_classes: int | None, model_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """What loading ``source`` for training changes: the classifier kept or re-initialized, and what was resampled;
    and what the parent folder says of itself (:func:`_parent_folder_record`)."""
    saved_classes = config.get("num_classes", (config.get("pretrained_cfg") or {}).get("num_classes"))
    head = "kept" if num_classes is None or num_classes == saved_classes else "re-initialized"
    saved = config.get("model_args") or {}
    changes = [
        f"{name} {_side(saved.get(name))} -> {_side(model_kwargs[name])} ({_RESAMPLED[name]} resampled as timm does)"
        for name in _RESAMPLED
        if name in model_kwargs and _side(model_kwargs[name]) != _side(saved.get(name))
    ]
    record = {"model": source, "head": head, "checkpoint_classes": saved_classes, "resampled": changes}
    return {**record, **_parent_folder_record(Path(source).expanduser())}


# a model card that loads its own repo as timm does (card_templates/_usage.md.j2 writes one for every published run)
_CARD_HUB_ID = re.compile(r"hf-hub:([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)")


def _parent_folder_record(folder: Path) -> dict[str, Any]:
    """What a checkpoint folder says of itself, for the card of a model fine-tuned from it: ``hub_id``, the Hub repo
    it is a copy of (a Hub cache snapshot ``models--<org>--<name>/snapshots/<revision>``, or a model card in it that
    loads exactly one ``hf-hub:<id>``), else ``None``; ``dataset``, what its run trained on (its ``results.json``,
    beside the weights in a published repo, one folder up from a run's ``final/``), else ``None``."""
    parts = folder.resolve().parts
    cached = [name for name, below in pairwise(parts) if name.startswith("models--") and below == "snapshots"]
    hub_id = cached[-1].removeprefix("models--").replace("--", "/", 1) if cached else None
    card = folder / "README.md"
    if hub_id is None and card.is_file():
        named = set(_CARD_HUB_ID.findall(card.read_text(encoding="utf-8", errors="replace")))
        hub_id = named.pop() if len(named) == 1 else None
    dataset = None
    for results in (folder / "results.json", *([folder.parent / "results.json"] if folder.name == "final" else [])):
        try:
            dataset = json.loads(results.read_text(encoding="utf-8")).get("dataset")
            break
        except (OSError, ValueError, AttributeError):  # none there, or not a run's record
            continue
    return {"hub_id": hub_id, "dataset": dataset if isinstance(dataset, str) else None}


def _side(size: Any) -> Any:
    """An image or patch size as one number when square (``[16, 16]`` and ``16`` are the same size)."""
    return size[0] if isinstance(size, (list, tuple)) and len(set(size)) == 1 else size


def _saved_by_transformers(folder: Path) -> bool:
    """Weights with transformers' ``timm_model.`` key prefix (a ``TimmWrapper`` folder saved by transformers)."""
    weights = folder / "model.safetensors"
    if not weights.is_file():
        return False
    with safe_open(str(weights), framework="pt") as f:
        return any(key.startswith("timm_model.") for key in f.keys())


def _damaged(source: str, error: Exception) -> UsageError:
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
    return UsageError(
        f"--model {source}: its weights could not be read ({first_line}); the file is damaged or incomplete: pass a "
        "complete checkpoint folder, such as a finished run's final/"
    )


def _not_cached(source: str, kind: str) -> FileNotFoundError:
    """The one wording for a Hub model (``hf-hub:`` timm weights, a transformers id) that ``HF_HUB_OFFLINE`` keeps
    out of reach and the local cache lacks; train and evaluate both load through :func:`load_model`."""
    return FileNotFoundError(
        f"{kind} model {source!r} is not in the local Hub cache and HF_HUB_OFFLINE is set; pass a local checkpoint "
        "folder, or run once online to cache it"
    )


def missing_folder(source: str) -> UsageError | None:
    """The one line for a ``--model`` naming a missing local folder (a path, or ``runs/c10`` beside ``runs/``), else None."""
    folder = Path(source).expanduser()
    if folder.exists():
        return None
    if source.startswith((".", "/", "~")) or (os.sep in source and source.count("/") != 1):
        return UsageError(f"model folder {source!r} does not exist; pass a checkpoint folder (with config.json)")
    if source.count("/") == 1 and folder.parent.is_dir():
        there = sorted(path.name for path in folder.parent.iterdir() if path.is_dir())
        return UsageError(
            f"model folder {source!r} does not exist ({folder.parent}/ holds {', '.join(there[:8]) or 'no folders'}"
            f"{did_you_mean(folder.name, there)}); pass a checkpoint folder (with config.json), or a Hub id whose "
            "namespace is not a local folder"
        )
    return None


def load_model(
    source: str,
    *,
    num_classes: int | None = None,
    label_names: list[str] | None = None,
    model_kwargs: dict[str, Any] | None = None,
    trust_remote_code: bool = False,
) -> LoadedModel:
    """Build or load the classifier ``source`` names (see :class:`LoadedModel`).

    ``num_classes`` (with ``label_names``) replaces the classifier head when it differs from the checkpoint's, as
    timm's ``--pretrained --num-classes`` does; ``model_kwargs`` go to ``timm.create_model`` (builder and init options
    alike for a timm name; only :data:`LOADED_MODEL_KWARGS` for a checkpoint, whose weights fix the rest).
    The init settings are those structinit_hf applied (or recorded in the checkpoint), else ``{}``.
    """
    timm_kwargs = dict(model_kwargs or {})
    if num_classes is not None:
        timm_kwargs["num_classes"] = num_classes
    folder = Path(source).expanduser()
    if folder.is_file():
        beside = folder.parent if (folder.parent / "config.json").is_file() else None
        raise UsageError(
            f"--model {source} is a file; pass the checkpoint folder that holds it with its config.json"
            + (f" ({beside})" if beside else "")
        )
    if folder.is_dir():
        config = _read_config(folder)
        init = dict(config.get("structinit") or {})
        try:
            if "architecture" in config and not _saved_by_transformers(folder):
                kwargs = _checkpoint_kwargs(source, config, dict(model_kwargs or {}))
                if num_classes is not None:
                    kwargs["num_classes"] = num_classes
                model = create_timm_model(f"local-dir:{folder}", pretrained=True, **kwargs)
            elif "model_type" in config:
                if model_kwargs:
                    raise UsageError(f"--model-kwargs: {source} is a transformers checkpoint; it takes no keywords")
                model = _transformers_model(str(folder), num_classes, label_names, trust_remote_code)
            else:
                raise ValueError(
                    f"{folder}/config.json has neither timm's 'architecture' nor transformers' 'model_type'"
                )
        except (SafetensorError, EOFError) as error:
            raise _damaged(source, error) from error
        return LoadedModel(model, init, _fine_tune_record(source, config, num_classes, dict(model_kwargs or {})))
    if source.startswith("hf-hub:"):
        ensure_hub_reachable(source.removeprefix("hf-hub:"), "model")
        try:
            model = create_timm_model(source, pretrained=True, **timm_kwargs)
        except OSError as error:
            if not is_offline_mode():
                raise
            raise _not_cached(source, "timm") from error
        return LoadedModel(model, {}, {"model": source, "hub_id": source.removeprefix("hf-hub:"), "dataset": None})
    missing = missing_folder(source)
    if missing is not None and not (source.count("/") == 1 and timm.is_model(source)):
        raise missing
    if timm.is_model(source):
        model = create_timm_model(source, **timm_kwargs)
        return LoadedModel(model, dict(getattr(model, "structinit_settings", None) or {}), None)
    if source.count("/") == 1 and not source.startswith((".", "/", "~")):
        ensure_hub_reachable(source, "model")
        try:
            model = _transformers_model(source, num_classes, label_names, trust_remote_code)
        except OSError as error:
            if not is_offline_mode():
                raise
            raise _not_cached(source, "transformers") from error
        return LoadedModel(model, {}, {"model": source, "hub_id": source, "dataset": None})
    raise UsageError(
        f"unknown model {source!r}{did_you_mean(source, timm.list_models())}: expected a timm model name "
        "(timm.list_models()), a local checkpoint folder, 'hf-hub:<repo id>' or a transformers Hub id"
    )


def num_outputs(model: nn.Module) -> int:
    """How many classes ``model`` (a timm model or :class:`ClassifierLogits`) predicts."""
    if isinstance(model, ClassifierLogits):
        return model.model.config.num_labels
    return model.num_classes


def model_label_names(model: nn.Module) -> list[str] | None:
    """The class names ``model`` was trained with (timm's ``pretrained_cfg['label_names']``, transformers'
    ``id2label``), or ``None`` where it names none: a fresh head, or transformers' placeholder ``LABEL_<i>`` names."""
    if isinstance(model, ClassifierLogits):
        id2label = model.model.config.id2label or {}
        names = [str(id2label[i]) for i in sorted(id2label)]
    else:
        names = [str(name) for name in (getattr(model, "pretrained_cfg", None) or {}).get("label_names") or []]
    placeholder = names == [f"LABEL_{i}" for i in range(len(names))]
    return names if names and not placeholder and len(names) == num_outputs(model) else None


def check_label_names(model: nn.Module, dataset: str, label_names: list[str], allow_new: bool) -> None:
    """Refuse, in one line naming both lists, a dataset whose class names are not those ``model`` was trained with
    (same count, other names or order): its scores or fine-tuning would read every class under another's name."""
    trained = model_label_names(model)
    if allow_new or trained is None or trained == list(label_names):
        return
    order = " (the same names in another order)" if sorted(trained) == sorted(label_names) else ""
    raise UsageError(
        f"--dataset {dataset}: its classes {list(label_names)} are not the model's {trained}{order}; pass "
        "--allow-new-label-names to relabel the classes deliberately"
    )


def model_data_config(model: nn.Module) -> dict[str, Any]:
    """Input size, mean, std, interpolation and crop of ``model`` as built (timm's; its own img_size, in_chans)."""
    if isinstance(model, ClassifierLogits):
        return dict(model.data_config)
    return resolve_input_data_config(model)


def eval_transform(model: nn.Module) -> Callable[[Any], torch.Tensor]:
    """The checkpoint's own evaluation preprocessing of one PIL image.

    A transformers checkpoint's image processor runs as transformers runs it (resize, centre crop,
    rescale, normalize); a timm model gets timm's eval transform of its data config.
    """
    if isinstance(model, ClassifierLogits) and model.processor is not None:
        return ProcessorTransform(model.processor)
    return build_transform(model_data_config(model), is_training=False)


MODEL_WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pth", "*.pt", "*.safetensors.index.json", "*.bin.index.json")


def check_model_source(source: str) -> None:
    """A local ``--model`` folder must hold weights beside its ``config.json`` (else the loader fails deep inside)."""
    folder = Path(source).expanduser()
    weights = (path for pattern in MODEL_WEIGHT_FILES for path in folder.glob(pattern))
    if folder.is_dir() and (folder / "config.json").is_file() and next(weights, None) is None:
        raise UsageError(
            f"--model {source}: the folder has a config.json but no weights (model.safetensors or another of "
            f"{', '.join(MODEL_WEIGHT_FILES)}); pass a complete checkpoint folder, such as a finished run's final/"
        )


def describe_fine_tuning(fine_tuned_from: dict[str, Any], num_classes: int) -> str:
    """The log line of a run that starts from loaded weights: what was loaded, and what happened to the head."""
    head = {
        "kept": f"classifier kept ({num_classes} classes)",
        "re-initialized": f"classifier re-initialized for {num_classes} classes (the checkpoint had "
        f"{fine_tuned_from.get('checkpoint_classes')})",
    }.get(fine_tuned_from.get("head"), f"classifier for {num_classes} classes")
    resampled = "; ".join(fine_tuned_from.get("resampled") or [])
    return f"fine-tuning {fine_tuned_from['model']}: weights loaded, no attention init runs; {head}" + (
        f"; {resampled}" if resampled else ""
    )
