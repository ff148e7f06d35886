"""Read the attention maps of a timm ViT: what the pictures, benchmarks and tests look at."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["timm_attention_maps"]


@torch.no_grad()
def timm_attention_maps(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """Softmax attention of every block of a timm ``VisionTransformer``: a list of ``B x heads x T x T``.

    The maps are recomputed from each block's attention input with its own ``qkv`` weights, so they
    are exact whether or not timm uses fused (flash) attention for the forward pass.
    """
    inputs: list[torch.Tensor] = []
    hooks = [block.attn.register_forward_pre_hook(lambda _m, args: inputs.append(args[0])) for block in model.blocks]
    try:
        model(images)
    finally:
        for hook in hooks:
            hook.remove()
    maps = []
    for block, x in zip(model.blocks, inputs):
        attn = block.attn
        b, t, _ = x.shape
        qkv = attn.qkv(x).reshape(b, t, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
        q, k = attn.q_norm(qkv[0]), attn.k_norm(qkv[1])
        maps.append(torch.softmax(q @ k.transpose(-2, -1) * attn.scale, dim=-1))
    return maps
