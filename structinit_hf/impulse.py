"""Impulse targets, pseudo inputs and the query/key solver (pure torch).

Structured initialization (Zheng, Li, Lucey, arXiv 2404.01139) starts every attention head as a
convolutional impulse filter: head ``h`` attends from patch ``(r, c)`` to patch
``(r + dy_h, c + dx_h)``, with one shift per head drawn from a ``k x k`` window.  The head's query
and key weights ``Q_h, K_h`` (``D x d_h``) are solved so that, on a positional pseudo input ``X``
(``N x D``),

    softmax(X Q_h K_h^T X^T / sqrt(d_h))  ~  H_h                                      (paper eq. 5)

This module has no timm or transformers import: the adapters in :mod:`structinit_hf.init` call it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F

from .mimetic import low_rank_factors

__all__ = [
    "PSEUDO_INPUTS",
    "SHIFT_ORDERS",
    "SOLVERS",
    "attention_maps",
    "complement_basis",
    "impulse_logit_targets",
    "impulse_shifts",
    "impulse_targets",
    "pseudo_input",
    "sincos_2d",
    "solve_qk",
    "target_fidelity",
    "validate_kernel_size",
]

PSEUDO_INPUTS = ("sincos", "uniform", "gaussian", "sincos+uniform", "sincos+gaussian", "learned")
SOLVERS = ("svd", "adam", "pinv", "shift")
SHIFT_ORDERS = ("random", "centre-first")
# the authors' NeurIPS 2025 code gives head i the cell CENTRE_FIRST_CELLS[i % 9] of the 3x3 window (row-major)
CENTRE_FIRST_CELLS = (4, 1, 5, 3, 7, 0, 2, 6, 8)
_RCOND_STEPS = (0.1, 0.05, 0.03, 0.01, 3e-3, 1e-3, 1e-4)
_CHECK_HIT_RATE = 0.9  # share of valid rows that must peak on target, on the pseudo input and each check input
LAYER_NORM_EPS = 1e-6  # timm's ViT LayerNorm eps, so the pseudo input matches what a block sees

Grid = tuple[int, int]


def _grid(grid_size: int | Sequence[int]) -> Grid:
    if isinstance(grid_size, int):
        grid_size = (grid_size, grid_size)
    h, w = (int(s) for s in grid_size)
    if h < 1 or w < 1:
        raise ValueError(f"grid_size must be positive, got {tuple(grid_size)}")
    return h, w


def _generator(seed: int) -> torch.Generator:
    # Random draws always happen on a CPU generator, so a seed gives the same numbers on any device.
    return torch.Generator().manual_seed(int(seed))


def validate_kernel_size(kernel_size: int, grid_size: int | Sequence[int]) -> None:
    """Raise ``ValueError`` unless ``kernel_size`` is a positive odd int that fits the patch grid."""
    h, w = _grid(grid_size)
    if isinstance(kernel_size, bool) or not isinstance(kernel_size, int):
        raise ValueError(f"kernel_size must be an odd int >= 1, got {kernel_size!r}")
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be an odd int >= 1 (1, 3, 5, ...), got {kernel_size}")
    if kernel_size > min(h, w):
        raise ValueError(
            f"kernel_size {kernel_size} does not fit the {h}x{w} patch grid: it must be at most {min(h, w)}"
        )


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
    if order not in SHIFT_ORDERS:
        raise ValueError(f"unknown shift order {order!r}; expected one of {', '.join(SHIFT_ORDERS)}")
    validate_kernel_size(kernel_size, grid_size if grid_size is not None else kernel_size)
    if order == "centre-first":
        if kernel_size != 3:
            raise ValueError(f"shift order 'centre-first' is defined for kernel_size 3 only, got {kernel_size}")
        index = torch.tensor([CENTRE_FIRST_CELLS[head % 9] for head in range(num_heads)])
    else:
        index = torch.randint(0, kernel_size * kernel_size, (num_heads,), generator=_generator(seed))
    half = kernel_size // 2
    return torch.stack([index // kernel_size - half, index % kernel_size - half], dim=1)


def impulse_targets(grid_size: int | Sequence[int], shifts: torch.Tensor) -> torch.Tensor:
    """Target attention maps ``H_h`` of shape ``(heads, N, N)`` for a ``h x w`` patch grid.

    Row ``(r, c)`` of head ``h`` holds a single 1 at ``(r + dy_h, c + dx_h)`` (row-major token
    order).  Rows whose target falls outside the grid are all zero: zero padding at the border.
    """
    h, w = _grid(grid_size)
    shifts = torch.as_tensor(shifts, dtype=torch.long).reshape(-1, 2)
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    rows, cols = rows.reshape(-1), cols.reshape(-1)
    targets = torch.zeros(len(shifts), h * w, h * w)
    for head, (dy, dx) in enumerate(shifts.tolist()):
        tr, tc = rows + dy, cols + dx
        valid = (tr >= 0) & (tr < h) & (tc >= 0) & (tc < w)
        targets[head, torch.arange(h * w)[valid], (tr * w + tc)[valid]] = 1.0
    return targets


def sincos_2d(grid_size: int | Sequence[int], dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """Fixed 2-D sin-cos position encoding of shape ``(h * w, dim)`` (row-major tokens).

    A quarter of the channels each hold ``sin(y w_k)``, ``cos(y w_k)``, ``sin(x w_k)``, ``cos(x w_k)``
    with ``w_k = temperature ** (-k / (dim / 4))``, as in MoCo v3 and the paper's CIFAR models.
    """
    h, w = _grid(grid_size)
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
    h, w = _grid(grid_size)
    generator = _generator(seed)
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
    valid = targets.sum(-1) > 0
    target_index = targets.argmax(-1)
    if maps.dim() == targets.dim() + 1:
        valid = valid.expand(maps.shape[0], *valid.shape)
        target_index = target_index.expand(maps.shape[0], *target_index.shape)
    hits = maps.argmax(-1) == target_index
    mass = maps.gather(-1, target_index.unsqueeze(-1)).squeeze(-1)
    return {"hit_rate": hits[valid].float().mean().item(), "target_mass": mass[valid].float().mean().item()}


def impulse_logit_targets(grid_size: int | Sequence[int], targets: torch.Tensor) -> torch.Tensor:
    """Additive logit targets for the closed-form solve: ``(heads, N, N)``.

    For a valid row, ``+1`` on keys in the target's column, ``+1`` on keys in the target's row, ``-1``
    everywhere: the target scores 1, the rest of its row and column 0, all other keys -1.  Padded
    rows are all zero.  A bilinear form of sin-cos features is a sum of an x-kernel and a y-kernel,
    so this shape is what it can represent; and because no key but the target scores above zero,
    the per-key rescaling that LayerNorm applies on real images cannot lift another key over it.
    """
    h, w = _grid(grid_size)
    n = h * w
    if targets.shape[-1] != n:
        raise ValueError(f"targets have {targets.shape[-1]} keys but the grid {h}x{w} has {n} tokens")
    valid = targets.sum(-1, keepdim=True) > 0
    target = targets.argmax(-1, keepdim=True)
    rows, cols = torch.arange(n, device=targets.device) // w, torch.arange(n, device=targets.device) % w
    same_row = (target // w == rows).to(targets.dtype)
    same_col = (target % w == cols).to(targets.dtype)
    return (same_row + same_col - 1) * valid


def solve_qk(
    x: torch.Tensor,
    targets: torch.Tensor,
    head_dim: int,
    method: Literal["svd", "adam", "pinv", "shift"] = "svd",
    *,
    grid_size: int | Sequence[int] | None = None,
    sharpness: float | None = 0.7,
    basis: torch.Tensor | None = None,
    check_inputs: torch.Tensor | None = None,
    null_keys: int = 0,
    seed: int = 0,
    steps: int = 10_000,
    lr: float = 1e-4,
    norm_every: int = 100,
    qk_frobenius: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Solve query/key weights ``Q, K`` (each ``heads x D x head_dim``) for impulse targets.

    ``x`` is the pseudo input (``N x D``), ``targets`` the maps of :func:`impulse_targets` on a
    ``grid_size`` patch grid (default: square).  With a ``basis`` (``D x D'``, orthonormal columns)
    Q and K are confined to its span, so input components outside it (image content from the patch
    embedding, prefix tokens) cannot move the logits.

    ``method="svd"`` (default) is a closed form.  In the whitened coordinates of the thin SVD
    ``X = U S V^T``, the additive logit target ``T_h`` of :func:`impulse_logit_targets` is projected
    to ``A_h = U^T T_h U`` and truncated to rank ``head_dim`` by its SVD ``A_h ~ P S_a R^T``; then
    ``Q_h = V S^-1 P S_a^1/2`` and ``K_h = V S^-1 R S_a^1/2`` (over the kept directions of X) give
    the best rank-``head_dim`` logit fit.  Directions X barely spans need large weights, which
    amplify whatever else reaches them in deeper blocks; so each head keeps the fewest directions
    (largest cut-off of :data:`_RCOND_STEPS`) whose fit puts the argmax of at least 90% of the valid
    rows on the target, on ``x`` and on each ``check_inputs`` sample (``B x N x D``: the pseudo
    input with simulated image content).  Finally one scale per head is set by bisection so the
    mean attention mass on the target, on ``x``, equals ``sharpness``.  Heads with the same target get
    the same solution, computed once.  ``null_keys`` counts keys
    outside the solve whose logit is zero (prefix tokens such as a class token, hidden by the
    basis): a target must score above them, and they take their share of the softmax.

    ``method="adam"`` is the paper's reference recipe: Adam (lr 1e-4, ``steps`` = 10,000) on the
    MSE between ``softmax(X Q K^T X^T / sqrt(head_dim))`` and the target, from a uniform start, with
    every column of Q and K reset to the initial mean column norm each ``norm_every`` steps.

    ``method="pinv"`` is the closed form of the authors' NeurIPS 2025 code (arXiv 2505.19985): logit
    target 1000 on the impulse and ``3 * N(0, 0.6^2)`` noise (truncated to +-2) on every other key,
    projected through the rank-``head_dim`` pseudo-inverse of ``x``, factored by an SVD with the
    singular values split evenly, and each head's Q and K scaled to unit Frobenius norm.

    ``method="shift"`` keeps mimetic init's form and scale (Trockman & Kolter 2023: ``Q_h K_h^T ~ 0.7 Z_h +
    0.7 I``) and points its identity at the impulse: on the span of ``x``, ``I`` becomes the least-squares map
    ``M_h`` that sends each token of the pseudo input to the token its impulse points at (``x_i M_h ~ x_{i+s}``,
    valid rows), so a query scores its shifted neighbour's key as mimetic scores its own; off that span ``I`` stays.
    Directions ``x`` spans below 1% of its largest singular value are left out, which bounds the gains. Attention
    then starts soft, peaked on the target (about 5 to 25 times the uniform mass at the CIFAR sizes) rather than
    on it; ``Z_h`` is drawn from ``seed``, one per head. Factored to rank ``head_dim`` by an SVD, as mimetic's is.

    ``qk_frobenius > 0`` then rescales each head's Q and K to that Frobenius norm, whatever the solver
    (and replaces the sharpness bisection of ``"svd"``).

    Deterministic for a given ``seed``; computed on ``x.device`` and returned in ``x.dtype``.
    """
    if method not in SOLVERS:
        raise ValueError(f"unknown solver {method!r}; expected one of {', '.join(SOLVERS)}")
    if method == "svd" and not qk_frobenius and not (sharpness is not None and 0.0 < sharpness < 1.0):
        raise ValueError(f"sharpness is the attention mass on the target and must be in (0, 1), got {sharpness}")
    if qk_frobenius < 0:
        raise ValueError(f"qk_frobenius is a norm per head: >= 0 (0: the solver's own scale), got {qk_frobenius}")
    n, dim = x.shape
    if targets.dim() != 3 or targets.shape[1:] != (n, n):
        raise ValueError(
            f"targets must have shape (heads, {n}, {n}) for a pseudo input of {n} tokens, got {tuple(targets.shape)}"
        )
    if head_dim < 1:
        raise ValueError(f"head_dim must be >= 1, got {head_dim}")
    device, dtype = x.device, x.dtype
    targets = targets.to(device=device, dtype=torch.float32)
    basis = torch.eye(dim, device=device) if basis is None else basis.to(device=device, dtype=torch.float32)
    xb = x.float() @ basis

    if method == "svd":
        if grid_size is None:
            side = math.isqrt(n)
            if side * side != n:
                raise ValueError(f"{n} tokens is not a square grid: pass grid_size=(h, w)")
            grid_size = (side, side)
        checks = xb.unsqueeze(0)
        if check_inputs is not None:
            checks = torch.cat([checks, check_inputs.to(device=device, dtype=torch.float32) @ basis])
        # the construction depends on a head's target alone: solve each distinct target once (a 3x3 window has 9)
        distinct, head_of = torch.unique(targets.flatten(1), dim=0, return_inverse=True)
        distinct = distinct.view(-1, n, n)
        logits = impulse_logit_targets(grid_size, distinct)
        q, k = _closed_form(xb, logits, distinct, head_dim, checks, null_keys)
        if not qk_frobenius:
            q, k = _set_sharpness(xb, distinct, q, k, sharpness, null_keys)
        q, k = q[head_of], k[head_of]
    elif method == "pinv":
        q, k = _pinv_reference(xb, targets, head_dim, seed=seed)
    elif method == "shift":
        q, k = _shifted_identity(xb, targets, head_dim, seed=seed)
    else:
        q, k = _adam_reference(xb, targets, head_dim, seed=seed, steps=steps, lr=lr, norm_every=norm_every)
    if qk_frobenius:
        q = q * (qk_frobenius / q.flatten(1).norm(dim=1).clamp_min(1e-12)).view(-1, 1, 1)
        k = k * (qk_frobenius / k.flatten(1).norm(dim=1).clamp_min(1e-12)).view(-1, 1, 1)
    return (basis @ q).to(dtype), (basis @ k).to(dtype)


