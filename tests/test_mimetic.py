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


def test_low_rank_factors_choose_the_factorisation_by_the_kept_share() -> None:
    """Catches the partial factorisation (ViT-Small/-Base heads) drifting far from the SVD's best rank-r fit, the
    full-rank route losing the product, or either becoming seed- or run-dependent."""
    from structinit_hf.init.mimetic import low_rank_factors

    generator = torch.Generator().manual_seed(0)
    targets = 0.7 * torch.randn(2, 256, 256, generator=generator) / 16 + 0.7 * torch.eye(256)
    u, s, vh = torch.linalg.svd(targets)
    best = (u[..., :32] * s[..., None, :32]) @ vh[..., :32, :]
    a, b = low_rank_factors(targets, 32)  # 32 of 256 directions: partial
    assert a.shape == b.shape == (2, 256, 32)
    assert (targets - a @ b.mT).norm() < 1.03 * (targets - best).norm()  # a flat spectrum: near, not at, the optimum
    assert (torch.linalg.matrix_norm(a @ b.mT, 2) > 0.97 * s[:, 0]).all()  # the leading values are (nearly) kept
    torch.testing.assert_close(low_rank_factors(targets, 32), (a, b), rtol=0, atol=0)
    a, b = low_rank_factors(targets, 256)  # full rank: the Gram route, nothing cut
    torch.testing.assert_close(a @ b.mT, targets, rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.linalg.svdvals(a), s.sqrt(), rtol=0, atol=1e-4)  # balanced: S^1/2 each
    a, b = low_rank_factors(targets, 64)  # a quarter: the exact SVD
    torch.testing.assert_close(a @ b.mT, (u[..., :64] * s[..., None, :64]) @ vh[..., :64, :], rtol=0, atol=1e-5)


def test_value_output_product_is_the_mimetic_target() -> None:
    v, o = mimetic_vo(192, seed=3)
    z = torch.randn(192, 192, generator=torch.Generator().manual_seed(4)) / 192**0.5
    torch.testing.assert_close(v @ o, 0.4 * z - 0.4 * torch.eye(192), rtol=0, atol=1e-5)
