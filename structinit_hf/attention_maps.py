"""Read the attention maps of a timm ViT or ConViT: what the pictures, benchmarks and tests look at.

Every map comes from one reader, timm's ``AttentionExtract`` hooked where each block applies dropout
to its attention (:func:`extract_attention`). For ConViT's gated positional blocks that is the gated mixture
of content and positional attention.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from timm.utils import AttentionExtract
from torch import nn

__all__ = ["block_fidelity", "extract_attention", "patch_attention_maps", "timm_attention_maps"]

# where timm's ViT and ConViT blocks (GPSA included) pass each attention map through dropout
ATTENTION_MODULES = ["blocks.*.attn.attn_drop"]


@contextmanager
def extract_attention(model: nn.Module) -> Iterator[AttentionExtract]:
    """timm's ``AttentionExtract`` hooked on every block's attention map of ``model`` (a timm ViT or ConViT).

    Inside the block, each forward of ``model`` leaves the maps (``B x heads x T x T``, in block order) for
    ``extractor.hooks.get_output(device)``; calling ``extractor(images)`` runs a forward and returns them.
    Fused attention never materializes the maps, so it is off meanwhile; ``model`` keeps its train/eval
    mode, and the hooks are removed on exit.
    """
    fused = [(module, module.fused_attn) for module in model.modules() if hasattr(module, "fused_attn")]
    for module, _ in fused:
        module.fused_attn = False
    mode = "train" if model.training else "eval"
    extractor = AttentionExtract(model, names=ATTENTION_MODULES, method="hook", mode=mode)
    try:
        yield extractor
    finally:
        for handle in extractor.hooks._handles:  # timm's FeatureHooks keeps the handles but offers no removal
            handle.remove()
        for module, value in fused:
            module.fused_attn = value


@torch.no_grad()
def timm_attention_maps(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """Attention of every block of a timm ``VisionTransformer`` or ``ConVit`` in eval mode: ``B x heads x T x T``.

    ``T`` counts every token the block sees (class and register tokens first); ``model`` is left in eval mode.
    """
    model.eval()
    with extract_attention(model) as extractor:
        return list(extractor(images).values())


def patch_attention_maps(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """Per block, the attention among patch tokens only (``B x heads x N x N``), prefix tokens dropped.

    Rows keep the weights the patch queries give to patch keys; the share a query gives to a class
    or register token is left out, so rows of models with prefix tokens sum to less than one.
    """
    patches = model.patch_embed.num_patches
    return [m[..., -patches:, -patches:] for m in timm_attention_maps(model, images)]


def block_fidelity(model: nn.Module, images: torch.Tensor, block_targets: list[torch.Tensor]) -> list[dict[str, float]]:
    """Per block, how well the patch-token attention on ``images`` matches the impulse targets.

    Returns ``hit_rate`` (share of valid rows whose argmax is the target) and ``target_mass``
    (mean attention on the target) for each block; see :func:`~structinit_hf.impulse.target_fidelity`.
    """
    from .impulse import target_fidelity

    maps = patch_attention_maps(model, images)
    return [target_fidelity(m, t.to(m.device)) for m, t in zip(maps, block_targets, strict=True)]
