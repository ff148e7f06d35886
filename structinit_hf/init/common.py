"""Two helpers every init module shares: a size given as one int or a pair, and the seeded random generator."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from numbers import Integral

import torch
from torch import nn

__all__ = ["seeded_generator", "to_pair", "unfuse_attention", "unfused_attention"]


def to_pair(value: int | Sequence[int], name: str = "grid_size") -> tuple[int, int]:
    """``(height, width)`` of an int or a pair; ``ValueError`` naming ``name`` unless both are positive ints."""
    pair = (value, value) if isinstance(value, Integral) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, Integral) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ValueError(f"{name} must be a positive int or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``: every random draw of the inits uses one, so a seed gives the same
    numbers on any device."""
    return torch.Generator().manual_seed(int(seed))


def _fusable(model: nn.Module) -> list[nn.Module]:
    """The modules of ``model`` with both attention paths (timm's ``fused_attn``)."""
    return [module for module in model.modules() if hasattr(module, "fused_attn")]


def unfuse_attention(model: nn.Module) -> int:
    """timm's unfused attention (``fused_attn = False``: matmuls and softmax, the maps materialized) in every module
    that has both paths; how many. On a CPU under bf16 autocast, torch 2.14's flash-attention CPU kernel runs its
    backward about 5x slower than in fp32, and the matmul path makes the whole step 2.5x faster than fp32's fused one
    (docs/benchmarks.md, "The CPU step")."""
    modules = _fusable(model)
    for module in modules:
        module.fused_attn = False
    return len(modules)


@contextmanager
def unfused_attention(model: nn.Module) -> Iterator[None]:
    """:func:`unfuse_attention` inside, each module's own setting back afterwards."""
    before = [(module, module.fused_attn) for module in _fusable(model)]
    unfuse_attention(model)
    try:
        yield
    finally:
        for module, value in before:
            module.fused_attn = value
