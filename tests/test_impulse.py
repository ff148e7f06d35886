"""Impulse targets, pseudo inputs and the Q/K solvers; their outputs pinned to the pre-refactor solver's."""

from __future__ import annotations

import pytest
import torch

from structinit_hf.init import impulse, solvers
from structinit_hf.init.options import PINV_DEFAULTS, SVD_DEFAULTS


def brute_force_targets(h: int, w: int, dy: int, dx: int) -> torch.Tensor:
    out = torch.zeros(h * w, h * w)
    for r in range(h):
        for c in range(w):
            if 0 <= r + dy < h and 0 <= c + dx < w:
                out[r * w + c, (r + dy) * w + c + dx] = 1
    return out


@pytest.mark.parametrize("dy", [-2, -1, 0, 1, 2])
@pytest.mark.parametrize("dx", [-2, -1, 0, 1, 2])
def test_targets_match_each_shift_with_zero_padding(dy: int, dx: int) -> None:
    h, w = 4, 6  # non-square on purpose
    targets = impulse.impulse_targets((h, w), torch.tensor([[dy, dx]]))
    assert targets.shape == (1, h * w, h * w)
    torch.testing.assert_close(targets[0], brute_force_targets(h, w, dy, dx))
    padded_rows = (targets[0].sum(-1) == 0).sum().item()
    assert padded_rows == h * w - (h - abs(dy)) * (w - abs(dx))


def test_shifts_are_uniform_over_the_window_and_seeded() -> None:
    shifts = impulse.impulse_shifts(9000, 3, seed=0, grid_size=8)
    assert shifts.min() == -1 and shifts.max() == 1
    _, counts = torch.unique(shifts, dim=0, return_counts=True)
    assert len(counts) == 9 and counts.min() > 850 and counts.max() < 1150
    five = impulse.impulse_shifts(5000, 5, seed=1, grid_size=8)
    assert five.abs().max() == 2 and len(torch.unique(five, dim=0)) == 25
    torch.testing.assert_close(
        impulse.impulse_shifts(12, 5, seed=3, grid_size=8), impulse.impulse_shifts(12, 5, seed=3, grid_size=8)
    )
    assert not torch.equal(
        impulse.impulse_shifts(12, 5, seed=3, grid_size=8), impulse.impulse_shifts(12, 5, seed=4, grid_size=8)
    )


@pytest.mark.parametrize("kernel_size", [0, -3, 2, 4, 3.0, True])
def test_bad_kernel_sizes_are_rejected(kernel_size) -> None:
    with pytest.raises(ValueError, match="kernel_size"):
        impulse.validate_kernel_size(kernel_size, 8)


def test_kernel_larger_than_grid_is_rejected() -> None:
    impulse.validate_kernel_size(5, (5, 9))
    with pytest.raises(ValueError, match=r"kernel_size 5 does not fit the 4x9 patch grid: allowed odd sizes up to 3$"):
        impulse.validate_kernel_size(5, (4, 9))  # the limit named is odd, as kernel_size must be
    with pytest.raises(ValueError, match=r"kernel_size 7 does not fit the 5x9 patch grid: allowed odd sizes up to 5$"):
        impulse.validate_kernel_size(7, (5, 9))


@pytest.mark.parametrize(("grid", "dim"), [((4, 4), 16), ((8, 6), 192), ((14, 14), 768)])
def test_sincos_is_timms_code_with_its_channels_in_another_order(grid, dim) -> None:
    """timm's ``build_sincos2d_pos_embed`` orders the quarters sin y, sin x, cos y, cos x; ours sin y, cos y, sin x,
    cos x (float64 then float32, so not bit-identical: the models keep ours)."""
    from timm.layers import build_sincos2d_pos_embed

    quarter = dim // 4
    ours = impulse.sincos_2d(grid, dim)
    sin_y, cos_y, sin_x, cos_x = ours.split(quarter, dim=1)
    timms = build_sincos2d_pos_embed(list(grid), dim)
    torch.testing.assert_close(torch.cat([sin_y, sin_x, cos_y, cos_x], dim=1), timms, rtol=0, atol=1e-6)
    assert not torch.allclose(ours, timms, atol=1e-3)  # the order differs


