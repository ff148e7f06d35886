"""Is it the structure? The norm-matched control of an init (``control="normmatched"``) and mimetic MLP init
(``mlp_init="mimetic"``), on the families the init takes, timm's and transformers'."""

from __future__ import annotations

import copy

import pytest
import timm
import torch
from transformers import ViTConfig, ViTModel

from structinit_hf import InitRefused, apply_structured_init
from structinit_hf.benchmark.arms import ALL_ARMS, STRUCTURE_ARMS
from structinit_hf.init.control import norm_matched
from structinit_hf.init.layer_scale import attention_scales
from structinit_hf.init.mlp import first_mlp_layers

TINY = dict(img_size=16, patch_size=4, depth=2, embed_dim=24, num_heads=3, num_classes=3)
TIMM_FAMILIES = ("vit_tiny_patch16_224", "deit3_small_patch16_224", "vit_small_patch16_rope_224",
                 "vit_relpos_small_patch16_224", "swin_tiny_patch4_window7_224")  # fmt: skip


def _tiny(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name.startswith("swin"):
        return timm.create_model(name, img_size=32, patch_size=2, window_size=4, embed_dim=24, depths=(2, 2),
                                 num_heads=(3, 6), num_classes=3)  # fmt: skip
    return timm.create_model(name, **TINY)


def _tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in [*model.named_parameters(), *model.named_buffers()]}


@pytest.mark.parametrize("method", ["impulse", "mimetic"])
@pytest.mark.parametrize("name", TIMM_FAMILIES)
def test_the_control_redraws_what_the_init_wrote_at_its_norms(name, method):
    """Catches a control that keeps the init's pattern, misses a tensor the init wrote, touches one it left alone,
    changes a norm, or closes the layer scale the init opened."""
    built = _tiny(name)
    init = apply_structured_init(copy.deepcopy(built), method)
    control = apply_structured_init(copy.deepcopy(built), method, control="normmatched")
    before, wrote, drawn = _tensors(built), _tensors(init), _tensors(control)
    scales = {id(scale) for scale in attention_scales(init)}
    scale_names = {n for n, t in [*init.named_parameters(), *init.named_buffers()] if id(t) in scales}
    changed = [n for n in before if not torch.equal(before[n], wrote[n])]
    assert changed, "the init wrote nothing"
    for n in before:
        if n not in changed:
            assert torch.equal(drawn[n], before[n]), f"{n}: the init left it, the control changed it"
        elif n in scale_names:
            assert torch.equal(drawn[n], wrote[n]), f"{n}: the layer scale the init opened is kept"
        else:
            mask = before[n] != wrote[n]
            assert torch.equal(drawn[n][~mask], wrote[n][~mask]), f"{n}: elements the init left are kept"
            assert torch.allclose(drawn[n][mask].norm(), wrote[n][mask].norm(), rtol=1e-4), n
            if mask.sum() > 8:  # a pattern: the control is not a rescaled copy of it
                cosine = torch.nn.functional.cosine_similarity(drawn[n][mask], wrote[n][mask], dim=0)
                assert cosine.abs() < 0.6, f"{n}: the control keeps the init's pattern (cosine {cosine:.2f})"
    assert not hasattr(control, "structinit_shifts") and not hasattr(control, "structinit_check")


def test_query_and_key_norms_are_matched_per_head():
    """Catches a control that matches a projection's norm as a whole, letting one head's scale move to another."""
    model = _tiny("vit_tiny_patch16_224")
    before = _tensors(model)
    head_dim, dim = TINY["embed_dim"] // TINY["num_heads"], TINY["embed_dim"]
    with torch.no_grad():  # an "init" that writes one query head at 10x and another key head at 0.1x
        model.blocks[0].attn.qkv.weight[:head_dim] *= 10
        model.blocks[0].attn.qkv.weight[dim + head_dim : dim + 2 * head_dim] *= 0.1
    wrote = model.blocks[0].attn.qkv.weight.detach().clone()
    assert norm_matched(model, before, seed=0) == ["blocks.0.attn.qkv.weight"]
    drawn = model.blocks[0].attn.qkv.weight
    for rows in (slice(0, head_dim), slice(dim + head_dim, dim + 2 * head_dim)):
        assert torch.allclose(drawn[rows].norm(), wrote[rows].norm(), rtol=1e-4)
        assert not torch.equal(drawn[rows], wrote[rows])
    assert torch.equal(drawn[head_dim:dim], wrote[head_dim:dim])  # heads nothing wrote


def test_the_control_on_transformers_vit_and_its_seed():
    """Catches a control that misses transformers' separate query/key/value projections, or one a seed does not fix."""
    config = ViTConfig(image_size=16, patch_size=4, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                       intermediate_size=48)  # fmt: skip
    torch.manual_seed(0)
    built = ViTModel(config)
    one = apply_structured_init(copy.deepcopy(built), "impulse", control="normmatched", seed=1)
    two = apply_structured_init(copy.deepcopy(built), "impulse", control="normmatched", seed=1)
    init = apply_structured_init(copy.deepcopy(built), "impulse", seed=1)
    query = lambda m: m.layers[0].attention.q_proj.weight  # noqa: E731
    assert torch.equal(query(one), query(two)) and not torch.equal(query(one), query(init))
    for wrote, drawn in zip(query(init).split(8), query(one).split(8), strict=True):
        assert torch.allclose(wrote.norm(), drawn.norm(), rtol=1e-4)


