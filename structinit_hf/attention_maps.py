"""Read the attention maps of a timm ViT or ConViT: what the pictures, benchmarks and tests look at.

Every map comes from one reader, timm's ``AttentionExtract`` hooked where each block applies dropout
to its attention (:func:`~structinit_hf.hf.modeling_structinit_vit.extract_attention`, also behind
``output_attentions`` of the transformers models).  For ConViT's gated positional blocks that is the
gated mixture of content and positional attention.
"""

from __future__ import annotations

import torch
from torch import nn

from .hf.modeling_structinit_vit import extract_attention

__all__ = ["block_fidelity", "patch_attention_maps", "timm_attention_maps"]


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
