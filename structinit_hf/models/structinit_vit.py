"""timm model registry: plain ViTs whose only difference is how attention starts.

:class:`StructInitVisionTransformer` is timm's ``VisionTransformer`` with a named attention init run by its
``init_weights`` (after timm's own), and a fixed position code kept as a persistent buffer. As in timm's
``vision_transformer.py``: one ``default_cfgs`` table (its cfgs from :func:`.common.cifar_cfg`), one builder
(:func:`_create_vision_transformer`) and one short function per name that writes its geometry and init.
A checkpoint has stock timm's keys and loads into stock ``VisionTransformer``; the init never runs on the meta
device or when weights are loaded.
"""

from __future__ import annotations

from typing import Any

import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import (
    build_model_with_cfg,
    generate_default_cfgs,
    register_model,
)
from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn
from torch import nn

from ..init.apply import apply_structured_init, init_record
from ..init.impulse import sincos_2d
from ..init.layer_scale import KEEP
from ..init.options import IMPULSE_KWARGS, init_settings
from .common import (
    NOT_NETWORK_ARGS,
    InitAgainAfterTransformersRedraws,
    check_geometry,
    cifar_cfg,
    pretrained_args,
    require_hub_weights,
)

__all__ = ["POS_EMBEDS", "StructInitVisionTransformer", "default_cfgs"]  # @register_model adds each name

# a stock timm name per width; exported checkpoints name it, with the model_args that rebuild the exact network
_STOCK_VIT_NAMES = {192: "vit_tiny_patch16_224", 384: "vit_small_patch16_224", 768: "vit_base_patch16_224"}


POS_EMBEDS = ("sincos", "learn", "none")


class StructInitVisionTransformer(InitAgainAfterTransformersRedraws, VisionTransformer):
    """timm's ``VisionTransformer`` whose attention starts from ``attention_init``.

    ``attention_init`` is ``"impulse"`` (keyword options: the fields of
    :class:`~structinit_hf.init.options.ImpulseOptions`), ``"mimetic"`` (``seed``) or ``"default"`` (timm's init
    only). ``pos_embed="sincos"`` is the paper's fixed 2-D sin-cos code, a persistent buffer (every parameter trains;
    the ``pos_embed`` key stays, so stock timm loads the checkpoint); it is a parameter when the init writes a
    learned-style code (``pseudo_input="learned"``, v2). ``"learn"`` and ``"none"`` are timm's. The structured init
    runs in :meth:`init_weights`, after timm's, and is skipped on the meta device; ``structinit_settings`` records
    what ran (``None`` where nothing did).
    """

    __jit_unused_properties__ = ["stock_architecture", "gradient_checkpointing"]  # TorchScript skips them
    structinit_settings = None  # the init's record (a dict); unannotated: TorchScript reads class annotations

    def __init__(
        self, attention_init: str = "impulse", pos_embed: str = "sincos", weight_init: str = "", **kwargs: Any
    ) -> None:
        options = _pop_options(kwargs)
        settings = init_settings(attention_init, options)  # validates before anything is built
        if pos_embed not in POS_EMBEDS:
            raise ValueError(f"unknown pos_embed {pos_embed!r}; expected one of {', '.join(POS_EMBEDS)}")
        embed_dim, num_heads = kwargs.get("embed_dim", 768), kwargs.get("num_heads", 12)
        check_geometry(
            kwargs.get("img_size", 224), kwargs.get("patch_size", 16), embed_dim, num_heads, pos_embed == "sincos"
        )
        super().__init__(pos_embed="none" if pos_embed == "none" else "learn", weight_init="skip", **kwargs)
        self.attention_init, self._settings = attention_init, settings  # options resolved once, defaults filled in
        # a layer scale built from the user's init_values is theirs: kept unless attn_layer_scale is also given
        self._keep_layer_scale = kwargs.get("init_values") is not None and "attn_layer_scale" not in options
        # what rebuilds this network in stock timm (exported checkpoints name a stock architecture with these)
        self.network_args = {
            **{k: v for k, v in kwargs.items() if k not in NOT_NETWORK_ARGS},
            "pos_embed": "none" if pos_embed == "none" else "learn",
        }
        self.fixed_pos_embed = pos_embed == "sincos" and settings.get("pseudo_input") != "learned"
        if self.fixed_pos_embed:
            self._pos_embed_to_buffer()
        self.weight_init_mode = "reset" if weight_init == "skip" else weight_init
        if weight_init != "skip":
            self.init_weights(needs_reset=False)

    def _pos_embed_to_buffer(self) -> None:
        value = self.pos_embed.detach()
        del self.pos_embed
        self.register_buffer("pos_embed", value)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """timm's set, less a fixed position code (a buffer: there is no parameter to exempt)."""
        return super().no_weight_decay() - ({"pos_embed"} if self.fixed_pos_embed else set())

    @property
    def stock_architecture(self) -> str:
        """The stock timm name whose builder, given :attr:`network_args`, makes this network (for exports)."""
        return _STOCK_VIT_NAMES.get(self.embed_dim, "vit_base_patch16_224")

    @property
    def gradient_checkpointing(self) -> bool:
        """timm's ``grad_checkpointing`` under the name transformers reads (``is_activation_checkpointing``)."""
        return self.grad_checkpointing

    @torch.no_grad()
    def init_weights(self, mode: str = "", needs_reset: bool = True) -> None:
        """timm's init (``mode`` as timm's), then the fixed position code, then the attention init."""
        super().init_weights(mode, needs_reset)
        if self.patch_embed.proj.weight.is_meta:  # an empty skeleton to load weights into: nothing to write
            self.structinit_settings = None
            return
        if self.pos_embed is not None and self.fixed_pos_embed:
            prefix = 0 if self.no_embed_class else self.num_prefix_tokens
            self.pos_embed[:, :prefix] = 0
            if self.attention_init != "impulse":  # impulse init writes the code its solve assumes
                self.pos_embed[:, prefix:] = sincos_2d(self.patch_embed.grid_size, self.embed_dim)
        options = {k: v for k, v in self._settings.items() if k != "attention_init" and v is not None}
        if self._keep_layer_scale and self.attention_init == "impulse":
            options["attn_layer_scale"] = KEEP
        apply_structured_init(self, self.attention_init, **options)
        self.structinit_settings = {**self._settings, **init_record(self)}
        if getattr(self, "structinit_shifts", None) is not None:  # the impulse each head started from
            self.structinit_settings["shifts"] = self.structinit_shifts
        if (mode or self.weight_init_mode) not in ("", None):
            self.structinit_settings["weight_init"] = mode or self.weight_init_mode

    def set_input_size(self, img_size: Any = None, patch_size: Any = None) -> None:
        """timm's resize (the position code resampled to the new grid), keeping a fixed code a buffer."""
        super().set_input_size(img_size=img_size, patch_size=patch_size)
        if self.fixed_pos_embed and isinstance(self.pos_embed, nn.Parameter):
            self._pos_embed_to_buffer()