def test_the_control_is_an_option_of_the_inits_not_of_timms_default():
    with pytest.raises(ValueError, match="'default' takes only mlp_init, got \\['control'\\]"):
        apply_structured_init(_tiny("vit_tiny_patch16_224"), "default", control="normmatched")
    with pytest.raises(ValueError, match="unknown control 'shuffled'; expected None .* normmatched"):
        apply_structured_init(_tiny("vit_tiny_patch16_224"), "impulse", control="shuffled")


@pytest.mark.parametrize("method", ["default", "impulse", "mimetic"])
def test_mimetic_mlp_shifts_each_first_layer_by_its_spread_and_leaves_the_output_at_init(method):
    """Catches a shift on the wrong layer (the second, a relative-position bias MLP), of no size, or one that changes
    what the pre-norm block computes at init (a LayerNorm's output sums to zero over its channels)."""
    built = _tiny("vit_relpos_small_patch16_224")
    plain = apply_structured_init(copy.deepcopy(built), method)
    shifted = apply_structured_init(copy.deepcopy(built), method, mlp_init="mimetic")
    firsts = first_mlp_layers(shifted)
    assert len(firsts) == TINY["depth"]
    for block_plain, block_shifted in zip(plain.blocks, shifted.blocks, strict=True):
        before, after = block_plain.mlp.fc1.weight, block_shifted.mlp.fc1.weight
        assert torch.allclose(after - before, torch.full_like(before, before.std().item()), atol=1e-6)
        assert torch.equal(block_plain.mlp.fc2.weight, block_shifted.mlp.fc2.weight)
        assert torch.equal(block_plain.attn.rel_pos.mlp.fc1.weight, block_shifted.attn.rel_pos.mlp.fc1.weight)
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert torch.allclose(plain(images), shifted(images), atol=1e-4)


def test_mimetic_mlp_on_swiglu_and_transformers_and_refused_by_a_mixer():
    rope = apply_structured_init(_tiny("vit_small_patch16_rope_224"), "mimetic", mlp_init="mimetic")
    assert len(first_mlp_layers(rope)) >= TINY["depth"]
    config = ViTConfig(image_size=16, patch_size=4, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                       intermediate_size=48)  # fmt: skip
    vit = ViTModel(config)
    firsts = [layer.mlp.fc1.weight.detach().clone() for layer in vit.layers]
    apply_structured_init(vit, "default", mlp_init="mimetic")
    assert all(not torch.equal(old, layer.mlp.fc1.weight) for old, layer in zip(firsts, vit.layers, strict=True))
    mixer = timm.create_model("mixer_s4_32", num_blocks=2, embed_dim=32, num_classes=3)
    with pytest.raises(InitRefused, match="mlp_init"):
        apply_structured_init(mixer, "impulse", mlp_init="mimetic")


@pytest.mark.parametrize("name, kwargs", [("vit_tiny_impulse3", {"control": "normmatched"}),
                                          ("vit_tiny_mimetic", {"control": "normmatched", "mlp_init": "mimetic"}),
                                          ("vit_tiny_patch2_32", {"mlp_init": "mimetic"})])  # fmt: skip
def test_registered_names_take_and_record_the_options(name, kwargs):
    import structinit_hf  # noqa: F401  (registers the names)

    model = timm.create_model(name, img_size=16, embed_dim=24, depth=2, num_heads=3, num_classes=3, **kwargs)
    assert {k: model.structinit_settings[k] for k in kwargs} == kwargs


def test_the_structure_arms_name_their_base_arm_and_option():
    for name, arm in STRUCTURE_ARMS.items():
        base = ALL_ARMS[name.rsplit("-", 1)[0]]
        added = {k: v for k, v in arm.model_kwargs.items() if base.model_kwargs.get(k) != v}
        assert arm.model == base.model and len(added) == 1 or name == "model-default-mlpmimetic", name
    assert STRUCTURE_ARMS["model-impulse3-mimeticvo-attnls1-normmatched"].model_kwargs["control"] == "normmatched"


def test_the_control_of_an_init_with_mimetic_mlps_redraws_their_shift_too():
    """Catches the control and mlp_init="mimetic" combined in another order than documented (docs/method.md: the
    control redraws every tensor the init wrote, the shifted first MLP layers included): a control that keeps the
    MLP's mean, or one whose MLP norm is not the shifted layer's."""
    built = _tiny("vit_tiny_patch16_224")
    shifted = apply_structured_init(copy.deepcopy(built), "impulse", mlp_init="mimetic")
    control = apply_structured_init(copy.deepcopy(built), "impulse", mlp_init="mimetic", control="normmatched")
    for wrote, drawn in zip(first_mlp_layers(shifted), first_mlp_layers(control), strict=True):
        assert wrote.weight.mean() > 0.5 * wrote.weight.std()  # mimetic MLP's shift: the mean is the spread
        assert torch.allclose(drawn.weight.norm(), wrote.weight.norm(), rtol=1e-4)
        assert drawn.weight.mean().abs() < 0.2 * drawn.weight.std()
