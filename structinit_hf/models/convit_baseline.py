"""timm's ConViT (d'Ascoli et al. 2021) at the paper's CIFAR geometry: the architectural peer of the impulse init."""

from __future__ import annotations

from typing import Any

from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.convit import ConVit

from .common import NOT_NETWORK_ARGS, check_geometry, cifar_cfg, pretrained_args, require_hub_weights

__all__ = ["default_cfgs"]  # @register_model adds each name


def _create_convit(variant: str, pretrained: bool = False, **kwargs: Any) -> ConVit:
    require_hub_weights(variant, pretrained, kwargs)
    heads = kwargs.get("num_heads", 4)  # ConViT's embed_dim is per head
    check_geometry(
        kwargs.get("img_size", 224), kwargs.get("patch_size", 16), kwargs.get("embed_dim", 48) * heads, heads
    )
    loading = pretrained_args(variant, pretrained, kwargs)
    model = build_model_with_cfg(
        ConVit,
        variant,
        pretrained,
        **loading,
        feature_cfg=dict(out_indices=3, feature_cls="getter"),
        **kwargs,
    )
    model.stock_architecture = "convit_tiny"  # exports name it, with the arguments that rebuild this network
    model.network_args = {k: v for k, v in kwargs.items() if k not in NOT_NETWORK_ARGS}
    return model


default_cfgs = generate_default_cfgs({"convit_tiny_patch2_32": cifar_cfg(paper_ids="arXiv:2103.10697")})


@register_model
def convit_tiny_patch2_32(pretrained: bool = False, **kwargs) -> ConVit:
    """timm's ConViT-Tiny at 32 px, patch 2."""
    model_args = dict(img_size=32, patch_size=2, local_up_to_layer=10, locality_strength=1.0, embed_dim=48, num_heads=4)
    return _create_convit("convit_tiny_patch2_32", pretrained, **dict(model_args, **kwargs))
