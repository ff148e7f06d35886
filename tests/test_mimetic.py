"""Mimetic initialization: the factor products are close to their targets."""

from __future__ import annotations

import pytest
import torch

from structinit_hf import mimetic_qk, mimetic_vo


def diagonal_and_off_diagonal(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    eye = torch.eye(m.shape[-1], dtype=torch.bool)
    return m[..., eye], m[..., ~eye]


def test_full_rank_qk_product_is_identity_plus_noise() -> None:
    dim = 96
    q, k = mimetic_qk(dim, num_heads=3, head_dim=dim, seed=0)
    assert q.shape == k.shape == (3, dim, dim)
    diag, off = diagonal_and_off_diagonal(q @ k.transpose(1, 2))
    assert diag.mean().item() == pytest.approx(0.7, abs=0.03)  # beta * I
    assert off.std().item() == pytest.approx(0.7 / dim**0.5, rel=0.05)  # alpha * Z, Var(Z) = 1/d
    assert off.mean().abs().item() < 0.005


def test_heads_draw_their_own_noise_and_seed_is_reproducible() -> None:
    q, k = mimetic_qk(32, num_heads=2, head_dim=32, seed=1)
    products = q @ k.transpose(1, 2)
    assert not torch.allclose(products[0], products[1])
    torch.testing.assert_close(mimetic_qk(32, 2, 32, seed=1), (q, k))


def test_low_rank_qk_is_the_best_rank_approximation() -> None:
    full_q, full_k = mimetic_qk(48, num_heads=1, head_dim=48, seed=2)
    target = full_q[0] @ full_k[0].T
    q, k = mimetic_qk(48, num_heads=1, head_dim=12, seed=2)
    error = torch.linalg.matrix_norm(q[0] @ k[0].T - target)
    singular = torch.linalg.svdvals(target)
    assert error.item() == pytest.approx(singular[12:].pow(2).sum().sqrt().item(), rel=1e-4)  # Eckart-Young


def test_vo_product_is_minus_identity_plus_noise() -> None:
    dim = 96
    v, o = mimetic_vo(dim, seed=0)
    assert v.shape == (dim, dim) and o.shape == (dim, dim)
    diag, off = diagonal_and_off_diagonal(v @ o)
    assert diag.mean().item() == pytest.approx(-0.4, abs=0.03)
    assert off.std().item() == pytest.approx(0.4 / dim**0.5, rel=0.05)
