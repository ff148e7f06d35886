"""timm model registry: plain ViTs whose only difference is how attention starts.

One builder (:func:`create_structinit_vit`), one short function per name; each name's architecture, init
and pretrained cfg come from the variant table the transformers config reads too (``hf/variants.py``).
The networks are timm's own ``VisionTransformer`` (and ``ConVit`` for the peer), so a checkpoint
loads in stock timm; the init runs once, at construction, and never when weights are loaded.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

import torch
from huggingface_hub import is_offline_mode, try_to_load_from_cache
from huggingface_hub.errors import LocalEntryNotFoundError
from timm.models import (
    build_model_with_cfg,
    generate_default_cfgs,
    get_pretrained_cfg,
    register_model,
    resolve_pretrained_cfg,
    split_model_name_tag,
)
from timm.models.convit import ConVit
from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

from .hf.variants import CIFAR10_DATA, TIMM_VARIANTS, check_geometry, to_pair
from .impulse import sincos_2d
from .init import INIT_METHODS, ImpulseOptions, apply_structured_init

__all__ = ["HUB_CHECKPOINTS", "IMPULSE_KWARGS", "POS_EMBEDS", "create_structinit_vit"]

IMPULSE_KWARGS = tuple(ImpulseOptions.__dataclass_fields__)  # kernel_size, seed, pseudo_input, ...
POS_EMBEDS = ("sincos", "learn", "none")


def _init_options(attention_init: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop the init options out of the builder kwargs (they are not VisionTransformer arguments)."""
    options = {name: kwargs.pop(name) for name in IMPULSE_KWARGS if name in kwargs}
    if attention_init == "impulse":
        return options
    if attention_init == "mimetic":
        stray = set(options) - {"seed"}
    else:
        stray = set(options)
    if stray:
        raise ValueError(f"{sorted(stray)} are impulse options; attention_init={attention_init!r} does not take them")
    return options


def init_settings(attention_init: str, options: dict[str, Any]) -> dict[str, Any]:
    """The full settings (defaults filled in) of an attention init, as recorded on a freshly built model."""
    if attention_init == "impulse":
        return {"attention_init": attention_init, **asdict(ImpulseOptions(**options))}
    if attention_init == "mimetic":
        return {"attention_init": attention_init, "seed": options.get("seed", 0)}
    return {"attention_init": attention_init}


def _has_weights(cfg: dict[str, Any]) -> bool:
    return any(cfg.get(key) for key in ("file", "url", "hf_hub_id", "state_dict"))


