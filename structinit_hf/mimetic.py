"""Mimetic initialization (Trockman & Kolter, "Mimetic Initialization of Self-Attention Layers", 2023).

Pre-trained ViTs show ``W_q W_k^T ~ a1 Z + b1 I`` per head (attention that favours a token's own
position) and ``W_v W_proj ~ a2 Z - b2 I`` per layer, with ``Z`` a random matrix of entries of
variance ``1 / D``.  Mimetic init samples these targets and factors them with an SVD.  Pure torch.
"""

from __future__ import annotations

import torch

__all__ = ["low_rank_factors", "mimetic_qk", "mimetic_vo"]


def low_rank_factors(target: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``A, B`` of width ``rank`` with ``A B^T`` the best rank-``rank`` approximation of ``target``."""
    u, s, vh = torch.linalg.svd(target)
    root = s[..., :rank].sqrt().unsqueeze(-2)
    return u[..., :rank] * root, vh[..., :rank, :].transpose(-1, -2) * root


def mimetic_qk(
    dim: int, num_heads: int, head_dim: int, alpha: float = 0.7, beta: float = 0.7, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head ``Q_h, K_h`` (each ``heads x dim x head_dim``) with ``Q_h K_h^T ~ alpha Z_h + beta I``."""
    generator = torch.Generator().manual_seed(int(seed))
    z = torch.randn(num_heads, dim, dim, generator=generator) / dim**0.5
    return low_rank_factors(alpha * z + beta * torch.eye(dim), min(head_dim, dim))


def mimetic_vo(
    dim: int, attn_dim: int | None = None, alpha: float = 0.4, beta: float = 0.4, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``V`` (``dim x attn_dim``) and ``O`` (``attn_dim x dim``) with ``V O ~ alpha Z - beta I``.

    In row-vector convention ``x -> x V O``: a layer's value then output projection.
    """
    attn_dim = dim if attn_dim is None else attn_dim
    generator = torch.Generator().manual_seed(int(seed) + 1)  # a Z independent of mimetic_qk's
    z = torch.randn(dim, dim, generator=generator) / dim**0.5
    v, o = low_rank_factors(alpha * z - beta * torch.eye(dim), min(attn_dim, dim))
    if attn_dim > dim:
        v = torch.nn.functional.pad(v, (0, attn_dim - dim))
        o = torch.nn.functional.pad(o, (0, attn_dim - dim))
    return v, o.T.contiguous()
