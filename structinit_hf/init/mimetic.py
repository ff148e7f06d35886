"""Mimetic initialization (Trockman & Kolter, "Mimetic Initialization of Self-Attention Layers", 2023).

Pre-trained ViTs show ``W_q W_k^T ~ a1 Z + b1 I`` per head (attention that favours a token's own
position) and ``W_v W_proj ~ a2 Z - b2 I`` per layer, with ``Z`` a random matrix of entries of
variance ``1 / D``.  Mimetic init samples these targets and factors them with an SVD.  Pure torch.
"""

from __future__ import annotations

import torch

from .common import seeded_generator

__all__ = ["low_rank_factors", "mimetic_qk", "mimetic_vo"]


def low_rank_factors(target: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``A, B`` of width ``rank`` with ``A B^T`` the best rank-``rank`` approximation of ``target`` (``... x m x n``).

    From the SVD ``target = U S V^T``: ``A = U_r S_r^1/2``, ``B = V_r S_r^1/2``. Where ``rank`` is under a quarter
    of ``min(m, n)`` (a ViT-Small or -Base head: 64 of 384 or 768 channels) a full SVD costs several times what the
    kept directions need, so they come from a partial factorisation (:func:`_partial_svd`); at full rank nothing is
    cut and the eigenvectors of ``T^T T`` give the same factors at about half an SVD's cost (:func:`_gram_svd`).
    """
    if 4 * rank < min(target.shape[-2:]):
        u, s, vh = _partial_svd(target, rank)
    elif rank >= target.shape[-1] and target.shape[-1] <= target.shape[-2]:
        u, s, vh = _gram_svd(target)
    else:
        u, s, vh = torch.linalg.svd(target)
    root = s[..., :rank].sqrt().unsqueeze(-2)
    return u[..., :rank] * root, vh[..., :rank, :].transpose(-1, -2) * root


def _gram_svd(target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The SVD of a tall or square ``T`` from the eigenvectors ``W`` of ``T^T T``: ``S = |T w|``, ``U = T W S^-1``.

    ``U S W^T = T W W^T = T`` to float32 precision even where ``S`` is tiny, since ``S`` is measured, not derived
    from the eigenvalues; the columns agree with LAPACK's SVD to its own float32 accuracy (about 1e-4), up to sign.
    """
    _, vectors = torch.linalg.eigh(target.transpose(-1, -2) @ target)
    vectors = vectors.flip(-1)  # largest first, as the SVD orders them
    projected = target @ vectors
    values = projected.norm(dim=-2)
    order = values.argsort(dim=-1, descending=True)  # eigenvalue order can differ from the measured one at ties
    values = values.gather(-1, order)
    vectors = vectors.gather(-1, order.unsqueeze(-2).expand_as(vectors))
    projected = projected.gather(-1, order.unsqueeze(-2).expand_as(projected))
    return projected / values.clamp_min(torch.finfo(values.dtype).tiny).unsqueeze(-2), values, vectors.transpose(-1, -2)


def _partial_svd(
    target: torch.Tensor, rank: int, oversample: int = 16, power_iterations: int = 2
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The leading ``rank`` singular triplets by randomized subspace iteration (Halko et al. 2011, alg. 4.4).

    ``Y = orth((T T^T)^q T G)`` for a Gaussian ``G`` of ``rank + oversample`` columns (a fixed seed: deterministic),
    then the SVD of the small ``Y^T T`` through its ``(rank + oversample)``-wide Gram matrix.  For the flat spectra of
    ``a Z + b I`` the kept subspace is close to, not equal to, the SVD's: at ViT-Base's width (64 of 768) the residual
    ``||T - A B^T||`` is within about 2% of the optimum.
    """
    generator = seeded_generator(0)
    sketch = torch.randn(*target.shape[:-2], target.shape[-1], rank + oversample, generator=generator).to(target)
    basis = torch.linalg.qr(target @ sketch).Q
    for _ in range(power_iterations):  # the spread of the kept values is small: one orthonormalisation a step
        basis = torch.linalg.qr(target @ (target.transpose(-1, -2) @ basis)).Q
    small = basis.transpose(-1, -2) @ target
    values, vectors = torch.linalg.eigh((small @ small.transpose(-1, -2)).double())
    values, vectors = values.flip(-1).clamp_min(0).sqrt(), vectors.flip(-1)
    right = (vectors.transpose(-1, -2) @ small.double()) / values.clamp_min(1e-300).unsqueeze(-1)
    return (basis.double() @ vectors).to(target), values.to(target), right.to(target)


def mimetic_qk(
    dim: int, num_heads: int, head_dim: int, alpha: float = 0.7, beta: float = 0.7, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head ``Q_h, K_h`` (each ``heads x dim x head_dim``) with ``Q_h K_h^T ~ alpha Z_h + beta I``."""
    generator = seeded_generator(seed)
    z = torch.randn(num_heads, dim, dim, generator=generator) / dim**0.5
    return low_rank_factors(alpha * z + beta * torch.eye(dim), min(head_dim, dim))


def mimetic_vo(
    dim: int, attn_dim: int | None = None, alpha: float = 0.4, beta: float = 0.4, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``V`` (``dim x attn_dim``) and ``O`` (``attn_dim x dim``) with ``V O ~ alpha Z - beta I``.

    In row-vector convention ``x -> x V O``: a layer's value then output projection.
    """
    attn_dim = dim if attn_dim is None else attn_dim
    generator = seeded_generator(int(seed) + 1)  # a Z independent of mimetic_qk's
    z = torch.randn(dim, dim, generator=generator) / dim**0.5
    v, o = low_rank_factors(alpha * z - beta * torch.eye(dim), min(attn_dim, dim))
    if attn_dim > dim:
        v = torch.nn.functional.pad(v, (0, attn_dim - dim))
        o = torch.nn.functional.pad(o, (0, attn_dim - dim))
    return v, o.T.contiguous()