def create_structinit_vit(
    variant: str,
    pretrained: bool = False,
    attention_init: str = "impulse",
    pos_embed: str = "sincos",
    **kwargs: Any,
) -> VisionTransformer:
    """Build a timm ``VisionTransformer`` and initialize its attention with ``attention_init``.

    ``pos_embed="sincos"`` gives the fixed 2-D sin-cos position embedding of the paper (a frozen
    parameter, so stock timm still loads the checkpoint); ``"learn"`` and ``"none"`` are timm's.
    Impulse options (``kernel_size``, ``seed``, ``pseudo_input``, ``sharpness``, ``solver``,
    ``per_layer``, ``suppress_content``) go to :func:`~structinit_hf.init.apply_structured_init`.
    With ``pretrained=True`` the weights are loaded and no solver runs; otherwise the model's
    ``structinit_settings`` record the init it got (see :func:`init_settings`).
    """
    if attention_init not in INIT_METHODS:
        raise ValueError(f"unknown attention_init {attention_init!r}; expected one of {', '.join(INIT_METHODS)}")
    if pos_embed not in POS_EMBEDS:
        raise ValueError(f"unknown pos_embed {pos_embed!r}; expected one of {', '.join(POS_EMBEDS)}")
    options = _init_options(attention_init, kwargs)
    if attention_init == "impulse":
        ImpulseOptions(**options)  # fail on bad options before building anything
    check_geometry(
        kwargs.get("img_size", 224),
        kwargs.get("patch_size", 16),
        kwargs.get("embed_dim", 768),
        kwargs.get("num_heads", 12),
        sincos=pos_embed == "sincos",
    )
    if pretrained:
        cfg = resolve_pretrained_cfg(
            variant, kwargs.get("pretrained_cfg"), kwargs.get("pretrained_cfg_overlay")
        ).to_dict()
        if not _has_weights(cfg):
            raise ValueError(
                f"{variant} has no published weights yet; pass pretrained=False, or a local file with "
                "pretrained_cfg_overlay=dict(file='model.safetensors')"
            )
    model = build_model_with_cfg(
        VisionTransformer,
        variant,
        pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        feature_cfg=dict(out_indices=3, feature_cls="getter"),
        pos_embed="none" if pos_embed == "none" else "learn",
        **kwargs,
    )
    if pos_embed == "sincos":
        model.pos_embed.requires_grad_(False)
    if not pretrained:
        if pos_embed == "sincos":
            with torch.no_grad():
                prefix = 0 if model.no_embed_class else model.num_prefix_tokens
                model.pos_embed.zero_()
                model.pos_embed[:, prefix:] = sincos_2d(model.patch_embed.grid_size, model.embed_dim)
        apply_structured_init(model, attention_init, **options)
        model.structinit_settings = init_settings(attention_init, options)
        if model.structinit_settings.get("pseudo_input") == "learned":  # v2: a learned embedding, drawn as timm does
            model.pos_embed.requires_grad_(True)
        if kwargs.get("weight_init"):  # timm's init of everything else, e.g. 'reset' for PyTorch's defaults
            model.structinit_settings["weight_init"] = kwargs["weight_init"]
    model.pretrained_cfg = {
        **model.pretrained_cfg,
        "input_size": (model.patch_embed.proj.in_channels, *model.patch_embed.img_size),
        "num_classes": model.num_classes,
    }
    return model


def _create_convit(variant: str, pretrained: bool = False, **kwargs: Any) -> ConVit:
    heads = kwargs.get("num_heads", 4)  # ConViT's embed_dim is per head
    check_geometry(
        kwargs.get("img_size", 224), kwargs.get("patch_size", 16), kwargs.get("embed_dim", 48) * heads, heads
    )
    model = build_model_with_cfg(
        ConVit, variant, pretrained, feature_cfg=dict(out_indices=3, feature_cls="getter"), **kwargs
    )
    img_size = to_pair(model.patch_embed.img_size, "img_size")
    model.pretrained_cfg = {**model.pretrained_cfg, "input_size": (3, *img_size), "num_classes": model.num_classes}
    return model


def _cfg(img_size: int, num_classes: int, crop_pct: float, mean: tuple, std: tuple, paper_ids: str) -> dict[str, Any]:
    return {
        "url": "",
        "num_classes": num_classes,
        "input_size": (3, *to_pair(img_size, "img_size")),
        "pool_size": None,
        "crop_pct": crop_pct,
        "interpolation": "bicubic",
        "fixed_input_size": True,
        "mean": mean,
        "std": std,
        "first_conv": "patch_embed.proj",
        "classifier": "head",
        "license": "apache-2.0",
        "paper_ids": paper_ids,
    }


default_cfgs = generate_default_cfgs(
    {
        **{
            name: _cfg(variant.model_args["img_size"], paper_ids=variant.paper_ids, **variant.data)
            for name, variant in TIMM_VARIANTS.items()
        },
        "convit_tiny_patch2_32": _cfg(32, paper_ids="arXiv:2103.10697", **CIFAR10_DATA),
    }
)

# Published checkpoints (scripts/push_to_hub.py uploads them): "<model>.<tag>" -> Hub repo. Each becomes a pretrained
# tag whose cfg is the model's own plus ``hf_hub_id``; the untagged cfg stays the default, so a bare name still builds
# a freshly initialized model and only the tagged name downloads weights.
HUB_CHECKPOINTS = {"vit_tiny_impulse3.cifar10": "structinit-hf/vit_tiny_impulse3.cifar10"}


def _add_hub_checkpoint_tags(cfgs: dict[str, Any]) -> None:
    for name, repo_id in HUB_CHECKPOINTS.items():
        architecture, tag = split_model_name_tag(name)
        cfgs[architecture].tags.append(tag)  # appended: the untagged, weightless cfg stays the default
        cfgs[architecture].cfgs[tag] = replace(cfgs[architecture].cfgs[""], hf_hub_id=repo_id)


