"""apply_structured_init on timm VisionTransformers: weights land where the algorithms say."""

from __future__ import annotations

import pytest
import timm
import torch
from timm.models.vision_transformer import VisionTransformer

from structinit_hf import apply_structured_init, mimetic_qk, mimetic_vo
from structinit_hf.benchmark.attention import block_fidelity, timm_attention_maps
from structinit_hf.init import impulse, solvers
from structinit_hf.init.apply import impulse_block_targets
from structinit_hf.init.options import PINV_DEFAULTS, SVD_DEFAULTS

SVD = SVD_DEFAULTS  # the "svd" closed form (the defaults): tests of its content suppression spell it out
PINV = PINV_DEFAULTS  # v2's closed form and scale with random shifts


def tiny_vit(**kwargs) -> VisionTransformer:
    args = dict(img_size=16, patch_size=2, embed_dim=64, depth=2, num_heads=2, num_classes=3)
    return VisionTransformer(**{**args, **kwargs})


def qk_rows(model: VisionTransformer, block: int) -> torch.Tensor:
    attn = model.blocks[block].attn
    return attn.qkv.weight[: 2 * attn.num_heads * attn.head_dim].detach()


@pytest.mark.parametrize("prefix", [dict(class_token=False, global_pool="avg"), dict(class_token=True, reg_tokens=2)])
def test_impulse_attention_on_patch_tokens_of_images(prefix: dict) -> None:
    torch.manual_seed(0)
    images = torch.randn(8, 3, 16, 16)
    # the default patch-embedding scale (1, which trains better) keeps most rows on target under raw noise pixels
    model = apply_structured_init(tiny_vit(**prefix).eval(), "impulse", kernel_size=3, seed=1, **SVD)
    fidelity = block_fidelity(model, images, impulse_block_targets(model))
    assert fidelity[0]["hit_rate"] >= 0.8
    assert fidelity[0]["target_mass"] > 0.2  # uniform attention would give 1/64
    # halving it lets the position code dominate each token's LayerNorm: nearly every row on target
    torch.manual_seed(0)
    halved = {**SVD, "patch_embed_scale": 0.5}
    model = apply_structured_init(tiny_vit(**prefix).eval(), "impulse", kernel_size=3, seed=1, **halved)
    fidelity = block_fidelity(model, images, impulse_block_targets(model))
    assert fidelity[0]["hit_rate"] >= 0.9
    assert fidelity[0]["target_mass"] > 0.3
    # the timm default init it replaced has no such pattern
    torch.manual_seed(0)
    plain = tiny_vit(**prefix).eval()
    assert block_fidelity(plain, images, impulse_block_targets(plain, model.structinit_shifts))[0]["hit_rate"] < 0.2


def test_shared_solution_is_copied_and_per_layer_draws_fresh_shifts() -> None:
    shared = apply_structured_init(tiny_vit(depth=3), "impulse", seed=0, per_layer=False)
    torch.testing.assert_close(qk_rows(shared, 0), qk_rows(shared, 2), rtol=0, atol=0)
    per_layer = apply_structured_init(tiny_vit(depth=3), "impulse", seed=0, per_layer=True)
    targets = impulse_block_targets(per_layer)
    assert not torch.equal(targets[0], targets[1])
    assert not torch.equal(qk_rows(per_layer, 0), qk_rows(per_layer, 1))


def test_query_key_biases_are_zeroed_and_position_code_written() -> None:
    model = tiny_vit(class_token=True)
    with torch.no_grad():
        model.blocks[0].attn.qkv.bias.fill_(0.3)
    apply_structured_init(model, "impulse", **{**SVD, "value_init": "default"})
    bias = model.blocks[0].attn.qkv.bias
    assert torch.all(bias[:128] == 0) and torch.all(bias[128:] == 0.3)  # values keep theirs
    torch.testing.assert_close(model.pos_embed[0, 1:], impulse.sincos_2d(8, 64))
    apply_structured_init(model, "impulse", seed=4, **PINV_DEFAULTS)  # 18 x a learned-style draw
    torch.testing.assert_close(model.pos_embed[0, 1:], 18 * impulse.pseudo_input(8, 64, "learned", 4, normalize=False))


def test_impulse_solve_runs_once_for_all_blocks(monkeypatch) -> None:
    """Catches a solve per block (12 factorisations of one pseudo input) or a shared solve fitting every block."""
    heads = []
    real = solvers.solve_qk
    monkeypatch.setattr(
        solvers, "solve_qk", lambda x, targets, *a, **k: heads.append(len(targets)) or real(x, targets, *a, **k)
    )
    apply_structured_init(tiny_vit(depth=3), "impulse", per_layer=False)
    apply_structured_init(tiny_vit(depth=3), "impulse", per_layer=True)
    assert heads == [2, 6]  # one call each: one block's heads, then every block's


