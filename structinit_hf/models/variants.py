"""The registered plain ViTs: geometry, init and pretrained cfg, written once.

``structinit_hf.models.vision_transformer`` registers one timm name per entry, builds it from ``model_args`` and gives it
:func:`pretrained_cfg`; transformers reaches the same names through ``TimmWrapperConfig(architecture=name)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CIFAR10_DATA",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "IMAGENET_DATA",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "TIMM_VARIANTS",
    "Variant",
    "check_geometry",
    "pretrained_cfg",
    "to_pair",
]

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)


CIFAR10_STD = (0.2470, 0.2435, 0.2616)


IMAGENET_MEAN = (0.485, 0.456, 0.406)  # timm's IMAGENET_DEFAULT_MEAN / STD


IMAGENET_STD = (0.229, 0.224, 0.225)


# the data a variant's pretrained cfg describes
CIFAR10_DATA = dict(num_classes=10, crop_pct=1.0, mean=CIFAR10_MEAN, std=CIFAR10_STD)


IMAGENET_DATA = dict(num_classes=1000, crop_pct=0.9, mean=IMAGENET_MEAN, std=IMAGENET_STD)


@dataclass(frozen=True)
class Variant:
    """A registered name: ``StructInitVisionTransformer`` keywords (geometry, init) and its pretrained cfg's data."""

    model_args: dict[str, Any]
    data: dict[str, Any] = field(default_factory=lambda: dict(CIFAR10_DATA))
    paper_ids: str = "arXiv:2404.01139"


# the paper's CIFAR setting: ViT-Tiny, 32 px, patch 2, no class token, average pooling (fixed sin-cos by default)
_CIFAR_TINY = dict(
    img_size=32, patch_size=2, embed_dim=192, depth=12, num_heads=3, class_token=False, global_pool="avg"
)


# the ImageNet-size variants: 224 px, patch 16, the CIFAR models' head
_IMAGENET = dict(img_size=224, patch_size=16, depth=12, class_token=False, global_pool="avg")


_MIMETIC_PAPER = "arXiv:2305.09828"


TIMM_VARIANTS: dict[str, Variant] = {
    "vit_tiny_patch2_32": Variant(dict(_CIFAR_TINY, attention_init="default")),
    "vit_tiny_impulse3": Variant(dict(_CIFAR_TINY, attention_init="impulse", kernel_size=3)),
    "vit_tiny_impulse5": Variant(dict(_CIFAR_TINY, attention_init="impulse", kernel_size=5)),
    "vit_tiny_mimetic": Variant(dict(_CIFAR_TINY, attention_init="mimetic"), paper_ids=_MIMETIC_PAPER),
    "vit_mimetic": Variant(dict(_CIFAR_TINY, attention_init="mimetic"), paper_ids=_MIMETIC_PAPER),
    "vit_tiny_impulse3_patch16_224": Variant(
        dict(_IMAGENET, embed_dim=192, num_heads=3, attention_init="impulse", kernel_size=3), IMAGENET_DATA
    ),
    "vit_small_impulse3_patch16_224": Variant(
        dict(_IMAGENET, embed_dim=384, num_heads=6, attention_init="impulse", kernel_size=3), IMAGENET_DATA
    ),
    "vit_base_impulse3_patch16_224": Variant(
        dict(_IMAGENET, embed_dim=768, num_heads=12, attention_init="impulse", kernel_size=3), IMAGENET_DATA
    ),
}


def pretrained_cfg(img_size: int, data: dict[str, Any], paper_ids: str) -> dict[str, Any]:
    """timm's pretrained cfg of a registered name (no weights: ``url`` empty)."""
    return {
        "url": "",
        "input_size": (3, *to_pair(img_size, "img_size")),
        "pool_size": None,
        "interpolation": "bicubic",
        "fixed_input_size": True,
        "first_conv": "patch_embed.proj",
        "classifier": "head",
        "license": "apache-2.0",
        "paper_ids": paper_ids,
        **data,
    }


def to_pair(value: int | tuple[int, int] | list[int], name: str) -> tuple[int, int]:
    """``(height, width)`` of an int or a pair; ``ValueError`` naming ``name`` unless both are positive ints."""
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ValueError(f"{name} must be a positive int or a pair of them, got {value!r}")
    return pair


def check_geometry(
    image_size: int | tuple[int, int],
    patch_size: int | tuple[int, int],
    width: int,
    num_heads: int,
    sincos: bool = False,
) -> tuple[int, int]:
    """Check that the image splits into whole patches and the width into whole heads; return the patch grid.

    ``sincos``: the 2-D sin-cos position code also needs the width divisible by 4.  timm calls these
    ``img_size``, ``embed_dim``, ``num_heads``; the transformers config ``image_size``, ``hidden_size``,
    ``num_attention_heads``.
    """
    image, patch = to_pair(image_size, "img_size / image_size"), to_pair(patch_size, "patch_size")
    if any(i % p for i, p in zip(image, patch, strict=True)):
        raise ValueError(f"img_size / image_size {image} is not divisible by patch_size {patch}")
    if width % num_heads:
        raise ValueError(
            f"embed_dim / hidden_size {width} is not divisible by num_heads / num_attention_heads {num_heads}"
        )
    if sincos and width % 4:
        raise ValueError(f"a 2-D sin-cos position embedding needs embed_dim / hidden_size divisible by 4, got {width}")
    return image[0] // patch[0], image[1] // patch[1]