def test_sincos_encoding_layout_and_errors() -> None:
    code = impulse.sincos_2d((3, 5), 16)
    assert code.shape == (15, 16)
    # channel 0 is sin(y * 1), channel 8 is sin(x * 1): token (r, c) = (2, 4) is index 14
    assert code[14, 0].item() == pytest.approx(torch.sin(torch.tensor(2.0)).item(), abs=1e-6)
    assert code[14, 8].item() == pytest.approx(torch.sin(torch.tensor(4.0)).item(), abs=1e-6)
    with pytest.raises(ValueError, match="divisible by 4"):
        impulse.sincos_2d(4, 18)


@pytest.mark.parametrize("kind", impulse.PSEUDO_INPUTS)
def test_pseudo_inputs_are_layer_normed_and_seeded(kind: str) -> None:
    x = impulse.pseudo_input((4, 6), 32, kind, seed=5)
    assert x.shape == (24, 32)
    torch.testing.assert_close(x.mean(-1), torch.zeros(24), atol=1e-5, rtol=0)
    code_var = impulse.pseudo_input((4, 6), 32, kind, seed=5, normalize=False).var(-1, unbiased=False)
    expected = code_var / (code_var + impulse.LAYER_NORM_EPS)  # "learned" has std 0.02, so eps shows
    torch.testing.assert_close(x.var(-1, unbiased=False), expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(x, impulse.pseudo_input((4, 6), 32, kind, seed=5))
    if kind != "sincos":
        assert not torch.equal(x, impulse.pseudo_input((4, 6), 32, kind, seed=6))


def test_unknown_pseudo_input_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"unknown pseudo input 'noise'.*sincos, uniform"):
        impulse.pseudo_input(4, 32, "noise")


def test_logit_targets_score_target_row_column_and_rest() -> None:
    targets = impulse.impulse_targets((3, 4), torch.tensor([[1, -1]]))
    logits = impulse.impulse_logit_targets((3, 4), targets)[0]
    # query (0, 1) -> target (1, 0) = index 4; row 1 = indices 4..7, column 0 = indices 0, 4, 8
    assert logits[1, 4] == 1
    assert logits[1, 5] == 0 and logits[1, 0] == 0 and logits[1, 8] == 0
    assert logits[1, 2] == -1
    assert torch.all(logits[0] == 0)  # query (0, 0) has no target inside the grid


GRID = (5, 6)  # non-square on purpose


def small_problem(kernel_size: int = 3, grid=GRID, dim: int = 64, heads: int = 4, seed: int = 0):
    x = impulse.pseudo_input(grid, dim)
    shifts = impulse.impulse_shifts(heads, kernel_size, seed, grid)
    return x, shifts, impulse.impulse_targets(grid, shifts), dim // heads


@pytest.mark.parametrize("kernel_size", [1, 3, 5])
def test_svd_solver_hits_every_target_on_a_non_square_grid(kernel_size: int) -> None:
    x, shifts, targets, head_dim = small_problem(kernel_size)
    q, k = solvers.solve_qk(x, shifts, GRID, head_dim, sharpness=0.8)
    assert q.shape == k.shape == (4, 64, head_dim)
    fidelity = impulse.target_fidelity(impulse.attention_maps(x, q, k), targets)
    assert fidelity["hit_rate"] == 1.0
    assert fidelity["target_mass"] == pytest.approx(0.8, abs=1e-3)


def test_shift_index_is_the_sparse_form_of_the_targets() -> None:
    """Catches the index map the solvers read drifting from the maps the tests and pictures check against."""
    shifts = torch.tensor([[1, -1], [0, 0], [-2, 2]])
    target, valid = solvers.shift_index((4, 6), shifts)
    dense = impulse.impulse_targets((4, 6), shifts)
    torch.testing.assert_close(valid, dense.sum(-1) > 0)
    torch.testing.assert_close(target[valid], dense.argmax(-1)[valid])