def _logits(x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, null_keys: int) -> torch.Tensor:
    """``X Q K^T X^T`` per head, with ``null_keys`` zero-logit columns appended."""
    logits = (x @ q) @ (x @ k).transpose(1, 2)
    return F.pad(logits, (0, null_keys)) if null_keys else logits


def _hit_rate(
    checks: torch.Tensor, q: torch.Tensor, k: torch.Tensor, targets: torch.Tensor, null_keys: int
) -> torch.Tensor:
    """Per head: share of valid rows, over all check inputs, whose argmax logit is the target."""
    valid = targets.sum(-1) > 0
    hits = torch.zeros(q.shape[0], dtype=torch.float64, device=q.device)
    for xc in checks:
        fit = _logits(xc, q, k, null_keys)  # float32: an argmax, checked against a share of rows
        hits += ((fit.argmax(-1) == targets.argmax(-1)) & valid).sum(-1) / valid.sum(-1).clamp_min(1)
    return hits / len(checks)


def _closed_form(
    xb: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor, head_dim: int, checks: torch.Tensor, null_keys: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank-``head_dim`` least-squares fit of ``logits`` with the fewest input directions that keep the pattern."""
    u_all, s_all, vh_all = torch.linalg.svd(xb.double(), full_matrices=False)
    heads = logits.shape[0]
    # keys read through (I - b m^T) K, with X b ~ 1 and m the mean token, score x_i Q K^T (x_j - m): rows centred
    mean_token = xb.double().mean(0)
    ones_map = torch.linalg.lstsq(xb.double(), torch.ones(xb.shape[0], 1, dtype=torch.float64)).solution[:, 0]
    best_q = best_k = None
    best_hits = torch.full((heads,), -1.0, dtype=torch.float64, device=xb.device)
    for rcond in _RCOND_STEPS:
        keep = s_all > s_all[0] * rcond
        u, s, v = u_all[:, keep], s_all[keep], vh_all[keep].T
        p, sa, rh = torch.linalg.svd(u.T @ logits.double() @ u)
        rank = min(head_dim, sa.shape[-1])
        p, sa, r = p[..., :rank], sa[..., :rank], rh[..., :rank, :].transpose(-1, -2)
        # fix the SVD's sign freedom so the result does not depend on the LAPACK build
        flip = torch.sign(p.gather(-2, p.abs().argmax(-2, keepdim=True)))
        root = sa.sqrt().unsqueeze(-2)
        q = F.pad(v @ (p * flip / s.unsqueeze(-1)) * root, (0, head_dim - rank))
        k = F.pad(v @ (r * flip / s.unsqueeze(-1)) * root, (0, head_dim - rank))
        if null_keys:  # the fit's absolute level is loose: centre each row, so the target scores above 0
            k = k - ones_map.unsqueeze(-1) * (mean_token @ k).unsqueeze(-2)
        open_heads = best_hits < _CHECK_HIT_RATE  # a head that passed keeps its fit: only the others are checked
        hits = best_hits.clone()
        hits[open_heads] = _hit_rate(
            checks, q[open_heads].float(), k[open_heads].float(), targets[open_heads], null_keys
        )
        better = (hits > best_hits + 1e-9) & open_heads
        if best_q is None:
            best_q, best_k = q.clone(), k.clone()
        best_q[better], best_k[better] = q[better], k[better]
        best_hits = torch.where(better, hits, best_hits)
        if bool((best_hits >= _CHECK_HIT_RATE).all()):
            break
    return best_q.float(), best_k.float()


def _set_sharpness(
    xb: torch.Tensor, targets: torch.Tensor, q: torch.Tensor, k: torch.Tensor, sharpness: float, null_keys: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale each head's logits (by bisection in log space) until its mean attention mass on the target (valid rows)
    is ``sharpness``. Scaling Q and K by ``sqrt(c)`` scales the logits by ``c``, so they are computed once, and a
    row's mass on its target is ``exp(c l_target - logsumexp(c l))``."""
    logits = _logits(xb, q, k, null_keys) * q.shape[-1] ** -0.5
    valid = (targets.sum(-1) > 0).float()
    at_target = logits.gather(-1, targets.argmax(-1, keepdim=True)).squeeze(-1)
    lo = torch.full((q.shape[0],), -12.0, device=q.device)
    hi = torch.full((q.shape[0],), 12.0, device=q.device)
    for _ in range(30):  # the bracket shrinks to 24 / 2^30 in log scale
        mid = (lo + hi) / 2
        scale = mid.exp().view(-1, 1)
        mass = torch.exp(scale * at_target - torch.logsumexp(logits * scale.unsqueeze(-1), dim=-1))
        below = (mass * valid).sum(-1) / valid.sum(-1).clamp_min(1) < sharpness
        lo = torch.where(below, mid, lo)
        hi = torch.where(below, hi, mid)
    root = ((lo + hi) / 2).exp().sqrt().view(-1, 1, 1)
    return q * root, k * root


def _adam_fit(
    xb: torch.Tensor,
    targets: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    steps: int,
    lr: float,
    norm_every: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Adam on ``MSE(softmax(X Q K^T X^T / sqrt(d)), H)``; columns reset to the start's mean norm every few steps."""
    q = q.clone().requires_grad_(True)
    k = k.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([q, k], lr=lr)
    q_norm = q.detach().norm(dim=1).mean()
    k_norm = k.detach().norm(dim=1).mean()
    with torch.enable_grad():
        for step in range(steps):
            if norm_every and step % norm_every == 0:
                with torch.no_grad():
                    q.mul_(q_norm / q.norm(dim=1, keepdim=True).clamp_min(1e-12))
                    k.mul_(k_norm / k.norm(dim=1, keepdim=True).clamp_min(1e-12))
            optimizer.zero_grad(set_to_none=True)
            loss = F.mse_loss(attention_maps(xb, q, k), targets)
            loss.backward()
            optimizer.step()
    return q.detach(), k.detach()


def _adam_reference(
    xb: torch.Tensor, targets: torch.Tensor, head_dim: int, *, seed: int, steps: int, lr: float, norm_every: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's recipe from a uniform start of variance ``1 / (3 head_dim heads)``."""
    heads, dim = targets.shape[0], xb.shape[1]
    generator = _generator(seed)
    bound = math.sqrt(1.0 / (head_dim * heads))
    q = (2 * torch.rand(heads, dim, head_dim, generator=generator) - 1) * bound
    k = (2 * torch.rand(heads, dim, head_dim, generator=generator) - 1) * bound
    return _adam_fit(xb, targets, q.to(xb.device), k.to(xb.device), steps=steps, lr=lr, norm_every=norm_every)


def _pinv_reference(
    xb: torch.Tensor, targets: torch.Tensor, head_dim: int, *, seed: int, peak: float = 1000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The authors' NeurIPS 2025 closed form; each head's Q and K come out with unit Frobenius norm."""
    noise = torch.empty(targets.shape, dtype=torch.float64)
    torch.nn.init.trunc_normal_(noise, std=0.6, a=-2.0, b=2.0, generator=_generator(seed))
    logits = peak * targets.double().cpu() + 3.0 * noise * (targets.cpu() == 0)
    u, s, vh = torch.linalg.svd(xb.double().cpu(), full_matrices=False)
    rank = min(head_dim, s.shape[0])
    # the authors factor pinv(X) T pinv(X)^T (D x D) with pinv(X) = V_r S_r^-1 U_r^T; V_r has orthonormal columns, so
    # the same factors come from the r x r core S_r^-1 U_r^T T U_r S_r^-1, an SVD (D / r)^3 times cheaper
    u, s, v = u[:, :rank], s[:rank], vh[:rank].T
    p, sa, rh = torch.linalg.svd(u.T @ logits @ u / (s.unsqueeze(-1) * s))
    root = sa.sqrt().unsqueeze(-2)
    q = F.pad(v @ (p * root), (0, head_dim - rank))
    k = F.pad(v @ (rh.transpose(-1, -2) * root), (0, head_dim - rank))
    q = q / q.flatten(1).norm(dim=1).view(-1, 1, 1)
    k = k / k.flatten(1).norm(dim=1).view(-1, 1, 1)
    return q.to(device=xb.device, dtype=torch.float32), k.to(device=xb.device, dtype=torch.float32)


def _shifted_identity(
    xb: torch.Tensor,
    targets: torch.Tensor,
    head_dim: int,
    *,
    seed: int,
    alpha: float = 0.7,
    beta: float = 0.7,
    rtol: float = 1e-2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Q, K with ``Q_h K_h^T ~ alpha Z_h + beta (I - P_h + M_h)``: mimetic's form, its identity pointed at the impulse."""
    x = xb.double().cpu()
    heads, dim = targets.shape[0], x.shape[1]
    # the map depends on a head's target alone: fit each distinct target once (a 3x3 window has 9), in float64
    distinct, head_of = torch.unique(targets.cpu().flatten(1), dim=0, return_inverse=True)
    distinct = distinct.view(-1, *targets.shape[1:]).double()
    rows = (distinct.sum(-1, keepdim=True) > 0) * x  # a zero row (and its zero target) adds nothing to the fit
    # pinv(rows) through the eigenvectors of the D x D Gram matrix: singular values >= rtol * largest
    gram_values, gram_vectors = torch.linalg.eigh(rows.transpose(-1, -2) @ rows)
    kept = gram_values >= rtol**2 * gram_values[..., -1:]
    span = gram_vectors * kept.unsqueeze(-2)  # P = span span^T
    fit = (span / gram_values.clamp_min(1e-300).unsqueeze(-2)) @ span.transpose(-1, -2) @ rows.transpose(-1, -2)
    pointed = torch.eye(dim, dtype=torch.float64) - span @ span.transpose(-1, -2) + fit @ (distinct @ x)  # I - P + M
    # then mimetic_qk's draw and factorisation (float32), with the pointed identity in place of I
    z = torch.randn(heads, dim, dim, generator=_generator(seed)) / dim**0.5
    q, k = low_rank_factors(alpha * z + beta * pointed.float()[head_of], min(head_dim, dim))
    q, k = F.pad(q, (0, head_dim - q.shape[-1])), F.pad(k, (0, head_dim - k.shape[-1]))
    return q.to(xb.device), k.to(xb.device)