def _create_vision_transformer(variant: str, pretrained: bool = False, **kwargs: Any) -> StructInitVisionTransformer:
    """Build ``variant`` with its pretrained cfg; with ``pretrained=True`` the weights are loaded and the attention
    init does not run."""
    require_hub_weights(variant, pretrained, kwargs)
    model_args = dict(kwargs)
    if pretrained:  # the same network, built without solving: its weights are loaded
        settings = init_settings(model_args.pop("attention_init", "impulse"), _pop_options(model_args))
        if settings.get("pseudo_input") == "learned" and model_args.get("pos_embed", "sincos") == "sincos":
            model_args["pos_embed"] = "learn"  # v2's code trains: a parameter
        model_args["attention_init"] = "default"
    loading = pretrained_args(variant, pretrained, model_args, checkpoint_filter_fn)
    model = build_model_with_cfg(
        StructInitVisionTransformer,
        variant,
        pretrained,
        **loading,
        feature_cfg=dict(out_indices=3, feature_cls="getter"),
        **model_args,
    )
    if pretrained:
        getattr(model, "model", model).structinit_settings = None  # loaded, not initialized (features: wrapped)
    return model


def _pop_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {name: kwargs.pop(name) for name in IMPULSE_KWARGS if name in kwargs}


def _imagenet_cfg(**kwargs: Any) -> dict[str, Any]:
    return cifar_cfg(
        num_classes=1000,
        input_size=(3, 224, 224),
        crop_pct=0.9,
        mean=IMAGENET_DEFAULT_MEAN,
        std=IMAGENET_DEFAULT_STD,
        **kwargs,
    )


# A published checkpoint is a pretrained tag ("<name>.<tag>", an hf_hub_id). timm makes the first tag with weights
# its name's default; the "*" tag listed after it marks the untagged, weightless cfg as the default instead, so the
# bare name builds a freshly initialized model and only the tagged name downloads weights.
default_cfgs = generate_default_cfgs(
    {
        "vit_tiny_patch2_32": cifar_cfg(),
        "vit_tiny_impulse3.cifar10": cifar_cfg(hf_hub_id="structinit-hf/vit_tiny_impulse3.cifar10"),
        "vit_tiny_impulse3.*": cifar_cfg(),
        "vit_tiny_impulse5": cifar_cfg(),
        "vit_tiny_mimetic": cifar_cfg(paper_ids="arXiv:2305.09828"),
        "vit_mimetic": cifar_cfg(paper_ids="arXiv:2305.09828"),
        "vit_tiny_impulse3_patch16_224": _imagenet_cfg(),
        "vit_small_impulse3_patch16_224": _imagenet_cfg(),
        "vit_base_impulse3_patch16_224": _imagenet_cfg(),
    }
)


