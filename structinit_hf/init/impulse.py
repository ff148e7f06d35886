"""Impulse shifts, targets and pseudo inputs (pure torch); the query/key solvers are in :mod:`.solvers`.

Structured initialization (Zheng, Li, Lucey, arXiv 2404.01139) starts every attention head as a
convolutional impulse filter: head ``h`` attends from patch ``(r, c)`` to patch
``(r + dy_h, c + dx_h)``, with one shift per head drawn from a ``k x k`` window.  The head's query
and key weights ``Q_h, K_h`` (``D x d_h``) are solved so that, on a positional pseudo input ``X``
(``N x D``),

    softmax(X Q_h K_h^T X^T / sqrt(d_h))  ~  H_h                                      (paper eq. 5)

This module has no timm or transformers import: the adapters in :mod:`structinit_hf.init.apply` call it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .common import seeded_generator, to_pair
from .solvers import shift_index

__all__ = [
    "CENTRE_FIRST_CELLS",
    "Grid",
    "LAYER_NORM_EPS",
    "PSEUDO_INPUTS",
    "SHIFT_ORDERS",
    "attention_maps",
    "complement_basis",
    "impulse_logit_targets",
    "impulse_shifts",
    "impulse_targets",
    "index_fidelity",
    "pseudo_input",
    "sincos_2d",
    "target_fidelity",
    "validate_kernel_size",
    "validate_shift_order",
]

PSEUDO_INPUTS = ("sincos", "uniform", "gaussian", "sincos+uniform", "sincos+gaussian", "learned")


SHIFT_ORDERS = ("random", "centre-first")


# the authors' NeurIPS 2025 code gives head i the cell CENTRE_FIRST_CELLS[i % 9] of the 3x3 window (row-major)
CENTRE_FIRST_CELLS = (4, 1, 5, 3, 7, 0, 2, 6, 8)


LAYER_NORM_EPS = 1e-6  # timm's ViT LayerNorm eps, so the pseudo input matches what a block sees


Grid = tuple[int, int]


def validate_kernel_size(kernel_size: int, grid_size: int | Sequence[int] | None = None) -> None:
    """Raise ``ValueError`` unless ``kernel_size`` is a positive odd int that fits the patch grid (if one is given)."""
    if isinstance(kernel_size, bool) or not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be an odd int >= 1 (1, 3, 5, ...), got {kernel_size!r}")
    if grid_size is None:
        return
    h, w = to_pair(grid_size)
    if kernel_size > min(h, w):
        largest = min(h, w) - 1 + min(h, w) % 2  # the largest odd size that fits
        raise ValueError(
            f"kernel_size {kernel_size} does not fit the {h}x{w} patch grid: allowed odd sizes up to {largest}"
        )


def validate_shift_order(order: str, kernel_size: int) -> None:
    """Raise ``ValueError`` unless ``order`` is one of :data:`SHIFT_ORDERS` and fits ``kernel_size`` (the authors'
    ``centre-first`` order lists the cells of a 3x3 window)."""
    if order not in SHIFT_ORDERS:
        raise ValueError(f"unknown shift order {order!r}; expected one of {', '.join(SHIFT_ORDERS)}")
    if order == "centre-first" and kernel_size != 3:
        raise ValueError(f"shift order 'centre-first' is defined for kernel_size 3 only, got {kernel_size}")


def impulse_shifts(
    num_heads: int,
    kernel_size: int,
    seed: int = 0,
    grid_size: int | Sequence[int] | None = None,
    order: str = "random",
) -> torch.Tensor:
    """One ``(dy, dx)`` shift per head from the ``k x k`` window around zero.

    ``order="random"`` draws each head's cell uniformly (the paper); ``"centre-first"`` is the authors'
    NeurIPS 2025 code: head ``i`` takes cell :data:`CENTRE_FIRST_CELLS` ``[i % 9]`` of the 3x3 window
    (the centre, then up, right, left, down, then the corners), whatever the seed; it needs ``k = 3``.
    Returns an int64 tensor of shape ``(num_heads, 2)`` with entries in ``[-(k // 2), k // 2]``.
    """
    if num_heads < 1:
        raise ValueError(f"num_heads must be >= 1, got {num_heads}")
    validate_shift_order(order, kernel_size)
    validate_kernel_size(kernel_size, grid_size)
    if order == "centre-first":
        index = torch.tensor([CENTRE_FIRST_CELLS[head % 9] for head in range(num_heads)])
    else:
        index = torch.randint(0, kernel_size * kernel_size, (num_heads,), generator=seeded_generator(seed))
    half = kernel_size // 2
    return torch.stack([index // kernel_size - half, index % kernel_size - half], dim=1)


def impulse_targets(grid_size: int | Sequence[int], shifts: torch.Tensor) -> torch.Tensor:
    """Target attention maps ``H_h`` of shape ``(heads, N, N)`` for a ``h x w`` patch grid.

    Row ``(r, c)`` of head ``h`` holds a single 1 at ``(r + dy_h, c + dx_h)`` (row-major token
    order).  Rows whose target falls outside the grid are all zero: zero padding at the border.
    """
    target, valid = shift_index(grid_size, shifts)
    return F.one_hot(target, target.shape[-1]).float() * valid.unsqueeze(-1)


def sincos_2d(grid_size: int | Sequence[int], dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """Fixed 2-D sin-cos position encoding of shape ``(h * w, dim)`` (row-major tokens).

    A quarter of the channels each hold ``sin(y w_k)``, ``cos(y w_k)``, ``sin(x w_k)``, ``cos(x w_k)``
    with ``w_k = temperature ** (-k / (dim / 4))``, as in MoCo v3 and the paper's CIFAR models. timm's
    ``build_sincos2d_pos_embed`` is the same code with the quarters ordered ``sin y, sin x, cos y, cos x``.
    """
    h, w = to_pair(grid_size)
    if dim % 4 != 0:
        raise ValueError(f"a 2-D sin-cos encoding needs dim divisible by 4, got dim={dim}")
    omega = temperature ** (-torch.arange(dim // 4, dtype=torch.float64) / (dim // 4))
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    y = ys.reshape(-1, 1) * omega
    x = xs.reshape(-1, 1) * omega
    return torch.cat([y.sin(), y.cos(), x.sin(), x.cos()], dim=1).float()


def pseudo_input(
    grid_size: int | Sequence[int],
    dim: int,
    kind: str = "sincos",
    seed: int = 0,
    noise_scale: float = 1.0,
    normalize: bool = True,
) -> torch.Tensor:
    """The solver's input ``X`` (``N x dim``): LayerNorm of a positional code and/or noise.

    ``kind`` is one of :data:`PSEUDO_INPUTS`: the sin-cos encoding (the paper's default), uniform
    noise in ``[-1, 1]``, standard Gaussian noise, the encoding plus either noise scaled by
    ``noise_scale``, or ``"learned"``: the draw timm gives a learned position embedding (truncated
    normal, std 0.02), which is what the authors' v2 code solves on.  LayerNorm (no affine, eps 1e-6)
    is what a ViT block applies before attention; ``normalize=False`` returns the code before it
    (what a model adds as its position embedding).
    """
    if kind not in PSEUDO_INPUTS:
        raise ValueError(f"unknown pseudo input {kind!r}; expected one of {', '.join(PSEUDO_INPUTS)}")
    h, w = to_pair(grid_size)
    generator = seeded_generator(seed)
    x = sincos_2d((h, w), dim) if kind.startswith("sincos") else torch.zeros(h * w, dim)
    if kind.endswith("uniform"):
        x = x + noise_scale * (2 * torch.rand(h * w, dim, generator=generator) - 1)
    elif kind.endswith("gaussian"):
        x = x + noise_scale * torch.randn(h * w, dim, generator=generator)
    elif kind == "learned":
        x = torch.nn.init.trunc_normal_(x, std=0.02, a=-2.0, b=2.0, generator=generator)
    return F.layer_norm(x, (dim,), eps=LAYER_NORM_EPS) if normalize else x


def complement_basis(
    dim: int,
    exact: torch.Tensor | None = None,
    approximate: torch.Tensor | None = None,
    max_removed: int | None = None,
) -> torch.Tensor:
    """Orthonormal basis (``dim x dim'``) of directions that Q/K may read.

    Every direction in the span of ``exact`` (``dim x m``) is removed.  Of ``approximate``
    (``dim x p``, e.g. the patch embedding's columns) the principal directions left after that are
    removed strongest first, until ``max_removed`` directions in all are gone (default: half of
    ``dim``), so a head always keeps room for its positional pattern.
    """
    max_removed = dim // 2 if max_removed is None else max_removed
    basis = torch.eye(dim, dtype=torch.float64)
    for directions, exactly in ((exact, True), (approximate, False)):
        if directions is None or directions.numel() == 0 or basis.shape[1] <= dim - max_removed:
            continue
        projected = basis.T @ directions.detach().double().cpu()
        u, s, _ = torch.linalg.svd(projected, full_matrices=True)
        rank = int((s > s.max() * 1e-6).sum()) if s.numel() and s.max() > 0 else 0
        budget = basis.shape[1] - (dim - max_removed)
        if exactly and rank > budget:
            raise ValueError(f"cannot hide {rank} directions from a {dim}-dim attention and keep {dim - max_removed}")
        basis = basis @ u[:, min(rank, budget) :]
    return basis.float()


def attention_maps(x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """``softmax(X Q_h K_h^T X^T * scale)`` for every head: ``(heads, N, N)``; scale defaults to 1/sqrt(d_h)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    xq = torch.einsum("nd,hde->hne", x, q)
    xk = torch.einsum("nd,hde->hne", x, k)
    return torch.softmax(xq @ xk.transpose(1, 2) * scale, dim=-1)


def target_fidelity(maps: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """How well attention maps match impulse targets, over rows whose target is inside the grid.

    ``hit_rate``: share of those rows whose argmax is the target; ``target_mass``: mean attention
    weight on the target.  ``maps`` may carry a leading batch dimension.
    """
    return index_fidelity(maps, targets.argmax(-1), targets.sum(-1) > 0)


def index_fidelity(maps: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> dict[str, float]:
    """:func:`target_fidelity` of targets as index maps (``target[h, i]`` the key of row ``i``'s target, ``valid``
    where it has one: :func:`~structinit_hf.init.solvers.shift_index`), without the dense ``N x N`` maps."""
    if maps.dim() == target.dim() + 2:
        valid = valid.expand(maps.shape[0], *valid.shape)
        target = target.expand(maps.shape[0], *target.shape)
    hits = maps.argmax(-1) == target
    mass = maps.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return {"hit_rate": hits[valid].float().mean().item(), "target_mass": mass[valid].float().mean().item()}


def impulse_logit_targets(grid_size: int | Sequence[int], targets: torch.Tensor) -> torch.Tensor:
    """Additive logit targets for the closed-form solve: ``(heads, N, N)``.

    For a valid row, ``+1`` on keys in the target's column, ``+1`` on keys in the target's row, ``-1``
    everywhere: the target scores 1, the rest of its row and column 0, all other keys -1.  Padded
    rows are all zero.  A bilinear form of sin-cos features is a sum of an x-kernel and a y-kernel,
    so this shape is what it can represent; and because no key but the target scores above zero,
    the per-key rescaling that LayerNorm applies on real images cannot lift another key over it.
    """
    h, w = to_pair(grid_size)
    n = h * w
    if targets.shape[-1] != n:
        raise ValueError(f"targets have {targets.shape[-1]} keys but the grid {h}x{w} has {n} tokens")
    valid = targets.sum(-1, keepdim=True) > 0
    target = targets.argmax(-1, keepdim=True)
    rows, cols = torch.arange(n, device=targets.device) // w, torch.arange(n, device=targets.device) % w
    same_row = (target // w == rows).to(targets.dtype)
    same_col = (target % w == cols).to(targets.dtype)
    return (same_row + same_col - 1) * valid
