"""The Swin family: each head's impulse written exactly into its window's relative position bias (no solve)."""

from __future__ import annotations

import torch
from torch import nn

from .. import token_mixing
from ..layouts import SwinLayout, swin_layout
from ..mimetic import mimetic_qk, mimetic_vo
from ..options import SwinImpulseOptions
from .shared import draw_shifts, layer_seed

__all__ = ["impulse_init", "mimetic_init"]


def impulse_init(model: nn.Module, options: SwinImpulseOptions) -> None:
    model.structinit_shifts = _apply_swin_impulse(swin_layout(model), options)


def mimetic_init(model: nn.Module, seed: int) -> None:
    _apply_swin_mimetic(swin_layout(model), seed)


def _apply_swin_impulse(layout: SwinLayout, options: SwinImpulseOptions) -> list[list[list[int]]]:
    """Write each head's impulse into its window's relative position bias (exact: no solve); returns the ``[dy, dx]``
    of every head per block, clipped to the offsets its window has."""
    counts = [slot.attention.num_heads for slot in layout.attentions]
    drawn = draw_shifts(counts, options.kernel_size, options.seed, options.per_layer, options.shift_order)
    recorded = []
    for index, (slot, shifts) in enumerate(zip(layout.attentions, drawn, strict=True)):
        keys = slot.window_size[0] * slot.window_size[1]
        table = token_mixing.relative_bias_impulse(
            slot.window_size, shifts, token_mixing.bias_logit(options.sharpness, keys)
        )
        with torch.no_grad():
            slot.bias_table.copy_(table.to(slot.bias_table))
        if options.value_init == "mimetic":
            attn = slot.attention
            attn.write_vo(*mimetic_vo(slot.dim, attn.num_heads * attn.head_dim, seed=layer_seed(options.seed, index)))
        recorded.append(token_mixing.clip_shifts(shifts, slot.window_size).tolist())
    return recorded


def _apply_swin_mimetic(layout: SwinLayout, seed: int) -> None:
    for index, slot in enumerate(layout.attentions):
        attn, per_layer = slot.attention, layer_seed(seed, index)
        attn.write_qk(*mimetic_qk(slot.dim, attn.num_heads, attn.head_dim, seed=per_layer))
        attn.write_vo(*mimetic_vo(slot.dim, attn.num_heads * attn.head_dim, seed=per_layer))
