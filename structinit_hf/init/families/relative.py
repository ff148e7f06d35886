"""The relative-position and rotary ViTs (timm's ``vit_relpos_*``, ``vit_*_rope_*``, EVA): each head's impulse
written into its block's relative position term (a bias table or MLP, or a rotary head's query/key biases), then the
self-check on a Gaussian pseudo input."""

from __future__ import annotations

from torch import nn

from .. import impulse
from ..mimetic import mimetic_vo
from ..options import SwinImpulseOptions
from ..relative_layouts import RelativeLayout, relative_layout
from .shared import check_impulse, draw_shifts, layer_seed, mimetic_slots

__all__ = ["impulse_init", "mimetic_init"]


def impulse_init(model: nn.Module, options: SwinImpulseOptions) -> None:
    layout = relative_layout(model)
    model.structinit_shifts = _apply_relative_impulse(layout, options)
    dim = layout.attentions[0].attention.dim
    check_impulse(model, layout.grid_size, impulse.pseudo_input(layout.grid_size, dim, "gaussian", options.seed))


def mimetic_init(model: nn.Module, seed: int) -> None:
    mimetic_slots([slot.attention for slot in relative_layout(model).attentions], seed)


def _apply_relative_impulse(layout: RelativeLayout, options: SwinImpulseOptions) -> list[list[list[int]]]:
    """Write each head's impulse into its block's relative position term (a bias table or MLP, or a rotary head's
    query/key biases); a bias shared by every block takes block 0's shifts, recorded for every block."""
    counts = [slot.attention.num_heads for slot in layout.attentions]
    per_layer = options.per_layer and layout.shared is None
    drawn = draw_shifts(counts, options.kernel_size, options.seed, per_layer, options.shift_order)
    impulse.validate_kernel_size(options.kernel_size, layout.grid_size)
    if layout.shared is not None:
        layout.shared(drawn[0], options.sharpness)
    for index, (slot, shifts) in enumerate(zip(layout.attentions, drawn, strict=True)):
        if slot.write_impulse is not None:
            slot.write_impulse(shifts, options.sharpness)
        if options.value_init == "mimetic":
            attn, seed = slot.attention, layer_seed(options.seed, index)
            attn.write_vo(*mimetic_vo(attn.dim, attn.num_heads * attn.head_dim, seed=seed))
    return [shifts.tolist() for shifts in drawn]
