"""The layer scale of a block's attention branch: where a timm or transformers ViT keeps it, and setting it.

Layer scale (CaiT, DeiT-III) multiplies each residual branch by a learned per-channel ``gamma`` that starts small
(timm: 1e-6 in ``deit3_*`` and ``vit_relpos_*``, 1e-5 in the rotary ViTs of ``eva.py``). At 1e-5 an attention
pattern written by an init reaches the residual stream scaled to almost nothing until the scale has grown; the
impulse init's ``attn_layer_scale`` opens the attention branch to a chosen value and leaves the MLP branch as built.
Found by attribute names, pure torch: timm's ``ls1.gamma`` (``Block``, ``RelPosBlock``, DeiT-III), ``gamma_1``
(``EvaBlock``, CaiT), transformers' ``lambda_1`` (BEiT, Data2VecVision).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["attention_layer_scale", "attention_scales", "set_attention_scale"]


def _scale_of(block: nn.Module) -> nn.Parameter | None:
    ls1 = getattr(block, "ls1", None)
    if isinstance(getattr(ls1, "gamma", None), nn.Parameter):
        return ls1.gamma
    for name in ("gamma_1", "lambda_1"):
        value = getattr(block, name, None)
        if isinstance(value, nn.Parameter):
            return value
    return None


def attention_scales(model: nn.Module) -> list[nn.Parameter]:
    """The attention branch's layer scale of every block of ``model`` that has one, in module order."""
    return [scale for scale in map(_scale_of, model.modules()) if scale is not None]


def attention_layer_scale(model: nn.Module) -> float | None:
    """The mean attention-branch layer scale over ``model``'s blocks (as it stands: read at init, what the model
    starts with), rounded to 4 significant digits; ``None`` where no block has one (the branch is not scaled)."""
    scales = attention_scales(model)
    if not scales or any(scale.is_meta for scale in scales):
        return None
    with torch.no_grad():
        mean = torch.cat([scale.detach().float().flatten().cpu() for scale in scales]).mean().item()
    return float(f"{mean:.4g}")


def set_attention_scale(model: nn.Module, value: float) -> int:
    """Fill the attention branch's layer scale of every block of ``model`` with ``value``; how many blocks."""
    scales = attention_scales(model)
    with torch.no_grad():
        for scale in scales:
            scale.fill_(value)
    return len(scales)