_add_hub_checkpoint_tags(default_cfgs)


def _require_hub_weights(variant: str, pretrained: bool, kwargs: dict[str, Any]) -> None:
    """Fail early, naming the repo, when a published checkpoint must come from the Hub but the Hub is off.

    timm passes the tag of ``vit_tiny_impulse3.cifar10`` as ``pretrained_cfg="cifar10"``; that cfg's ``hf_hub_id``
    is downloaded online and read from the local cache offline (``HF_HUB_OFFLINE=1``).
    """
    tag = kwargs.get("pretrained_cfg")
    if not pretrained or not isinstance(tag, str) or (kwargs.get("pretrained_cfg_overlay") or {}).get("file"):
        return
    repo_id = getattr(get_pretrained_cfg(f"{variant}.{tag}"), "hf_hub_id", None)
    if repo_id and is_offline_mode() and not isinstance(try_to_load_from_cache(repo_id, "model.safetensors"), str):
        raise LocalEntryNotFoundError(
            f"{variant}.{tag} loads its weights from the Hub repo {repo_id}, but HF_HUB_OFFLINE is set and they are "
            "not in the local cache. Run once online to cache them, or pass a local copy with "
            "pretrained_cfg_overlay=dict(file='model.safetensors')."
        )


def _vit(variant: str, pretrained: bool, kwargs: dict[str, Any]) -> VisionTransformer:
    """Build the registered ``variant`` from its entry in :data:`~structinit_hf.hf.variants.TIMM_VARIANTS`."""
    _require_hub_weights(variant, pretrained, kwargs)
    return create_structinit_vit(variant, pretrained, **dict(TIMM_VARIANTS[variant].model_args, **kwargs))


@register_model
def vit_tiny_patch2_32(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT-Tiny at 32 px, patch 2, with timm's default init: the control of the paper's CIFAR runs."""
    return _vit("vit_tiny_patch2_32", pretrained, kwargs)


@register_model
def vit_tiny_impulse3(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT-Tiny at 32 px, patch 2, attention initialized as random 3x3 impulse filters."""
    return _vit("vit_tiny_impulse3", pretrained, kwargs)


@register_model
def vit_tiny_impulse5(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT-Tiny at 32 px, patch 2, attention initialized as random 5x5 impulse filters."""
    return _vit("vit_tiny_impulse5", pretrained, kwargs)


@register_model
def vit_tiny_mimetic(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT-Tiny at 32 px, patch 2, with mimetic attention init (Trockman & Kolter 2023)."""
    return _vit("vit_tiny_mimetic", pretrained, kwargs)


@register_model
def vit_mimetic(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Alias of ``vit_tiny_mimetic``."""
    return _vit("vit_mimetic", pretrained, kwargs)


@register_model
def convit_tiny_patch2_32(pretrained: bool = False, **kwargs) -> ConVit:
    """timm's ConViT-Tiny (d'Ascoli et al. 2021) at 32 px, patch 2: the architectural peer."""
    model_args = dict(img_size=32, patch_size=2, local_up_to_layer=10, locality_strength=1.0, embed_dim=48, num_heads=4)
    return _create_convit("convit_tiny_patch2_32", pretrained, **dict(model_args, **kwargs))


@register_model
def vit_tiny_impulse3_patch16_224(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT-Tiny/16 at 224 px (no class token, average pooling, sin-cos), 3x3 impulse init."""
    return _vit("vit_tiny_impulse3_patch16_224", pretrained, kwargs)


@register_model
def vit_small_impulse3_patch16_224(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT-Small/16 at 224 px (no class token, average pooling, sin-cos), 3x3 impulse init."""
    return _vit("vit_small_impulse3_patch16_224", pretrained, kwargs)


@register_model
def vit_base_impulse3_patch16_224(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT-Base/16 at 224 px (no class token, average pooling, sin-cos), 3x3 impulse init."""
    return _vit("vit_base_impulse3_patch16_224", pretrained, kwargs)
