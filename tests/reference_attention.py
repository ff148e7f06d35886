"""An independent oracle for attention maps: recomputed from each block's input with its own ``qkv`` weights.

The package reads maps with timm's ``AttentionExtract`` (a hook on the map itself); the tests check it against
this arithmetic, so a hook on the wrong module or a map from another forward shows up.
"""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def recomputed_attention(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """Softmax attention (``B x heads x T x T``) of every block of a timm ``VisionTransformer``."""
    inputs: list[torch.Tensor] = []
    hooks = [block.attn.register_forward_pre_hook(lambda _m, args: inputs.append(args[0])) for block in model.blocks]
    try:
        model(images)
    finally:
        for hook in hooks:
            hook.remove()
    maps = []
    for block, x in zip(model.blocks, inputs, strict=True):
        attn = block.attn
        b, t, _ = x.shape
        qkv = attn.qkv(x).reshape(b, t, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
        q, k = attn.q_norm(qkv[0]), attn.k_norm(qkv[1])
        maps.append(torch.softmax(q @ k.transpose(-2, -1) * attn.scale, dim=-1))
    return maps
