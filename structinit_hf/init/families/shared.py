"""What every family's construction shares: per-layer seeds, the shifts each block draws, mimetic Q/K and V/O into
attention slots, and the impulse's self-check."""

from __future__ import annotations

import torch
from torch import nn

from .. import impulse
from ..check import attention_blocks, block_patterns, require_pattern
from ..layouts import AttentionSlot
from ..mimetic import mimetic_qk, mimetic_vo

__all__ = ["check_impulse", "draw_shifts", "layer_seed", "mimetic_slots", "mimetic_vo_slots"]


def layer_seed(seed: int, index: int) -> int:
    return seed + 1000 * index  # every layer draws its own Z, as in the paper


def mimetic_vo_slots(slots: list[AttentionSlot], seed: int) -> None:
    """Mimetic value/output (``W_v W_proj ~ a Z - b I``) into every slot, each layer its own ``Z``."""
    for index, slot in enumerate(slots):
        slot.write_vo(*mimetic_vo(slot.dim, slot.num_heads * slot.head_dim, seed=layer_seed(seed, index)))


def mimetic_slots(slots: list[AttentionSlot], seed: int) -> None:
    """Mimetic init (Q/K and V/O) into every slot."""
    for index, slot in enumerate(slots):
        slot.write_qk(*mimetic_qk(slot.dim, slot.num_heads, slot.head_dim, seed=layer_seed(seed, index)))
        slot.write_vo(*mimetic_vo(slot.dim, slot.num_heads * slot.head_dim, seed=layer_seed(seed, index)))


def draw_shifts(counts: list[int], kernel_size: int, seed: int, per_layer: bool, order: str) -> list[torch.Tensor]:
    """``counts[i]`` shifts for block ``i`` from the ``k x k`` window: seed ``seed + i`` if ``per_layer``, else
    ``seed`` for every block (blocks of more heads then extend the same draw)."""
    return [
        impulse.impulse_shifts(count, kernel_size, seed + index if per_layer else seed, order=order)
        for index, count in enumerate(counts)
    ]


def check_impulse(
    model: nn.Module, grid: tuple[int, int], tokens: torch.Tensor, prefix_tokens: list[torch.Tensor] | None = None
) -> None:
    """Measure the written pattern per block (``model.structinit_check``) and refuse where it falls short; a ViT's
    ``prefix_tokens`` (its class and register tokens, maybe none) with ``tokens`` are every token a block sees."""
    if any(p.is_meta for p in model.parameters()) or not attention_blocks(model):
        return
    prefix = None if prefix_tokens is None else torch.stack(prefix_tokens) if prefix_tokens else tokens[:0]
    model.structinit_check = block_patterns(model, model.structinit_shifts, grid, tokens, prefix)
    require_pattern(model, model.structinit_check)