def test_svd_reads_the_logit_target_without_building_it() -> None:
    """Catches the factored product U^T T U of the svd solver differing from the dense logit target's."""
    x, shifts, targets, _ = small_problem(5)
    u = torch.linalg.svd(x.double(), full_matrices=False)[0]
    dense = u.T @ impulse.impulse_logit_targets(GRID, targets).double() @ u
    torch.testing.assert_close(solvers._logit_target_core(u, GRID, *solvers.shift_index(GRID, shifts)), dense)


def test_svd_solves_each_distinct_shift_once(monkeypatch) -> None:
    """Catches the svd solve losing its dedupe (36 heads of a 3x3 ViT-Tiny solved one by one: +0.3 s a model)
    or handing a head another shift's solution."""
    x, shifts, _, head_dim = small_problem()
    repeated = shifts[[0, 1, 0, 2, 1, 0]]
    solved_heads = []
    core = solvers._logit_target_core

    def counting(u, grid, target, valid):
        solved_heads.append(len(target))
        return core(u, grid, target, valid)

    monkeypatch.setattr(solvers, "_logit_target_core", counting)
    q, k = solvers.solve_qk(x, repeated, GRID, head_dim)
    assert set(solved_heads) == {len(torch.unique(shifts[:3], dim=0))}
    alone_q, alone_k = solvers.solve_qk(x, shifts[:3], GRID, head_dim)
    torch.testing.assert_close(q, alone_q[[0, 1, 0, 2, 1, 0]], rtol=0, atol=1e-6)
    torch.testing.assert_close(k, alone_k[[0, 1, 0, 2, 1, 0]], rtol=0, atol=1e-6)


def test_shift_solver_is_mimetic_for_the_centre_and_points_elsewhere_at_the_impulse() -> None:
    """Catches the shift construction drifting from mimetic init's form and scale (its centre-shift case must be
    mimetic's Q K^T exactly), or a map that sends tokens anywhere but to their impulse target."""
    from structinit_hf.init.mimetic import mimetic_qk

    grid = (8, 8)
    x = impulse.pseudo_input(grid, 32, "gaussian", seed=1)  # 64 tokens span all 32 directions: P = I
    q, k = solvers.solve_qk(x, torch.zeros(2, 2, dtype=torch.long), grid, 16, "shift", seed=3)
    mimetic_q, mimetic_k = mimetic_qk(32, 2, 16, seed=3)
    torch.testing.assert_close(q @ k.transpose(1, 2), mimetic_q @ mimetic_k.transpose(1, 2), rtol=0, atol=1e-5)

    grid = (4, 4)
    x = impulse.pseudo_input(grid, 48, "gaussian", seed=1)  # 16 tokens, 48 channels: the N x N Gram route
    shifts = impulse.impulse_shifts(4, 3, 0, grid)
    targets = impulse.impulse_targets(grid, shifts)
    shifted = impulse.target_fidelity(
        impulse.attention_maps(x, *solvers.solve_qk(x, shifts, grid, 16, "shift")), targets
    )
    plain = impulse.target_fidelity(impulse.attention_maps(x, *mimetic_qk(48, 4, 16)), targets)
    assert shifted["hit_rate"] > 0.9 and shifted["target_mass"] > 10 * plain["target_mass"]


def test_sharpness_sets_the_mass_on_target() -> None:
    x, shifts, targets, head_dim = small_problem()
    masses = []
    for sharpness in (0.3, 0.6, 0.95):
        q, k = solvers.solve_qk(x, shifts, GRID, head_dim, sharpness=sharpness)
        masses.append(impulse.target_fidelity(impulse.attention_maps(x, q, k), targets)["target_mass"])
    assert masses == pytest.approx([0.3, 0.6, 0.95], abs=2e-3)


