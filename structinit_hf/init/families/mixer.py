"""The MLP-Mixer family (and ResMLP, gMLP): every block's token mixer starts as the average of its shifts. A Mixer
has no attention: mimetic init does not apply (``mimetic_init`` is ``None``)."""

from __future__ import annotations

import torch
from torch import nn

from .. import impulse, token_mixing
from ..layouts import MixerLayout, mixer_layout
from ..options import MixerImpulseOptions
from .shared import draw_shifts

__all__ = ["impulse_init", "mimetic_init"]

mimetic_init = None


def impulse_init(model: nn.Module, options: MixerImpulseOptions) -> None:
    model.structinit_shifts = _apply_mixer_impulse(mixer_layout(model), options)


def _apply_mixer_impulse(layout: MixerLayout, options: MixerImpulseOptions) -> list[list[list[int]]]:
    """Make every block's token mixer the average of its shifts (a Mixer's MLP through
    :func:`~.token_mixing.token_mlp_weights`, a single linear map exactly); returns the shifts per block."""
    kernel = options.kernel_size
    impulse.validate_kernel_size(kernel, layout.grid_size)
    counts = [options.num_shifts] * len(layout.mixers)
    drawn = draw_shifts(counts, kernel, options.seed, options.per_layer, options.shift_order)
    for slot, shifts in zip(layout.mixers, drawn, strict=True):
        target = token_mixing.shift_mixing(layout.grid_size, shifts)
        if slot.kind == "mlp":
            fc1, fc2 = slot.layers
            values = token_mixing.token_mlp_weights(target, fc1.out_features, options.token_mlp)
            tensors = (fc1.weight, fc1.bias, fc2.weight, fc2.bias)
        elif slot.kind == "glu":
            fc1, fc2 = slot.layers
            values = token_mixing.token_glu_weights(target, fc2.in_features, slot.gate, slot.gate_last)
            tensors = (fc1.weight, fc1.bias, fc2.weight, fc2.bias)
        else:
            values, tensors = (target, torch.zeros(len(target))), (slot.layers[0].weight, slot.layers[0].bias)
        with torch.no_grad():
            for tensor, value in zip(tensors, values, strict=False):
                if tensor is not None:
                    tensor.copy_(value.to(tensor))
    return [shifts.tolist() for shifts in drawn]
