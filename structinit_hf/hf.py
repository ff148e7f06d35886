"""The transformers route: transformers' own timm wrapper, reaching this package's names.

With ``structinit_hf`` imported, ``TimmWrapperConfig(architecture="vit_tiny_impulse3", model_args={...})`` builds
the model through ``AutoModelForImageClassification.from_config`` and keeps its init: transformers re-draws every
``nn.Linear`` after construction, then calls the timm model's ``init_non_persistent_buffers()``, which runs the
model's own init again (:class:`~structinit_hf.timm_models.StructInitVisionTransformer`). ``from_pretrained`` builds
on the meta device, where no init runs, and loads the weights.

:class:`StructInitViTConfig` is that config under this package's ``model_type`` (``structinit_vit``), defaulting to
``vit_tiny_impulse3``; it also reads the folders of the 0.1 release, whose ``config.json`` already names a stock timm
architecture. :func:`stock_timm_config` is what every checkpoint this project writes carries: a ``timm_wrapper``
config naming a stock timm architecture, which loads with neither this package nor ``trust_remote_code``.
"""

from __future__ import annotations

from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForImageClassification,
    TimmWrapperConfig,
    TimmWrapperForImageClassification,
    TimmWrapperModel,
)

__all__ = [
    "StructInitViTConfig",
    "StructInitViTForImageClassification",
    "StructInitViTModel",
    "stock_timm_config",
]

# the config.json keys of timm's own checkpoints that describe the data (timm's local-dir loader and
# TimmWrapperImageProcessor read them)
_DATA_KEYS = ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")


class StructInitViTConfig(TimmWrapperConfig):
    r"""transformers' ``TimmWrapperConfig`` for this package's registered timm names.

    architecture (`str`, *optional*, defaults to `"vit_tiny_impulse3"`):
        A timm name; any of ``timm.list_models("vit_*impulse*")``, ``vit_tiny_mimetic``, ``vit_tiny_patch2_32``.
    model_args (`dict[str, Any]`, *optional*):
        Keywords for ``timm.create_model``: geometry (``img_size``, ``depth`` ...) and init options (``kernel_size``,
        ``seed``, ``preset`` ...), as in ``timm.create_model(architecture, **model_args)``.

    ``AutoModelForImageClassification.from_config(StructInitViTConfig(...))`` runs the init once per model, as
    ``timm.create_model`` does.
    """

    model_type = "structinit_vit"

    architecture: str = "vit_tiny_impulse3"


class _PatchEmbeddingsMixin:
    """The patch embedding is the input embedding (transformers' ViT says the same), so PEFT and
    ``enable_input_require_grads`` reach it."""

    def get_input_embeddings(self) -> nn.Module:
        return self.timm_model.patch_embed

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.timm_model.patch_embed = value


class StructInitViTModel(_PatchEmbeddingsMixin, TimmWrapperModel):
    """``TimmWrapperModel`` for :class:`StructInitViTConfig` (features, no classifier)."""

    config_class = StructInitViTConfig


class StructInitViTForImageClassification(_PatchEmbeddingsMixin, TimmWrapperForImageClassification):
    """``TimmWrapperForImageClassification`` for :class:`StructInitViTConfig`."""

    config_class = StructInitViTConfig


AutoConfig.register(StructInitViTConfig.model_type, StructInitViTConfig, exist_ok=True)
AutoModel.register(StructInitViTConfig, StructInitViTModel, exist_ok=True)
AutoModelForImageClassification.register(StructInitViTConfig, StructInitViTForImageClassification, exist_ok=True)


def stock_timm_config(model: nn.Module, label_names: list[str] | None = None) -> TimmWrapperConfig:
    """A stock ``timm_wrapper`` config for a model of this package: a stock timm architecture and the
    ``model_args`` that rebuild ``model``'s network, its data cfg, and the init it started from (``structinit``).
    """
    network_args = getattr(model, "network_args", None)
    if network_args is None:
        raise TypeError(
            f"expected a model built by one of this package's timm names (timm.create_model('vit_tiny_impulse3')), "
            f"got {type(model).__name__}"
        )
    labels = list(label_names) if label_names is not None else [f"LABEL_{i}" for i in range(model.num_classes)]
    if len(labels) != model.num_classes or len(set(labels)) != len(labels):
        raise ValueError(f"label_names must be {model.num_classes} unique names, got {labels}")
    cfg = model.pretrained_cfg
    return TimmWrapperConfig(
        architecture=model.stock_architecture,
        model_args=dict(network_args),
        num_labels=model.num_classes,
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
        label_names=labels,
        global_pool=model.global_pool,
        num_features=model.num_features,
        pretrained_cfg={key: cfg[key] for key in _DATA_KEYS if cfg.get(key) is not None},
        structinit=dict(getattr(model, "structinit_settings", None) or {}),
    )