@pytest.mark.slow
def test_adam_reference_learns_the_impulses_on_a_small_grid() -> None:
    grid = (4, 4)
    x = impulse.pseudo_input(grid, 32)
    shifts = impulse.impulse_shifts(2, 3, 0, grid)
    targets = impulse.impulse_targets(grid, shifts)
    before = impulse.target_fidelity(
        impulse.attention_maps(x, *solvers.solve_qk(x, shifts, grid, 16, "adam", steps=1)), targets
    )
    q, k = solvers.solve_qk(x, shifts, grid, 16, "adam")  # the paper's full 10,000-step recipe
    after = impulse.target_fidelity(impulse.attention_maps(x, q, k), targets)
    assert after["hit_rate"] >= 0.9 and after["hit_rate"] > before["hit_rate"]
    assert after["target_mass"] > 2 * before["target_mass"]
    svd = impulse.target_fidelity(impulse.attention_maps(x, *solvers.solve_qk(x, shifts, grid, 16)), targets)
    assert svd["hit_rate"] >= after["hit_rate"]


def test_solvers_are_deterministic_under_a_seed() -> None:
    x, shifts, _, head_dim = small_problem()
    torch.testing.assert_close(
        solvers.solve_qk(x, shifts, GRID, head_dim), solvers.solve_qk(x, shifts, GRID, head_dim), rtol=0, atol=0
    )
    first = solvers.solve_qk(x, shifts, GRID, head_dim, "adam", steps=50, seed=3)
    torch.manual_seed(123)  # the global RNG must not matter
    again = solvers.solve_qk(x, shifts, GRID, head_dim, "adam", steps=50, seed=3)
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    assert not torch.equal(first[0], solvers.solve_qk(x, shifts, GRID, head_dim, "adam", steps=50, seed=4)[0])


# (norm, sum of entries weighted by cos(index)) of Q_h K_h^T, all heads, on a 6x7 grid, dim 64, 4 heads of width 16,
# shifts from impulse_shifts(4, k, seed=k); produced by the pre-refactor solver (N x N target maps, commit 92b5fcf)
PRE_REFACTOR_QK = {
    ("svd", 3, "sincos"): (71.701637, 45.483853),
    ("svd", 3, "learned"): (44.222124, -8.751969),
    ("svd", 5, "sincos"): (66.373701, 30.472576),
    ("svd", 5, "learned"): (37.737824, -8.545906),
    ("shift", 3, "sincos"): (11.978776, -13.934984),
    ("shift", 3, "learned"): (14.257444, 0.134012),
    ("shift", 5, "sincos"): (11.961061, -10.081203),
    ("shift", 5, "learned"): (14.256227, -15.567919),
    ("pinv", 3, "sincos"): (59.786294, 33.411843),
    ("pinv", 3, "learned"): (28.034384, 1.224693),
    ("pinv", 5, "sincos"): (60.206427, 71.746255),
    ("pinv", 5, "learned"): (28.661348, 21.749532),
    ("adam", 3, "sincos"): (2.650401, -0.69768),  # 30 steps
    ("adam", 3, "learned"): (2.643826, -0.637654),
    ("adam", 5, "sincos"): (2.652044, -0.703329),
    ("adam", 5, "learned"): (2.647585, -0.803331),
}


def qk_fingerprint(q: torch.Tensor, k: torch.Tensor) -> tuple[float, float]:
    qk = (q @ k.transpose(1, 2)).double().flatten()
    return qk.norm().item(), (qk * torch.cos(torch.arange(len(qk), dtype=torch.float64))).sum().item()


