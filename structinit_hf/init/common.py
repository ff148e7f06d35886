"""Two helpers every init module shares: a size given as one int or a pair, and the seeded random generator."""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral

import torch

__all__ = ["seeded_generator", "to_pair"]


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