def test_mimetic_writes_the_factors_of_each_layer() -> None:
    model = apply_structured_init(tiny_vit(depth=2), "mimetic", seed=7)
    attn = model.blocks[1].attn
    q, k = mimetic_qk(64, 2, 32, seed=7 + 1000)
    v, o = mimetic_vo(64, 64, seed=7 + 1000)
    torch.testing.assert_close(attn.qkv.weight[:64], q.permute(0, 2, 1).reshape(64, 64))
    torch.testing.assert_close(attn.qkv.weight[64:128], k.permute(0, 2, 1).reshape(64, 64))
    torch.testing.assert_close(attn.qkv.weight[128:], v.T)
    torch.testing.assert_close(attn.proj.weight, o.T)
    # the attention logits of the layer favour each token's own position (the + 0.7 I term)
    maps = timm_attention_maps(model.eval(), torch.randn(2, 3, 16, 16))[0]
    assert (maps.argmax(-1) == torch.arange(65)).float().mean() > 0.5


def test_impulse_value_init_mimetic_adds_mimetic_value_output_to_the_solved_query_key() -> None:
    torch.manual_seed(0)
    plain = apply_structured_init(tiny_vit(depth=2), "impulse", seed=3, **SVD)
    torch.manual_seed(0)
    model = apply_structured_init(tiny_vit(depth=2), "impulse", seed=3, **{**SVD, "value_init": "mimetic"})
    for index, (ours, theirs) in enumerate(zip(model.blocks, plain.blocks, strict=True)):
        torch.testing.assert_close(ours.attn.qkv.weight[:128], theirs.attn.qkv.weight[:128])  # same Q/K solve
        v, o = mimetic_vo(64, 64, seed=3 + 1000 * index)
        torch.testing.assert_close(ours.attn.qkv.weight[128:], v.T)
        torch.testing.assert_close(ours.attn.proj.weight, o.T)
        assert not torch.allclose(theirs.attn.proj.weight, o.T)  # the paper's default leaves V/O as drawn
    with pytest.raises(ValueError, match=r"unknown value_init 'identity'; expected one of default, mimetic"):
        apply_structured_init(tiny_vit(), "impulse", value_init="identity")


def test_default_leaves_the_model_untouched() -> None:
    model = tiny_vit()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    apply_structured_init(model, "default")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_bad_inputs_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"unknown init method 'xavier'; expected one of impulse, mimetic, default"):
        apply_structured_init(tiny_vit(), "xavier")
    with pytest.raises(ValueError, match=r"unknown pseudo_input 'noise'"):
        apply_structured_init(tiny_vit(), "impulse", pseudo_input="noise")
    with pytest.raises(ValueError, match=r"kernel_size must be an odd int >= 1 .* got 4"):
        apply_structured_init(tiny_vit(), "impulse", kernel_size=4)
    with pytest.raises(ValueError, match=r"kernel_size 9 does not fit the 8x8 patch grid"):
        apply_structured_init(tiny_vit(), "impulse", kernel_size=9)
    with pytest.raises(ValueError, match="qk_norm"):
        apply_structured_init(tiny_vit(qk_norm=True), "impulse")
    with pytest.raises(ValueError, match="ResNet: has no attention layers structured init can handle"):
        apply_structured_init(timm.create_model("resnet10t"), "impulse")
    with pytest.raises(ValueError, match=r"'mimetic' takes only seed, mlp_init, control, got \['kernel_size'\]"):
        apply_structured_init(tiny_vit(), "mimetic", kernel_size=3)


def test_non_square_images_get_impulses_on_their_grid() -> None:
    torch.manual_seed(0)
    vit = tiny_vit(img_size=(8, 12), class_token=False, global_pool="avg").eval()
    model = apply_structured_init(vit, "impulse", **SVD)
    assert model.patch_embed.grid_size == (4, 6)
    targets = impulse_block_targets(model)
    assert targets[0].shape == (2, 24, 24)
    fidelity = block_fidelity(model, torch.randn(4, 3, 8, 12), targets)
    assert fidelity[0]["hit_rate"] >= 0.9


def test_prefix_tokens_do_not_outscore_the_targets() -> None:
    """Class and register keys are hidden from Q/K (logit 0); the targets must still win over them."""
    torch.manual_seed(0)
    model = apply_structured_init(tiny_vit(class_token=True, reg_tokens=3, depth=1).eval(), "impulse", **SVD)
    maps = timm_attention_maps(model, torch.randn(8, 3, 16, 16))[0]
    prefix = model.num_prefix_tokens
    targets = torch.cat([torch.zeros(2, 64, prefix), impulse_block_targets(model)[0]], dim=-1)
    fidelity = impulse.target_fidelity(maps[:, :, prefix:, :], targets)  # rows of patch tokens, all keys
    assert fidelity["hit_rate"] >= 0.85
    assert maps[:, :, prefix:, :prefix].sum(-1).mean() < 0.2  # little attention goes to the prefix