@register_model
def vit_tiny_patch2_32(pretrained: bool = False, **kwargs) -> StructInitVisionTransformer:
    """ViT-Tiny at 32 px, patch 2, with timm's default init: the control of the paper's CIFAR runs."""
    model_args = dict(
        img_size=32, patch_size=2, embed_dim=192, depth=12, num_heads=3, class_token=False, global_pool="avg",
        attention_init="default",
    )  # fmt: skip
    return _create_vision_transformer("vit_tiny_patch2_32", pretrained, **dict(model_args, **kwargs))


@register_model
def vit_tiny_impulse3(pretrained: bool = False, **kwargs) -> StructInitVisionTransformer:
    """ViT-Tiny at 32 px, patch 2, attention initialized as random 3x3 impulse filters."""
    model_args = dict(
        img_size=32, patch_size=2, embed_dim=192, depth=12, num_heads=3, class_token=False, global_pool="avg",
        attention_init="impulse", kernel_size=3,
    )  # fmt: skip
    return _create_vision_transformer("vit_tiny_impulse3", pretrained, **dict(model_args, **kwargs))


@register_model
def vit_tiny_impulse5(pretrained: bool = False, **kwargs) -> StructInitVisionTransformer:
    """ViT-Tiny at 32 px, patch 2, attention initialized as random 5x5 impulse filters."""
    model_args = dict(
        img_size=32, patch_size=2, embed_dim=192, depth=12, num_heads=3, class_token=False, global_pool="avg",
        attention_init="impulse", kernel_size=5,
    )  # fmt: skip
    return _create_vision_transformer("vit_tiny_impulse5", pretrained, **dict(model_args, **kwargs))


@register_model
def vit_tiny_mimetic(pretrained: bool = False, **kwargs) -> StructInitVisionTransformer:
    """ViT-Tiny at 32 px, patch 2, with mimetic attention init (Trockman & Kolter 2023)."""
    model_args = dict(
        img_size=32, patch_size=2, embed_dim=192, depth=12, num_heads=3, class_token=False, global_pool="avg",
        attention_init="mimetic",
    )  # fmt: skip
    return _create_vision_transformer("vit_tiny_mimetic", pretrained, **dict(model_args, **kwargs))


@register_model
def vit_mimetic(pretrained: bool = False, **kwargs) -> StructInitVisionTransformer:
    """Alias of ``vit_tiny_mimetic``."""
    model_args = dict(
        img_size=32, patch_size=2, embed_dim=192, depth=12, num_heads=3, class_token=False, global_pool="avg",
        attention_init="mimetic",
    )  # fmt: skip
    return _create_vision_transformer("vit_mimetic", pretrained, **dict(model_args, **kwargs))


@register_model
def vit_tiny_impulse3_patch16_224(pretrained: bool = False, **kwargs) -> StructInitVisionTransformer:
    """ViT-Tiny/16 at 224 px (no class token, average pooling, sin-cos), 3x3 impulse init."""
    model_args = dict(
        img_size=224, patch_size=16, depth=12, class_token=False, global_pool="avg", embed_dim=192, num_heads=3,
        attention_init="impulse", kernel_size=3,
    )  # fmt: skip
    return _create_vision_transformer("vit_tiny_impulse3_patch16_224", pretrained, **dict(model_args, **kwargs))


@register_model
def vit_small_impulse3_patch16_224(pretrained: bool = False, **kwargs) -> StructInitVisionTransformer:
    """ViT-Small/16 at 224 px (no class token, average pooling, sin-cos), 3x3 impulse init."""
    model_args = dict(
        img_size=224, patch_size=16, depth=12, class_token=False, global_pool="avg", embed_dim=384, num_heads=6,
        attention_init="impulse", kernel_size=3,
    )  # fmt: skip
    return _create_vision_transformer("vit_small_impulse3_patch16_224", pretrained, **dict(model_args, **kwargs))


@register_model
def vit_base_impulse3_patch16_224(pretrained: bool = False, **kwargs) -> StructInitVisionTransformer:
    """ViT-Base/16 at 224 px (no class token, average pooling, sin-cos), 3x3 impulse init."""
    model_args = dict(
        img_size=224, patch_size=16, depth=12, class_token=False, global_pool="avg", embed_dim=768, num_heads=12,
        attention_init="impulse", kernel_size=3,
    )  # fmt: skip
    return _create_vision_transformer("vit_base_impulse3_patch16_224", pretrained, **dict(model_args, **kwargs))
