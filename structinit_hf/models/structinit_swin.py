"""timm model registry: Swin Transformers whose only difference is how attention starts.

:class:`StructInitSwinTransformer` is timm's ``SwinTransformer`` with a named init run after timm's: ``"impulse"``
writes each head's impulse into its window's relative position bias (:class:`~structinit_hf.init.options.
SwinImpulseOptions`), ``"mimetic"`` gives q/k/v/proj mimetic init's form. One builder, one cfg table, one short
function per name, beside timm's ``swin_tiny_patch4_window7_224``; a checkpoint has stock timm's keys and its export
names that stock architecture with the ``model_args`` that rebuild the network.
"""

from __future__ import annotations

from typing import Any

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.swin_transformer import SwinTransformer, checkpoint_filter_fn

from .common import StructuredInitMixin, cifar_cfg, pretrained_args, require_hub_weights, without_network_args

__all__ = ["StructInitSwinTransformer", "default_cfgs"]  # @register_model adds each name


class StructInitSwinTransformer(StructuredInitMixin, SwinTransformer):
    """timm's ``SwinTransformer`` whose attention starts from ``attention_init``: ``"impulse"`` (keyword options: the
    fields of :class:`~structinit_hf.init.options.SwinImpulseOptions`), ``"mimetic"`` (``seed``) or ``"default"``
    (timm's init only). The init runs after timm's and is skipped on the meta device; ``structinit_settings``
    records what ran."""

    family = "swin"
    __jit_unused_properties__ = ["stock_architecture"]

    def __init__(self, attention_init: str = "impulse", weight_init: str = "", **kwargs: Any) -> None:
        settings = self.pop_init(kwargs, attention_init)  # validates before anything is built
        super().__init__(weight_init="skip", **kwargs)
        self.attention_init, self._settings = attention_init, settings
        self.network_args = without_network_args(kwargs)
        self.weight_init_mode = "reset" if weight_init == "skip" else weight_init
        if weight_init != "skip":
            self.init_weights(needs_reset=False)

    @property
    def stock_architecture(self) -> str:
        """The stock timm name whose builder, given :attr:`network_args`, makes this network (for exports)."""
        return "swin_tiny_patch4_window7_224"

    def init_weights(self, mode: str = "", needs_reset: bool = True) -> None:
        """timm's init (``mode`` as timm's), then the attention init."""
        super().init_weights(mode, needs_reset)
        self._run_structured_init()
        if self.structinit_settings is not None and (mode or self.weight_init_mode) not in ("", None):
            self.structinit_settings["weight_init"] = mode or self.weight_init_mode


def _create_swin(variant: str, pretrained: bool = False, **kwargs: Any) -> StructInitSwinTransformer:
    """Build ``variant`` with its pretrained cfg; with ``pretrained=True`` the weights are loaded and no init runs."""
    require_hub_weights(variant, pretrained, kwargs)
    model_args = dict(kwargs)
    if pretrained:  # the same network, built without the init: its weights are loaded
        StructInitSwinTransformer.pop_init(model_args, model_args.get("attention_init", "impulse"))
        model_args["attention_init"] = "default"
    out_indices = model_args.pop("out_indices", tuple(range(len(model_args.get("depths", (1, 1, 3, 1))))))
    loading = pretrained_args(variant, pretrained, model_args, checkpoint_filter_fn)
    model = build_model_with_cfg(
        StructInitSwinTransformer,
        variant,
        pretrained,
        **loading,
        feature_cfg=dict(flatten_sequential=True, out_indices=out_indices),
        **model_args,
    )
    if pretrained:
        getattr(model, "model", model).structinit_settings = None  # loaded, not initialized
    return model


def _cifar_cfg(**kwargs: Any) -> dict[str, Any]:
    return cifar_cfg(**{"classifier": "head.fc", "license": "mit", "pool_size": (2, 2), **kwargs})  # 32 px: a 2x2 map


def _imagenet_cfg(**kwargs: Any) -> dict[str, Any]:
    return _cifar_cfg(
        num_classes=1000, input_size=(3, 224, 224), crop_pct=0.9, mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD,
        **{"pool_size": (7, 7), **kwargs},
    )  # fmt: skip


default_cfgs = generate_default_cfgs(
    {
        "swin_tiny_patch2_window4_32": _cifar_cfg(paper_ids="arXiv:2103.14030"),
        "swin_tiny_impulse3_patch2_window4_32": _cifar_cfg(),
        "swin_tiny_mimetic_patch2_window4_32": _cifar_cfg(paper_ids="arXiv:2305.09828"),
        "swin_tiny_impulse3_patch4_window7_224": _imagenet_cfg(),
        "swin_tiny_mimetic_patch4_window7_224": _imagenet_cfg(paper_ids="arXiv:2305.09828"),
    }
)


@register_model
def swin_tiny_patch2_window4_32(pretrained: bool = False, **kwargs) -> StructInitSwinTransformer:
    """Swin-T at 32 px, patch 2, window 4, with timm's default init: the control of the Swin runs."""
    model_args = dict(
        img_size=32, patch_size=2, window_size=4, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
        attention_init="default",
    )  # fmt: skip
    return _create_swin("swin_tiny_patch2_window4_32", pretrained, **dict(model_args, **kwargs))


@register_model
def swin_tiny_impulse3_patch2_window4_32(pretrained: bool = False, **kwargs) -> StructInitSwinTransformer:
    """Swin-T at 32 px, patch 2, window 4, each head's relative position bias a random 3x3 impulse."""
    model_args = dict(
        img_size=32, patch_size=2, window_size=4, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
        attention_init="impulse", kernel_size=3,
    )  # fmt: skip
    return _create_swin("swin_tiny_impulse3_patch2_window4_32", pretrained, **dict(model_args, **kwargs))


@register_model
def swin_tiny_mimetic_patch2_window4_32(pretrained: bool = False, **kwargs) -> StructInitSwinTransformer:
    """Swin-T at 32 px, patch 2, window 4, with mimetic attention init (Trockman & Kolter 2023)."""
    model_args = dict(
        img_size=32, patch_size=2, window_size=4, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
        attention_init="mimetic",
    )  # fmt: skip
    return _create_swin("swin_tiny_mimetic_patch2_window4_32", pretrained, **dict(model_args, **kwargs))


@register_model
def swin_tiny_impulse3_patch4_window7_224(pretrained: bool = False, **kwargs) -> StructInitSwinTransformer:
    """Swin-T/4 window 7 at 224 px (timm's ``swin_tiny_patch4_window7_224``), random 3x3 impulse biases."""
    model_args = dict(
        patch_size=4, window_size=7, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
        attention_init="impulse", kernel_size=3,
    )  # fmt: skip
    return _create_swin("swin_tiny_impulse3_patch4_window7_224", pretrained, **dict(model_args, **kwargs))


@register_model
def swin_tiny_mimetic_patch4_window7_224(pretrained: bool = False, **kwargs) -> StructInitSwinTransformer:
    """Swin-T/4 window 7 at 224 px (timm's ``swin_tiny_patch4_window7_224``), mimetic attention init."""
    model_args = dict(
        patch_size=4, window_size=7, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
        attention_init="mimetic",
    )  # fmt: skip
    return _create_swin("swin_tiny_mimetic_patch4_window7_224", pretrained, **dict(model_args, **kwargs))
