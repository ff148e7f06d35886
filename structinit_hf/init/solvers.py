"""Query/key solvers for impulse attention, one function per construction (pure torch).

Every solver reads the pseudo input ``x`` (``N x D``, in the coordinates of an optional basis), the per-head
shifts ``(dy, dx)`` (``heads x 2``, integers) on a ``h x w`` patch grid and the head width, and returns ``Q, K``
(each ``heads x D x head_dim``) with

    softmax(x Q_h K_h^T x^T / sqrt(head_dim))  ~  H_h,    H_h[i, j] = 1 iff j = i + s_h inside the grid

(arXiv 2404.01139, eq. 5).  No solver builds the ``N x N`` maps ``H_h`` unless its loss needs them (``adam``):
a shift is read as its index map ``i -> i + s_h`` with a mask of the rows whose target is inside the grid
(:func:`shift_index`), and heads that share a shift share the work that depends on the shift alone.

:func:`solve_qk` dispatches through :data:`SOLVERS`.  This module imports neither timm nor transformers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from .common import seeded_generator, to_pair
from .mimetic import low_rank_factors

__all__ = [
    "Grid",
    "SOLVERS",
    "SolverFn",
    "shift_index",
    "solve_adam",
    "solve_pinv",
    "solve_qk",
    "solve_shift",
    "solve_svd",
]

Grid = tuple[int, int]


_RCOND_STEPS = (0.1, 0.05, 0.03, 0.01, 3e-3, 1e-3, 1e-4)


_CHECK_HIT_RATE = 0.9  # share of valid rows that must peak on target, on the pseudo input and each check input


def shift_index(grid_size: int | Sequence[int], shifts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The impulse of each head as an index map: ``target[h, i]`` is the token ``i + s_h`` (row-major),
    ``valid[h, i]`` whether it lies inside the grid (rows outside are zero-padded: ``target`` is 0 there).
    Both ``heads x N``: the sparse form of the maps of :func:`~structinit_hf.init.impulse.impulse_targets`."""
    h, w = to_pair(grid_size)
    shifts = torch.as_tensor(shifts, dtype=torch.long).reshape(-1, 2).cpu()
    rows = torch.arange(h, device="cpu").repeat_interleave(w)
    cols = torch.arange(w, device="cpu").repeat(h)
    target_rows, target_cols = rows + shifts[:, :1], cols + shifts[:, 1:]
    valid = (target_rows >= 0) & (target_rows < h) & (target_cols >= 0) & (target_cols < w)
    return torch.where(valid, target_rows * w + target_cols, 0), valid