@pytest.mark.parametrize("case", PRE_REFACTOR_QK)
def test_every_solver_keeps_its_pre_refactor_output(case) -> None:
    """Catches a solver whose Q K^T moved (beyond 1e-5 of its norm) from what it gave on N x N target maps."""
    method, kernel_size, kind = case
    grid = (6, 7)  # 42 tokens under 64 channels: the shift solver takes its N x N Gram route
    x = impulse.pseudo_input(grid, 64, kind, seed=kernel_size)
    shifts = impulse.impulse_shifts(4, kernel_size, kernel_size, grid)
    options = {"svd": {}, "adam": dict(seed=2, steps=30)}.get(method, dict(seed=2))
    q, k = solvers.solve_qk(x, shifts, grid, 16, method, qk_frobenius=7.0 if method == "pinv" else 0.0, **options)
    norm, weighted = PRE_REFACTOR_QK[case]
    assert qk_fingerprint(q, k) == pytest.approx((norm, weighted), abs=1e-5 * norm)


# per block, (norm, cos-weighted sum) of Q_h K_h^T of a timm VisionTransformer (16 px, patch 2, dim 64, depth 3,
# 2 heads, no class token) after apply_structured_init(..., seed=1, **options); produced by the pre-refactor solver
PRE_REFACTOR_MODEL_QK = {
    "shift, per_layer": (
        dict(per_layer=True),
        [(10.371492, 14.406784), (10.333446, -4.412492), (10.390147, 2.459735)],
    ),
    "shift, shared": (dict(per_layer=False), [(10.371492, 14.406784)] * 3),
    "shift, 5x5": (dict(kernel_size=5), [(10.434157, 9.791273), (10.288692, -3.234314), (10.396118, 2.445757)]),
    "shift, learned": (
        dict(pseudo_input="learned"),
        [(18.558829, 16.481183), (16.638925, 15.4049), (18.504934, 7.186766)],
    ),
    "svd, per_layer": (
        dict(SVD_DEFAULTS),
        [(206.631664, -93.242542), (99.068058, 56.237072), (206.631664, -93.242542)],
    ),
    "svd, 5x5 shared": (dict(SVD_DEFAULTS, kernel_size=5, per_layer=False), [(183.260916, 120.956871)] * 3),
    "pinv": (dict(PINV_DEFAULTS), [(14.017314, 14.5979), (14.730152, 13.47555), (14.012218, 14.601041)]),
    "v2": (dict(preset="v2"), [(14.004644, -5.381159), (14.003333, -5.388184), (14.006305, -5.333333)]),
}


@pytest.mark.parametrize("case", PRE_REFACTOR_MODEL_QK)
def test_model_init_keeps_its_pre_refactor_output(case: str) -> None:
    """Catches the init of a model (shifts per block or shared, solver options) moving from the pre-refactor solver."""
    from timm.models.vision_transformer import VisionTransformer

    from structinit_hf import apply_structured_init

    options, expected = PRE_REFACTOR_MODEL_QK[case]
    torch.manual_seed(0)
    model = VisionTransformer(
        img_size=16,
        patch_size=2,
        embed_dim=64,
        depth=3,
        num_heads=2,
        num_classes=3,
        class_token=False,
        global_pool="avg",
    )
    apply_structured_init(model, "impulse", seed=1, **options)
    for block, (norm, weighted) in zip(model.blocks, expected, strict=True):
        q, k = block.attn.qkv.weight.detach()[:128].reshape(2, 2, 32, 64).transpose(2, 3)
        assert qk_fingerprint(q, k) == pytest.approx((norm, weighted), abs=1e-5 * norm)


def test_solution_stays_inside_the_basis() -> None:
    x, shifts, _, head_dim = small_problem()
    hidden = torch.randn(64, 6, generator=torch.Generator().manual_seed(0))
    basis = impulse.complement_basis(64, exact=hidden)
    assert basis.shape == (64, 58)
    q, k = solvers.solve_qk(x, shifts, GRID, head_dim, basis=basis)
    torch.testing.assert_close(torch.einsum("dm,hde->hme", hidden, q), torch.zeros(4, 6, head_dim), atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.einsum("dm,hde->hme", hidden, k), torch.zeros(4, 6, head_dim), atol=1e-4, rtol=0)


