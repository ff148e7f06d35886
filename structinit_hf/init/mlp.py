"""The blocks' MLPs at init: mimetic MLP init (Trockman & Kolter, "Mimetic Initialization of MLPs", arXiv 2602.07156).

The paper's technique gives the first layer of each MLP a nonzero mean. Its value is not in the paper's abstract, the
one part of it this project could read; the construction here is this project's: every weight of the first layer
(``mlp.fc1``, timm's and transformers' alike, or both first layers ``fc1_g``/``fc1_x`` of a SwiGLU MLP; the
``intermediate.dense`` of transformers' older layout) is shifted by the layer's own standard deviation at init, a
mean-to-spread ratio of 1, whatever the model's base init.
Behind a pre-norm block the shift does not change the forward pass at init (a LayerNorm's output sums to zero over
its channels while its scale is 1 and its bias 0): it acts through training. Only the blocks' MLPs (an MLP beside an
attention); a relative-position bias MLP or a Mixer's token MLP is left alone. Pure torch.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["MLP_INITS", "first_mlp_layers", "mimetic_mlp", "validate_mlp_init"]

MLP_INITS = ("default", "mimetic")


def validate_mlp_init(value: str) -> None:
    if value not in MLP_INITS:
        raise ValueError(f"unknown mlp_init {value!r}; expected one of {', '.join(MLP_INITS)}")


def first_mlp_layers(model: nn.Module) -> list[nn.Linear]:
    """The first linear layer(s) of every transformer block's MLP of ``model``, in module order."""
    layers = []
    for block in model.modules():
        attends = hasattr(block, "attn") or hasattr(block, "attention")
        if isinstance(getattr(block, "mlp", None), nn.Module) and attends:  # timm; transformers 5's ViT
            firsts = (getattr(block.mlp, name, None) for name in ("fc1", "fc1_g", "fc1_x"))
            layers += [layer for layer in firsts if isinstance(layer, nn.Linear)]
        elif isinstance(getattr(block, "intermediate", None), nn.Module) and hasattr(
            block, "attention"
        ):  # transformers
            dense = getattr(block.intermediate, "dense", None)
            layers += [dense] if isinstance(dense, nn.Linear) else []
    return layers


def mimetic_mlp(model: nn.Module) -> int:
    """Shift every weight of each block MLP's first layer by that layer's standard deviation; how many layers."""
    layers = first_mlp_layers(model)
    with torch.no_grad():
        for layer in layers:
            layer.weight.add_(layer.weight.float().std().to(layer.weight))
    return len(layers)
