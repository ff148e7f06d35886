"""How a freshly initialized ViT's attention looks on real images: the init-health report.

Per block: the spectral norm of the query and key projections (how much a small change of the token
representation moves the logits), the mean attention entropy on real images (``log N`` is uniform), how far
bf16 autocast moves the attention rows (the GPU recipe trains in bf16) and, for impulse inits, the share of
patch-token rows whose attention peaks on the impulse target.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .attention_maps import timm_attention_maps
from .impulse import target_fidelity

__all__ = ["attention_entropy", "init_health", "qk_spectral_norms"]


@torch.no_grad()
def qk_spectral_norms(model: nn.Module) -> list[tuple[float, float]]:
    """``(||W_q||_2, ||W_k||_2)`` of every block of a timm ``VisionTransformer`` (all heads together)."""
    norms = []
    for block in model.blocks:
        weight = block.attn.qkv.weight.float()
        attn_dim = weight.shape[0] // 3
        norms.append(
            tuple(torch.linalg.matrix_norm(weight[i * attn_dim : (i + 1) * attn_dim], 2).item() for i in (0, 1))
        )
    return norms


def _entropy(attention: torch.Tensor) -> tuple[float, float]:
    """Mean row entropy (nats) of ``... x N x N`` maps renormalised over their N keys, and its share of uniform."""
    attention = attention / attention.sum(-1, keepdim=True)
    entropy = -(attention * attention.clamp_min(1e-30).log()).sum(-1).mean().item()
    return entropy, entropy / math.log(attention.shape[-1])


@torch.no_grad()
def attention_entropy(model: nn.Module, images: torch.Tensor) -> list[float]:
    """Per block, the mean attention entropy of the patch rows as a share of uniform: 1 is uniform attention, near 0
    every row on a single key (attention entropy collapse). For a timm ``VisionTransformer`` or ``ConVit``, freshly
    built or trained; keys that are not patches (class, register tokens) are left out."""
    num_patches = model.patch_embed.num_patches
    return [_entropy(m[..., -num_patches:, -num_patches:])[1] for m in timm_attention_maps(model.eval(), images)]


@torch.no_grad()
def init_health(
    model: nn.Module, images: torch.Tensor, block_targets: list[torch.Tensor] | None = None
) -> list[dict[str, Any]]:
    """One row per block: ``q_norm``, ``k_norm``, ``entropy`` (nats, mean over images, heads and patch rows),
    ``entropy_ratio`` (to uniform attention over the patch tokens), ``bf16_shift`` (mean total-variation distance
    between a row computed in fp32 and under bf16 autocast) and, given ``block_targets`` (heads x N x N per block,
    as :func:`~structinit_hf.init.impulse_block_targets` returns), ``hit_rate`` and ``target_mass``."""
    prefix = getattr(model, "num_prefix_tokens", 0)
    maps = [m[..., prefix:, prefix:] for m in timm_attention_maps(model.eval(), images)]
    with torch.autocast(images.device.type, dtype=torch.bfloat16):
        low = [m[..., prefix:, prefix:].float() for m in timm_attention_maps(model, images)]
    rows = []
    for index, ((q_norm, k_norm), attention, bf16) in enumerate(zip(qk_spectral_norms(model), maps, low, strict=True)):
        shift = 0.5 * (attention - bf16).abs().sum(-1).mean().item()
        # renormalised over patch keys, so a prefix token's share does not count as spread
        entropy, ratio = _entropy(attention)
        attention = attention / attention.sum(-1, keepdim=True)
        row = dict(block=index + 1, q_norm=q_norm, k_norm=k_norm, entropy=entropy, entropy_ratio=ratio)
        row["bf16_shift"] = shift
        if block_targets is not None:
            row.update(target_fidelity(attention, block_targets[index].to(attention.device)))
        rows.append(row)
    return rows