def test_complement_basis_caps_approximate_directions() -> None:
    exact = torch.randn(16, 2)
    approximate = torch.randn(16, 40)  # more directions than the space has
    basis = impulse.complement_basis(16, exact=exact, approximate=approximate)
    assert basis.shape == (16, 8)  # at most half of the dimensions are removed
    torch.testing.assert_close(basis.T @ basis, torch.eye(8), atol=1e-5, rtol=0)
    torch.testing.assert_close(exact.T @ basis, torch.zeros(2, 8), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="cannot hide 10 directions"):
        impulse.complement_basis(16, exact=torch.randn(16, 10))


def test_solver_keeps_dtype() -> None:
    x, shifts, _, head_dim = small_problem()
    q, k = solvers.solve_qk(x.double(), shifts, GRID, head_dim)
    assert q.dtype == k.dtype == torch.float64


def test_solver_rejects_bad_arguments() -> None:
    x, shifts, _, head_dim = small_problem()
    with pytest.raises(ValueError, match=r"unknown solver 'lbfgs'; expected one of svd, adam, pinv, shift"):
        solvers.solve_qk(x, shifts, GRID, head_dim, "lbfgs")
    with pytest.raises(ValueError, match=r"sharpness .* must be in \(0, 1\), got 1.5"):
        solvers.solve_qk(x, shifts, GRID, head_dim, sharpness=1.5)
    with pytest.raises(ValueError, match=r"shifts must be a \(heads, 2\) integer tensor"):
        solvers.solve_qk(x, shifts.flatten(), GRID, head_dim)
    with pytest.raises(ValueError, match="one row per token of the 5x5 grid"):
        solvers.solve_qk(x, shifts, (5, 5), head_dim)
    with pytest.raises(TypeError, match="steps"):
        solvers.solve_qk(x, shifts, GRID, head_dim, "svd", steps=3)  # an option of another solver


def test_learned_pseudo_input_is_timms_position_embedding_draw() -> None:
    """Catches v2 solving on the wrong code: the draw must have timm's learned-embedding scale (std 0.02)."""
    code = impulse.pseudo_input(16, 192, "learned", seed=0, normalize=False)
    assert code.std().item() == pytest.approx(0.02, rel=0.05)
    assert code.abs().max().item() <= 2.0


def test_centre_first_shifts_follow_the_authors_cell_order() -> None:
    """Catches a wrong v2 order: cells 4, 1, 5, 3, 7, 0, 2, 6, 8 of the 3x3 window, whatever the seed."""
    shifts = impulse.impulse_shifts(10, 3, seed=7, grid_size=8, order="centre-first")
    expected = [(0, 0), (-1, 0), (0, 1), (0, -1), (1, 0), (-1, -1), (-1, 1), (1, -1), (1, 1), (0, 0)]
    assert [tuple(s) for s in shifts.tolist()] == expected
    with pytest.raises(ValueError, match="kernel_size 3 only"):
        impulse.impulse_shifts(3, 5, grid_size=8, order="centre-first")


@pytest.mark.parametrize("qk_frobenius", [1.0, 7.0])
def test_pinv_solver_peaks_on_the_target_at_the_requested_norm(qk_frobenius: float) -> None:
    """Catches a v2 solve that loses the pattern (e.g. a pseudo-inverse kept in near-null directions) or the norm."""
    x = impulse.pseudo_input(8, 64, "learned", seed=0)
    shifts = impulse.impulse_shifts(2, 3, grid_size=8, order="centre-first")
    targets = impulse.impulse_targets(8, shifts)
    q, k = solvers.solve_qk(x, shifts, 8, 32, "pinv", qk_frobenius=qk_frobenius)
    torch.testing.assert_close(q.flatten(1).norm(dim=1), torch.full((2,), qk_frobenius))
    torch.testing.assert_close(k.flatten(1).norm(dim=1), torch.full((2,), qk_frobenius))
    assert impulse.target_fidelity(impulse.attention_maps(x, q, k), targets)["hit_rate"] > 0.9
