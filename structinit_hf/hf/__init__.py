"""transformers integration: StructInitViT config and models, registered with the Auto classes.

Importing this package (``import structinit_hf`` does) registers ``model_type="structinit_vit"`` with
``AutoConfig``, ``AutoModel`` and ``AutoModelForImageClassification``, and marks the classes for
``register_for_auto_class`` so every saved checkpoint also loads with ``trust_remote_code=True``.
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModel, AutoModelForImageClassification, ViTImageProcessor

from .configuration_structinit_vit import StructInitViTConfig
from .modeling_structinit_vit import (
    StructInitViTForImageClassification,
    StructInitViTModel,
    StructInitViTPreTrainedModel,
)

__all__ = [
    "StructInitViTConfig",
    "StructInitViTForImageClassification",
    "StructInitViTModel",
    "StructInitViTPreTrainedModel",
    "image_processor_for",
]

AutoConfig.register(StructInitViTConfig.model_type, StructInitViTConfig, exist_ok=True)
AutoModel.register(StructInitViTConfig, StructInitViTModel, exist_ok=True)
AutoModelForImageClassification.register(StructInitViTConfig, StructInitViTForImageClassification, exist_ok=True)
StructInitViTConfig.register_for_auto_class()
StructInitViTModel.register_for_auto_class("AutoModel")
StructInitViTForImageClassification.register_for_auto_class("AutoModelForImageClassification")


def image_processor_for(config: StructInitViTConfig) -> ViTImageProcessor:
    """The ``ViTImageProcessor`` a StructInitViT expects: resize to ``image_size``, scale to [0, 1], normalize."""
    height, width = (config.image_size, config.image_size) if isinstance(config.image_size, int) else config.image_size
    return ViTImageProcessor(
        do_resize=True,
        size={"height": height, "width": width},
        resample=3,  # bicubic, as timm's pretrained cfg says
        do_rescale=True,
        do_normalize=True,
        image_mean=list(config.image_mean),
        image_std=list(config.image_std),
    )