def test_presets_fix_their_options_and_refuse_a_clash() -> None:
    """Catches a preset that silently takes a conflicting option, or one that drops an option it fixes."""
    from structinit_hf.init.options import PRESETS, ImpulseOptions

    v2 = ImpulseOptions(preset="v2", seed=3)
    assert {name: getattr(v2, name) for name in PRESETS["v2"]} == PRESETS["v2"] and v2.seed == 3
    assert ImpulseOptions(preset="v2", kernel_size=3, solver="pinv") == ImpulseOptions(preset="v2")  # same values pass
    with pytest.raises(ValueError, match=r"preset 'v2' sets kernel_size=3 \(got 5\), solver='pinv' \(got 'svd'\)"):
        ImpulseOptions(preset="v2", kernel_size=5, solver="svd")
    with pytest.raises(ValueError, match="unknown impulse preset 'v3'; expected one of structinit, v1, v2"):
        ImpulseOptions(preset="v3")
    with pytest.raises(ValueError, match="qk_frobenius must be >= 0"):
        ImpulseOptions(qk_frobenius=-1.0)


def test_v2_writes_a_scaled_learned_position_code_and_mimetic_value_output() -> None:
    """Catches v2 losing one of its parts: the x18 learned-style code, per-head Q/K at norm 7, mimetic V/O."""
    model = apply_structured_init(tiny_vit(class_token=False, global_pool="avg"), "impulse", preset="v2", seed=2)
    code = impulse.pseudo_input((8, 8), 64, "learned", seed=2, normalize=False)
    torch.testing.assert_close(model.pos_embed[0].detach(), 18 * code)
    q = qk_rows(model, 1)[:64].reshape(2, 32, 64)  # heads x head_dim x dim
    torch.testing.assert_close(q.flatten(1).norm(dim=1), torch.full((2,), 7.0))
    v, o = mimetic_vo(64, 64, seed=2 + 1000)
    torch.testing.assert_close(model.blocks[1].attn.proj.weight.detach(), o.T)


def test_timm_models_record_the_preset_and_train_v2s_position_embedding() -> None:
    """Catches a checkpoint that cannot tell which construction it started from, or a frozen v2 embedding."""
    tiny = dict(depth=2, img_size=16, embed_dim=64, num_heads=2)
    v2 = timm.create_model("vit_tiny_impulse3", preset="v2", **tiny)
    assert v2.structinit_settings["preset"] == "v2" and v2.structinit_settings["solver"] == "pinv"
    assert v2.pos_embed.requires_grad and timm.create_model("vit_tiny_impulse3", **tiny, **PINV).pos_embed.requires_grad
    assert not timm.create_model("vit_tiny_impulse3", **tiny).pos_embed.requires_grad  # a fixed sin-cos code
    with pytest.raises(ValueError, match=r"preset 'v2' sets kernel_size=3 \(got 5\)"):
        timm.create_model("vit_tiny_impulse5", preset="v2", **tiny)


def test_pinv_construction_starts_soft_but_on_target() -> None:
    """Catches the pinv construction (v2's scale, random shifts) turning as sharp as the svd one (Q/K norm ~21 at the
    paper's size) or losing the pattern: block 1 must peak on the target for most rows while keeping attention soft."""
    from structinit_hf.benchmark.attention import init_health

    torch.manual_seed(0)
    model = apply_structured_init(tiny_vit(class_token=False, global_pool="avg").eval(), "impulse", seed=1, **PINV)
    first = init_health(model, torch.randn(8, 3, 16, 16), impulse_block_targets(model))[0]
    assert first["hit_rate"] > 0.5
    assert 0.2 < first["entropy_ratio"] < 0.9
    assert first["q_norm"] < 5.0
    svd = apply_structured_init(tiny_vit(class_token=False, global_pool="avg").eval(), "impulse", seed=1, **SVD)
    assert init_health(svd, torch.randn(8, 3, 16, 16))[0]["q_norm"] > 2 * first["q_norm"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["vit_tiny_impulse3", "vit_tiny_mimetic"])
def test_half_precision_builds_solve_in_float32_and_write_the_model_dtype(name: str, dtype: torch.dtype) -> None:
    """Under a half-precision default dtype (torch.set_default_dtype; transformers' from_config(dtype=...) sets it
    too) the init still solves in float32 and writes its float32 result, rounded, into the model's dtype."""
    geometry = dict(img_size=16, patch_size=2, embed_dim=32, depth=2, num_heads=2)
    reference = timm.create_model(name, **geometry)
    torch.set_default_dtype(dtype)
    try:
        model = timm.create_model(name, **geometry)
        assert torch.get_default_dtype() == dtype  # the init restores the caller's default
    finally:
        torch.set_default_dtype(torch.float32)
    for built, expected in (
        (model.blocks[1].attn.qkv.weight, reference.blocks[1].attn.qkv.weight),
        (model.pos_embed, reference.pos_embed),
    ):
        assert built.dtype == dtype
        torch.testing.assert_close(built, expected.to(dtype), rtol=0, atol=0)
    timm_cast = timm.create_model(name, dtype=dtype, **geometry)  # timm's own dtype= keyword
    assert timm_cast.blocks[0].attn.qkv.weight.dtype == dtype
