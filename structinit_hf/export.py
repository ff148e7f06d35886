"""Write one checkpoint folder that loads in timm and in transformers, with or without structinit-hf.

The folder holds ``config.json`` (transformers' keys, timm's keys and the ``structinit`` settings),
``model.safetensors`` with timm's state-dict keys, the remote-code modules for
``trust_remote_code=True`` and ``preprocessor_config.json`` for ``pipeline("image-classification")``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from timm.models.vision_transformer import VisionTransformer

from .atomic import replace_folder
from .hf import (
    StructInitViTConfig,
    StructInitViTForImageClassification,
    StructInitViTPreTrainedModel,
    image_processor_for,
)
from .hf.variants import TIMM_VARIANTS

__all__ = ["config_for_timm_model", "save_checkpoint"]


def config_for_timm_model(model: VisionTransformer) -> StructInitViTConfig:
    """The config of a timm model built by a registered structinit name (``timm.create_model(name, **kwargs)``).

    The name comes from ``model.pretrained_cfg["architecture"]`` and the keyword overrides from what
    timm recorded at construction, so the init settings (kernel size, seed ...) are the ones used.
    """
    if not isinstance(model, VisionTransformer):
        raise TypeError(f"expected a timm VisionTransformer or a StructInitViT model, got {type(model).__name__}")
    name = model.pretrained_cfg.get("architecture")
    if name not in TIMM_VARIANTS:
        raise ValueError(
            f"{name!r} is not a registered structinit ViT ({', '.join(TIMM_VARIANTS)}); build the model with "
            "timm.create_model(<one of them>, ...) or use StructInitViTForImageClassification"
        )
    # the architecture overrides timm recorded; init-time switches (timm's weight_init) do not shape the network
    recorded = {k: v for k, v in getattr(model, "_model_args", {}).items() if k not in ("num_classes", "weight_init")}
    # the init this model got, every option spelled out, so the checkpoint records it whatever the defaults become
    applied = {k: v for k, v in getattr(model, "structinit_settings", {}).items() if k != "weight_init"}
    config = StructInitViTConfig.from_timm_name(
        name,
        **{**recorded, **applied},
        num_classes=model.num_classes,
        image_mean=tuple(model.pretrained_cfg["mean"]),
        image_std=tuple(model.pretrained_cfg["std"]),
    )
    with torch.device("meta"):
        expected = StructInitViTForImageClassification(config).timm_model.state_dict()
    actual = model.state_dict()
    if {k: v.shape for k, v in expected.items()} != {k: v.shape for k, v in actual.items()}:
        raise ValueError(
            f"this {name} has an architecture its recorded arguments do not describe; build it with "
            f"timm.create_model({name!r}, ...) so the overrides are recorded"
        )
    return config


def _as_transformers_model(model: torch.nn.Module) -> StructInitViTPreTrainedModel:
    """The transformers model around ``model``, sharing its modules (nothing is copied or re-initialized)."""
    if isinstance(model, StructInitViTPreTrainedModel):
        return model
    config = config_for_timm_model(model)
    with torch.device("meta"):  # an empty skeleton, replaced by the given network
        wrapper = StructInitViTForImageClassification(config)
    wrapper.timm_model = model
    return wrapper


def save_checkpoint(
    model: torch.nn.Module,
    out_dir: str | os.PathLike,
    *,
    label_names: Sequence[str] | None = None,
    image_processor: bool = True,
) -> Path:
    """Save ``model`` to ``out_dir`` so it loads in timm and in transformers, and return the folder.

    ``model`` is a timm ``VisionTransformer`` from a registered structinit name or a StructInitViT
    transformers model.  The folder loads with ``timm.create_model("local-dir:<out_dir>", pretrained=True)``
    (stock timm suffices), ``AutoModelForImageClassification.from_pretrained(out_dir)`` (with
    structinit_hf imported, or ``trust_remote_code=True`` without it) and, with ``image_processor``,
    ``pipeline("image-classification", model=out_dir)``.  ``label_names`` (one per class) become
    the model's ``id2label``.  The folder is written next to ``out_dir`` and moved into place when
    complete, so an existing checkpoint is never left half-replaced.
    """
    hf_model = _as_transformers_model(model)
    config = hf_model.config
    if label_names is not None:
        labels = [str(name) for name in label_names]
        if len(labels) != config.num_labels:
            raise ValueError(f"label_names has {len(labels)} names but the model has {config.num_labels} classes")
        if len(set(labels)) != len(labels):
            raise ValueError(f"label_names must be unique, got {labels}")
        config.id2label = dict(enumerate(labels))
        config.label2id = {name: i for i, name in enumerate(labels)}

    def write(folder: Path) -> None:
        hf_model.save_pretrained(folder)
        if image_processor:
            image_processor_for(config).save_pretrained(folder)

    return replace_folder(out_dir, write)
