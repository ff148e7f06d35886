"""Read the attention maps of a timm ViT: what the pictures, benchmarks and tests look at."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["attention_inputs", "block_fidelity", "timm_attention_maps"]


@torch.no_grad()
def attention_inputs(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """What each block's attention layer receives (after its norm) when ``model`` sees ``images``."""
    inputs: list[torch.Tensor] = []
    hooks = [block.attn.register_forward_pre_hook(lambda _m, args: inputs.append(args[0])) for block in model.blocks]
    try:
        model(images)
    finally:
        for hook in hooks:
            hook.remove()
    return inputs


@torch.no_grad()
def timm_attention_maps(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """Softmax attention of every block of a timm ``VisionTransformer``: a list of ``B x heads x T x T``.

    The maps are recomputed from each block's attention input with its own ``qkv`` weights, so they
    are exact whether or not timm uses fused (flash) attention for the forward pass.
    """
    maps = []
    for block, x in zip(model.blocks, attention_inputs(model, images), strict=True):
        attn = block.attn
        b, t, _ = x.shape
        qkv = attn.qkv(x).reshape(b, t, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
        q, k = attn.q_norm(qkv[0]), attn.k_norm(qkv[1])
        maps.append(torch.softmax(q @ k.transpose(-2, -1) * attn.scale, dim=-1))
    return maps


def block_fidelity(model: nn.Module, images: torch.Tensor, block_targets: list[torch.Tensor]) -> list[dict[str, float]]:
    """Per block, how well the patch-token attention on ``images`` matches the impulse targets.

    Returns ``hit_rate`` (share of valid rows whose argmax is the target) and ``target_mass``
    (mean attention on the target) for each block; see :func:`~structinit_hf.impulse.target_fidelity`.
    """
    from .impulse import target_fidelity

    prefix = getattr(model, "num_prefix_tokens", 0)
    maps = timm_attention_maps(model, images)
    return [target_fidelity(m[..., prefix:, prefix:], t.to(m.device)) for m, t in zip(maps, block_targets, strict=True)]