def _dense_maps(target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``heads x N x N`` one-hot maps of an index map (zero rows where ``valid`` is False)."""
    return F.one_hot(target, target.shape[-1]).float() * valid.unsqueeze(-1)


def _logits(x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, null_keys: int) -> torch.Tensor:
    """``X Q K^T X^T`` per head, with ``null_keys`` zero-logit columns appended."""
    logits = (x @ q) @ (x @ k).transpose(1, 2)
    return F.pad(logits, (0, null_keys)) if null_keys else logits


def _logit_target_core(u: torch.Tensor, grid: Grid, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``U^T T_h U`` for the additive logit target ``T_h`` of :func:`~structinit_hf.init.impulse.impulse_logit_targets`,
    without forming ``T_h``: on a valid row, ``T = [same row as the target] + [same column] - 1`` is a sum of a
    rank-``h``, a rank-``w`` and a rank-1 term, so the product costs ``N (h + w) r`` per head, not ``N^2 r``."""
    h, w = grid
    tokens = torch.arange(h * w, device=u.device)
    rows, cols = tokens // w, tokens % w
    mask = valid.to(u.dtype).unsqueeze(-1)  # heads x N x 1
    core = -(u.T @ mask) @ u.sum(0, keepdim=True)  # the -1 on every key of a valid row
    for of_query, of_key, size in ((target // w, rows, h), (target % w, cols, w)):
        query_onehot = F.one_hot(of_query, size).to(u.dtype) * mask  # heads x N x size
        key_sums = F.one_hot(of_key, size).to(u.dtype).T @ u  # size x r: U summed over each grid row (column)
        core = core + (u.T @ query_onehot) @ key_sums
    return core


def _hit_rate(
    checks: torch.Tensor, q: torch.Tensor, k: torch.Tensor, target: torch.Tensor, valid: torch.Tensor, null_keys: int
) -> torch.Tensor:
    """Per head: share of valid rows, over all check inputs, whose argmax logit is the target."""
    hits = torch.zeros(q.shape[0], dtype=torch.float64, device=q.device)
    for xc in checks:
        fit = _logits(xc, q, k, null_keys)  # float32: an argmax, checked against a share of rows
        hits += ((fit.argmax(-1) == target) & valid).sum(-1) / valid.sum(-1).clamp_min(1)
    return hits / len(checks)


def _set_sharpness(
    xb: torch.Tensor,
    target: torch.Tensor,
    valid: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    sharpness: float,
    null_keys: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale each head's logits (bisection in log space) until its mean attention mass on the target (valid rows) is
    ``sharpness``. Scaling Q and K by ``sqrt(c)`` scales the logits by ``c``, so a row's mass on its target is
    ``exp(c l_target - logsumexp(c l))`` with the logits ``l`` computed once."""
    logits = _logits(xb, q, k, null_keys) * q.shape[-1] ** -0.5
    weight = valid.float()
    at_target = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    lo = torch.full((q.shape[0],), -12.0, device=q.device)
    hi = torch.full((q.shape[0],), 12.0, device=q.device)
    for _ in range(30):  # the bracket shrinks to 24 / 2^30 in log scale
        mid = (lo + hi) / 2
        scale = mid.exp().view(-1, 1)
        mass = torch.exp(scale * at_target - torch.logsumexp(logits * scale.unsqueeze(-1), dim=-1))
        below = (mass * weight).sum(-1) / weight.sum(-1).clamp_min(1) < sharpness
        lo = torch.where(below, mid, lo)
        hi = torch.where(below, hi, mid)
    root = ((lo + hi) / 2).exp().sqrt().view(-1, 1, 1)
    return q * root, k * root


def _fewest_directions_fit(
    xb: torch.Tensor,
    grid: Grid,
    target: torch.Tensor,
    valid: torch.Tensor,
    head_dim: int,
    checks: torch.Tensor,
    null_keys: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`solve_svd`'s rank-``head_dim`` fit per shift, on the fewest directions of ``X`` that keep the pattern."""
    x = xb.double()
    u_all, s_all, vh_all = torch.linalg.svd(x, full_matrices=False)
    # keys read through (I - b m^T) K, with X b ~ 1 and m the mean token, score x_i Q K^T (x_j - m): rows centred
    mean_token = x.mean(0)
    ones_map = torch.linalg.lstsq(x, torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)).solution[:, 0]
    q = k = None
    hits = torch.full((len(target),), -1.0, dtype=torch.float64, device=xb.device)
    for rcond in _RCOND_STEPS:
        keep = s_all > s_all[0] * rcond
        u, s, v = u_all[:, keep], s_all[keep], vh_all[keep].T
        p, sa, rh = torch.linalg.svd(_logit_target_core(u, grid, target, valid))
        rank = min(head_dim, sa.shape[-1])
        p, sa, r = p[..., :rank], sa[..., :rank], rh[..., :rank, :].transpose(-1, -2)
        flip = torch.sign(p.gather(-2, p.abs().argmax(-2, keepdim=True)))  # sign fixed: no LAPACK-build dependence
        root = sa.sqrt().unsqueeze(-2)
        fit_q = F.pad(v @ (p * flip / s.unsqueeze(-1)) * root, (0, head_dim - rank))
        fit_k = F.pad(v @ (r * flip / s.unsqueeze(-1)) * root, (0, head_dim - rank))
        if null_keys:  # the fit's absolute level is loose: centre each row, so the target scores above 0
            fit_k = fit_k - ones_map.unsqueeze(-1) * (mean_token @ fit_k).unsqueeze(-2)
        open_heads = hits < _CHECK_HIT_RATE  # a head that passed keeps its fit: only the others are checked
        new_hits = hits.clone()
        new_hits[open_heads] = _hit_rate(
            checks, *(t[open_heads] for t in (fit_q.float(), fit_k.float(), target, valid)), null_keys
        )
        better = (new_hits > hits + 1e-9) & open_heads
        q, k = (fit_q.clone(), fit_k.clone()) if q is None else (q, k)
        q[better], k[better] = fit_q[better], fit_k[better]
        hits = torch.where(better, new_hits, hits)
        if bool((hits >= _CHECK_HIT_RATE).all()):
            break
    return q, k


def solve_svd(
    xb: torch.Tensor,
    shifts: torch.Tensor,
    grid: Grid,
    head_dim: int,
    *,
    sharpness: float | None = 0.7,
    check_inputs: torch.Tensor | None = None,
    null_keys: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """This project's closed form: the best rank-``head_dim`` fit of an additive logit target, then one scale per head.

    With the thin SVD ``X = U S V^T`` and the logit target ``T_h`` (+1 on the target's row and column of keys, -1
    elsewhere, :func:`~structinit_hf.init.impulse.impulse_logit_targets`), ``A_h = U^T T_h U ~ P S_a R^T`` truncated to
    rank ``head_dim`` gives

        Q_h = V S^-1 P S_a^1/2,    K_h = V S^-1 R S_a^1/2,    X Q_h K_h^T X^T ~ T_h.

    Each head keeps the fewest directions of ``X`` (largest cut-off of ``_RCOND_STEPS``) whose fit puts the argmax
    of 90% of the valid rows on the target, on ``xb`` and on each ``check_inputs`` sample (``B x N x D``, in the
    coordinates of ``xb``); then a bisection scales it so the mean attention mass on the target is ``sharpness``
    (``None``: the fit's own scale).
    ``null_keys`` zero-logit keys (hidden prefix tokens) share the softmax. Solved once per distinct shift.
    """
    if sharpness is not None and not 0.0 < sharpness < 1.0:
        raise ValueError(f"sharpness is the attention mass on the target and must be in (0, 1), got {sharpness}")
    distinct, head_of = torch.unique(shifts, dim=0, return_inverse=True)
    target, valid = (t.to(xb.device) for t in shift_index(grid, distinct))
    checks = xb.unsqueeze(0) if check_inputs is None else torch.cat([xb.unsqueeze(0), check_inputs.to(xb)])
    q, k = _fewest_directions_fit(xb, grid, target, valid, head_dim, checks, null_keys)
    q, k = q.float(), k.float()
    if sharpness is not None:
        q, k = _set_sharpness(xb, target, valid, q, k, sharpness, null_keys)
    return q[head_of], k[head_of]


def solve_pinv(
    xb: torch.Tensor, shifts: torch.Tensor, grid: Grid, head_dim: int, *, seed: int = 0, peak: float = 1000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The closed form of the authors' NeurIPS 2025 code (arXiv 2505.19985), each head's Q and K at unit Frobenius norm.

    Logit target ``T_h = peak`` on the impulse and ``3 N(0, 0.6^2)`` noise (truncated to +-2) on every other key;
    with the rank-``head_dim`` thin SVD ``X ~ U_r S_r V_r^T`` and ``pinv(X) T_h pinv(X)^T = V_r C_h V_r^T``,

        C_h = S_r^-1 U_r^T T_h U_r S_r^-1 = P S_c R^T,    Q_h = V_r P S_c^1/2,    K_h = V_r R S_c^1/2.

    The noise is dense, so this solver (like the authors') draws ``heads x N x N`` numbers.
    """
    target, valid = shift_index(grid, shifts)
    noise = torch.empty(len(shifts), *target.shape[1:], target.shape[1], dtype=torch.float64)
    torch.nn.init.trunc_normal_(noise, std=0.6, a=-2.0, b=2.0, generator=seeded_generator(seed))
    logits = noise.mul_(3.0)
    heads, queries = torch.nonzero(valid, as_tuple=True)
    logits[heads, queries, target[heads, queries]] = peak  # the impulse replaces the noise on its key
    u, s, vh = torch.linalg.svd(xb.double().cpu(), full_matrices=False)
    rank = min(head_dim, s.shape[0])
    # the authors factor pinv(X) T pinv(X)^T (D x D); V_r has orthonormal columns, so the r x r core C_h has its factors
    u, s, v = u[:, :rank], s[:rank], vh[:rank].T
    core = torch.stack([u.T @ head @ u for head in logits])  # head by head: no second heads x N x N buffer
    p, sa, rh = torch.linalg.svd(core / (s.unsqueeze(-1) * s))
    root = sa.sqrt().unsqueeze(-2)
    q = F.pad(v @ (p * root), (0, head_dim - rank))
    k = F.pad(v @ (rh.transpose(-1, -2) * root), (0, head_dim - rank))
    q = q / q.flatten(1).norm(dim=1).view(-1, 1, 1)
    k = k / k.flatten(1).norm(dim=1).view(-1, 1, 1)
    return q.to(device=xb.device, dtype=torch.float32), k.to(device=xb.device, dtype=torch.float32)


def solve_adam(
    xb: torch.Tensor,
    shifts: torch.Tensor,
    grid: Grid,
    head_dim: int,
    *,
    seed: int = 0,
    steps: int = 10_000,
    lr: float = 1e-4,
    norm_every: int = 100,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's reference recipe (arXiv 2404.01139): Adam on the softmax MSE from a uniform start,

        min_{Q, K}  || softmax(X Q_h K_h^T X^T / sqrt(head_dim)) - H_h ||^2,

    Q and K uniform in ``+-sqrt(1 / (head_dim heads))``, lr 1e-4, ``steps`` = 10,000, every column of Q and K reset
    to the start's mean column norm each ``norm_every`` steps. Its loss needs the ``N x N`` maps ``H_h``.
    """
    targets = _dense_maps(*shift_index(grid, shifts)).to(xb.device)
    heads, dim = len(shifts), xb.shape[1]
    generator = seeded_generator(seed)
    bound = math.sqrt(1.0 / (head_dim * heads))
    q = ((2 * torch.rand(heads, dim, head_dim, generator=generator) - 1) * bound).to(xb.device).requires_grad_(True)
    k = ((2 * torch.rand(heads, dim, head_dim, generator=generator) - 1) * bound).to(xb.device).requires_grad_(True)
    optimizer = torch.optim.Adam([q, k], lr=lr)
    q_norm, k_norm = q.detach().norm(dim=1).mean(), k.detach().norm(dim=1).mean()
    with torch.enable_grad():
        for step in range(steps):
            if norm_every and step % norm_every == 0:
                with torch.no_grad():
                    q.mul_(q_norm / q.norm(dim=1, keepdim=True).clamp_min(1e-12))
                    k.mul_(k_norm / k.norm(dim=1, keepdim=True).clamp_min(1e-12))
            optimizer.zero_grad(set_to_none=True)
            logits = torch.einsum("nd,hde->hne", xb, q) @ torch.einsum("nd,hde->hne", xb, k).transpose(1, 2)
            F.mse_loss(torch.softmax(logits * head_dim**-0.5, dim=-1), targets).backward()
            optimizer.step()
    return q.detach(), k.detach()


def _pointed_identity(x: torch.Tensor, target: torch.Tensor, valid: torch.Tensor, rtol: float) -> torch.Tensor:
    """``I - P + M`` (``D x D``, float64) for one shift: ``M`` the least-squares map with ``x_i M ~ x_{i+s}`` over the
    valid rows, ``P`` the projection onto the directions of those rows at singular values >= ``rtol`` x the largest."""
    rows = valid.unsqueeze(-1) * x  # a zero row (and its zero target) adds nothing to the fit
    shifted = valid.unsqueeze(-1) * x[target]
    if rows.shape[0] >= rows.shape[1]:  # pinv(rows) from the eigenvectors of the D x D Gram matrix
        values, vectors = torch.linalg.eigh(rows.T @ rows)
        kept = values >= rtol**2 * values[-1]
        span = vectors[:, kept]  # orthonormal, D x r: P = span span^T
        pinv_rows = (span / values[kept]) @ (span.T @ rows.T)
    else:  # fewer tokens than channels: from the N x N Gram matrix, the same values at a fraction of the cost
        values, vectors = torch.linalg.eigh(rows @ rows.T)
        kept = values >= rtol**2 * values[-1]
        root = values[kept].sqrt()
        span = rows.T @ vectors[:, kept] / root
        pinv_rows = span @ (vectors[:, kept] / root).T
    return torch.eye(x.shape[1], dtype=x.dtype) - span @ span.T + pinv_rows @ shifted


def solve_shift(
    xb: torch.Tensor,
    shifts: torch.Tensor,
    grid: Grid,
    head_dim: int,
    *,
    seed: int = 0,
    alpha: float = 0.7,
    beta: float = 0.7,
    rtol: float = 1e-2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mimetic init's form and scale (Trockman & Kolter 2023) with its identity pointed at the impulse:

        Q_h K_h^T ~ alpha Z_h + beta (I - P_s + M_s),    x_i M_s ~ x_{i+s} (valid rows, least squares),

    ``P_s`` the projection onto the directions the valid rows of ``x`` span above ``rtol`` of their largest singular
    value (off that span ``I`` stays), ``Z_h`` drawn from ``seed`` with entries of variance ``1 / D``, one per head.
    A query then scores its shifted neighbour's key as mimetic scores its own: attention starts soft, peaked on the
    target. Factored to rank ``head_dim`` as mimetic's is (:func:`~structinit_hf.init.mimetic.low_rank_factors`).
    """
    x = xb.double().cpu()
    heads, dim = len(shifts), x.shape[1]
    distinct, head_of = torch.unique(shifts, dim=0, return_inverse=True)  # the map depends on the shift alone
    target, valid = shift_index(grid, distinct)
    pointed = torch.stack([_pointed_identity(x, target[i], valid[i], rtol) for i in range(len(distinct))]).float()
    pointed = beta * pointed
    generator, rank = seeded_generator(seed), min(head_dim, dim)
    q, k = torch.empty(heads, dim, rank), torch.empty(heads, dim, rank)
    for start in range(0, heads, _HEADS_PER_DRAW):  # Z is drawn in order, a few heads at a time: memory stays small
        chunk = slice(start, min(start + _HEADS_PER_DRAW, heads))
        z = torch.randn(chunk.stop - chunk.start, dim, dim, generator=generator).div_(dim**0.5).mul_(alpha)
        q[chunk], k[chunk] = low_rank_factors(z.add_(pointed[head_of[chunk]]), rank)
    return F.pad(q, (0, head_dim - rank)).to(xb.device), F.pad(k, (0, head_dim - rank)).to(xb.device)


_HEADS_PER_DRAW = 12


SolverFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


# method name -> solver(xb, shifts, grid, head_dim, **its options)
SOLVERS: dict[str, SolverFn] = {"svd": solve_svd, "adam": solve_adam, "pinv": solve_pinv, "shift": solve_shift}


def solve_qk(
    x: torch.Tensor,
    shifts: torch.Tensor,
    grid: int | Sequence[int],
    head_dim: int,
    method: str = "svd",
    *,
    basis: torch.Tensor | None = None,
    qk_frobenius: float = 0.0,
    **options,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Query/key weights ``Q, K`` (each ``heads x D x head_dim``) for the impulse of each head's shift.

    ``x`` is the pseudo input (``N x D``, tokens of the ``grid`` in row-major order), ``shifts`` the ``(dy, dx)`` of
    every head (``heads x 2`` integers; stack the blocks' shifts to solve them together). ``method`` names a solver of
    :data:`SOLVERS`; ``options`` are its own keyword arguments. With a ``basis`` (``D x D'``, orthonormal columns) Q and
    K are solved in its coordinates and confined to its span, so input components outside it cannot move the logits.
    ``qk_frobenius > 0`` then rescales each head's Q and K to that Frobenius norm. Deterministic for the solver's
    ``seed``; computed on ``x.device`` and returned in ``x.dtype``.
    """
    if method not in SOLVERS:
        raise ValueError(f"unknown solver {method!r}; expected one of {', '.join(SOLVERS)}")
    if qk_frobenius < 0:
        raise ValueError(f"qk_frobenius is a norm per head: >= 0 (0: the solver's own scale), got {qk_frobenius}")
    if head_dim < 1:
        raise ValueError(f"head_dim must be >= 1, got {head_dim}")
    grid = to_pair(grid)
    shifts = torch.as_tensor(shifts, dtype=torch.long).cpu()
    if shifts.dim() != 2 or shifts.shape[1] != 2 or len(shifts) == 0:
        raise ValueError(f"shifts must be a (heads, 2) integer tensor of (dy, dx), got shape {tuple(shifts.shape)}")
    if x.dim() != 2 or x.shape[0] != grid[0] * grid[1]:
        raise ValueError(f"x must have one row per token of the {grid[0]}x{grid[1]} grid, got shape {tuple(x.shape)}")
    xb = x.float() if basis is None else x.float() @ basis.to(x.device, torch.float32)
    q, k = SOLVERS[method](xb, shifts, grid, head_dim, **options)
    if qk_frobenius:
        q = q * (qk_frobenius / q.flatten(1).norm(dim=1).clamp_min(1e-12)).view(-1, 1, 1)
        k = k * (qk_frobenius / k.flatten(1).norm(dim=1).clamp_min(1e-12)).view(-1, 1, 1)
    if basis is not None:
        q, k = basis.to(q) @ q, basis.to(k) @ k
    return q.to(x.dtype), k.to(x.dtype)
