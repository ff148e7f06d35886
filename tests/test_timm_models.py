"""The timm registry: every name builds, trains a step, loads weights without solving."""

from __future__ import annotations

import re

import pytest
import timm
import torch
from safetensors.torch import save_file
from timm.data import IMAGENET_DEFAULT_MEAN

import structinit_hf  # noqa: F401  (registers the models)
from structinit_hf.init import impulse, solvers

TINY = dict(img_size=16, patch_size=2, depth=1)  # an 8x8 patch grid fits the 5x5 kernel
OUR_NAMES = [
    "vit_tiny_patch2_32",
    "vit_tiny_impulse3",
    "vit_tiny_impulse5",
    "vit_tiny_mimetic",
    "vit_mimetic",
    "convit_tiny_patch2_32",
    "vit_tiny_impulse3_patch16_224",
    "vit_small_impulse3_patch16_224",
    "vit_base_impulse3_patch16_224",
]


# the Swin and Mixer names (tests/test_families.py builds them)
FAMILY_NAMES = [
    "swin_tiny_patch2_window4_32",
    "swin_tiny_impulse3_patch2_window4_32",
    "swin_tiny_mimetic_patch2_window4_32",
    "swin_tiny_impulse3_patch4_window7_224",
    "swin_tiny_mimetic_patch4_window7_224",
    "mixer_s4_32",
    "mixer_s4_impulse3_32",
    "mixer_s16_impulse3_224",
]


def test_names_are_listed_and_timm_names_are_not_shadowed() -> None:
    assert set(OUR_NAMES + FAMILY_NAMES) <= set(timm.list_models())
    assert set(timm.list_models("*impulse*")) == {n for n in OUR_NAMES + FAMILY_NAMES if "impulse" in n}
    ours = set(timm.list_models(module="structinit_swin")) | set(timm.list_models(module="structinit_mixer"))
    assert ours == set(FAMILY_NAMES)
    assert not ours & (set(timm.list_models(module="swin_transformer")) | set(timm.list_models(module="mlp_mixer")))
    stock = timm.create_model("vit_tiny_patch16_224")
    assert stock.cls_token is not None and stock.patch_embed.img_size == (224, 224)
    assert type(timm.create_model("convit_tiny")).__name__ == "ConVit"


@pytest.mark.parametrize("name", OUR_NAMES)
def test_every_name_builds_runs_forward_and_backward(name: str) -> None:
    kwargs = dict(TINY, num_classes=5)
    if "small" in name or "base" in name:
        kwargs.update(embed_dim=64, num_heads=2)
    if name.startswith("convit"):
        kwargs.update(local_up_to_layer=1, depth=2)
        kwargs.pop("embed_dim", None)
    model = timm.create_model(name, **kwargs)
    logits = model(torch.randn(2, 3, 16, 16))
    assert logits.shape == (2, 5)
    logits.sum().backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and all(p.grad is not None for p in trainable)
    config = timm.data.resolve_model_data_config(model)
    assert config["input_size"] == (3, 16, 16)


@pytest.mark.slow
def test_cifar_defaults_follow_the_paper() -> None:
    model = timm.create_model("vit_tiny_impulse3")
    assert model.patch_embed.img_size == (32, 32) and model.patch_embed.patch_size == (2, 2)
    assert model.embed_dim == 192 and len(model.blocks) == 12 and model.blocks[0].attn.num_heads == 3
    assert model.cls_token is None and model.global_pool == "avg" and model.num_classes == 10
    assert not model.pos_embed.requires_grad  # fixed sin-cos
    torch.testing.assert_close(model.pos_embed[0], impulse.sincos_2d(16, 192))
    assert timm.data.resolve_model_data_config(model)["input_size"] == (3, 32, 32)
    big = timm.create_model("vit_small_impulse3_patch16_224")
    assert timm.data.resolve_model_data_config(big)["input_size"] == (3, 224, 224) and big.num_classes == 1000


def test_impulse_options_reach_the_solver_and_are_deterministic() -> None:
    qk = slice(0, 2 * 192)
    torch.manual_seed(0)
    a = timm.create_model("vit_tiny_impulse5", **TINY, seed=3)
    torch.manual_seed(0)
    b = timm.create_model("vit_tiny_impulse5", **TINY, seed=3)
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    # the paper's setting reads only the position code: the global RNG changes other weights, not Q/K
    torch.manual_seed(0)
    plain = timm.create_model("vit_tiny_impulse5", **TINY, seed=3, suppress_content=False)
    torch.manual_seed(1)
    other = timm.create_model("vit_tiny_impulse5", **TINY, seed=3, suppress_content=False)
    torch.testing.assert_close(plain.blocks[0].attn.qkv.weight[qk], other.blocks[0].attn.qkv.weight[qk], rtol=0, atol=0)
    assert not torch.equal(plain.blocks[0].mlp.fc1.weight, other.blocks[0].mlp.fc1.weight)
    c = timm.create_model("vit_tiny_impulse3", **TINY, seed=3, sharpness=0.3, pseudo_input="sincos+gaussian")
    assert not torch.equal(a.blocks[0].attn.qkv.weight[qk], c.blocks[0].attn.qkv.weight[qk])


def test_pretrained_with_a_local_file_loads_and_never_solves(tmp_path, monkeypatch) -> None:
    trained = timm.create_model("vit_tiny_impulse3", **TINY)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.01)
    path = tmp_path / "model.safetensors"
    save_file(trained.state_dict(), str(path))
    calls = []
    monkeypatch.setattr(solvers, "solve_qk", lambda *a, **k: calls.append(1))
    loaded = timm.create_model(
        "vit_tiny_impulse3", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **TINY
    )
    assert calls == []
    for key, value in trained.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    assert not loaded.pos_embed.requires_grad


def test_pretrained_without_weights_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="vit_tiny_impulse3 has no published weights"):
        timm.create_model("vit_tiny_impulse3", pretrained=True, **TINY)


REGISTERED = sorted({*timm.list_models(module="structinit_vit"), *timm.list_models(module="convit_baseline")})


def tiny_kwargs(name: str) -> dict:
    """Any registered name at 16 px, depth 1 (ConViT: 2), width 24 in 3 heads; an 8x8 grid fits every kernel."""
    if name.startswith("convit"):
        return dict(img_size=16, patch_size=2, depth=2, local_up_to_layer=1, embed_dim=8, num_heads=3)  # 8 per head
    return dict(img_size=16, patch_size=2, depth=1, embed_dim=24, num_heads=3)


def saved_with_the_cfg_classes(name: str, folder) -> dict[str, torch.Tensor]:
    """A tiny ``name`` with its cfg's class count (10, or 1000 for the 224 px names), saved as model.safetensors."""
    state = timm.create_model(name, **tiny_kwargs(name)).state_dict()
    save_file(state, str(folder / "model.safetensors"))
    return state


@pytest.mark.parametrize("name", REGISTERED)
def test_the_no_weights_error_names_an_overlay_that_loads_the_backbone_under_a_new_head(name, tmp_path) -> None:
    """The overlay the error prints, run with another num_classes: as on stock timm names, timm drops the file's
    head and keeps a new one."""
    saved = saved_with_the_cfg_classes(name, tmp_path)
    with pytest.raises(ValueError, match="no published weights") as error:
        timm.create_model(name, pretrained=True, num_classes=3, **tiny_kwargs(name))
    file = re.search(r"pretrained_cfg_overlay=dict\(file='([^']+)'\)", str(error.value)).group(1)
    overlay = dict(file=str(tmp_path / file))
    loaded = timm.create_model(
        name, pretrained=True, pretrained_cfg_overlay=overlay, num_classes=3, **tiny_kwargs(name)
    )
    state = loaded.state_dict()
    assert state["head.weight"].shape == (3, saved["head.weight"].shape[1]) and loaded.num_classes == 3
    assert sorted(state) == sorted(saved)
    for key in sorted(set(saved) - {"head.weight", "head.bias"}):
        assert torch.equal(state[key], saved[key]), key


@pytest.mark.parametrize("name", REGISTERED)
def test_a_local_file_with_the_cfg_class_count_loads_its_head_exactly(name, tmp_path) -> None:
    saved = saved_with_the_cfg_classes(name, tmp_path)
    num_classes = timm.models.get_pretrained_cfg(name).num_classes
    overlay = dict(file=str(tmp_path / "model.safetensors"))
    loaded = timm.create_model(
        name, pretrained=True, pretrained_cfg_overlay=overlay, num_classes=num_classes, **tiny_kwargs(name)
    )
    state = loaded.state_dict()
    assert sorted(state) == sorted(saved)
    for key, value in saved.items():
        assert torch.equal(state[key], value), key


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(img_size=30, patch_size=4), r"img_size / image_size \(30, 30\) is not divisible by patch_size \(4, 4\)"),
        (
            dict(embed_dim=100, num_heads=3),
            "hidden_size 100 is not divisible by num_heads / num_attention_heads 3",
        ),
        (dict(num_heads=0), "num_heads / num_attention_heads must be a positive int, got 0"),  # not a ZeroDivision
        (dict(embed_dim=-48), "embed_dim / hidden_size must be a positive int, got -48"),
        (dict(kernel_size=2), "kernel_size must be an odd int"),
        (dict(img_size=8, patch_size=4, kernel_size=3), "kernel_size 3 does not fit the 2x2 patch grid"),
        (dict(pseudo_input="fourier"), "unknown pseudo_input 'fourier'"),
        (dict(pos_embed="rope"), "unknown pos_embed 'rope'; expected one of sincos, learn, none"),
    ],
)
def test_bad_input_is_a_value_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        timm.create_model("vit_tiny_impulse3", **{**dict(depth=1), **kwargs})


def test_mimetic_and_control_reject_impulse_options() -> None:
    with pytest.raises(ValueError, match=r"init method 'mimetic' takes only seed, mlp_init, control, got \['kernel_size'\]"):
        timm.create_model("vit_tiny_mimetic", kernel_size=5, **TINY)
    with pytest.raises(ValueError, match=r"init method 'default' takes only mlp_init, got \['seed'\]"):
        timm.create_model("vit_tiny_patch2_32", seed=1, **TINY)


def test_fresh_models_record_their_init_settings() -> None:
    impulse_model = timm.create_model("vit_tiny_impulse5", **TINY, seed=4, sharpness=0.6)
    shifts = impulse_model.structinit_settings.pop("shifts")  # per block, [dy, dx] per head, in the 5x5 window
    assert len(shifts) == 1 and len(shifts[0]) == 3 and all(abs(c) <= 2 for shift in shifts[0] for c in shift)
    assert impulse_model.structinit_settings == {
        "attention_init": "impulse",
        "preset": "structinit",
        "kernel_size": 5,
        "seed": 4,
        "pseudo_input": "sincos",
        "sharpness": 0.6,
        "solver": "shift",
        "per_layer": True,
        "suppress_content": False,
        "patch_embed_scale": 1.0,
        "value_init": "mimetic",
        "shift_order": "random",
        "qk_frobenius": 0.0,
        "position_scale": 1.0,
        "attn_layer_scale": None,
        "control": None,
        "mlp_init": "default",
    }
    assert timm.create_model("vit_mimetic", **TINY).structinit_settings == {
        "attention_init": "mimetic", "seed": 0, "mlp_init": "default", "control": None
    }  # fmt: skip
    assert timm.create_model("vit_tiny_patch2_32", **TINY).structinit_settings == {"attention_init": "default"}
    reset = timm.create_model("vit_tiny_patch2_32", **TINY, weight_init="reset")
    assert reset.structinit_settings == {"attention_init": "default", "weight_init": "reset"}


# what a user of each name gets from timm's data config, written out (not read back from the variant table)
EXPECTED_DATA = {
    **dict.fromkeys(
        ["vit_tiny_patch2_32", "vit_tiny_impulse3", "vit_tiny_impulse5", "vit_tiny_mimetic", "vit_mimetic"],
        ((3, 32, 32), 10, 1.0, (0.4914, 0.4822, 0.4465), 2, 192, 3),
    ),
    **dict.fromkeys(
        ["vit_tiny_impulse3_patch16_224", "vit_small_impulse3_patch16_224", "vit_base_impulse3_patch16_224"],
        ((3, 224, 224), 1000, 0.9, IMAGENET_DEFAULT_MEAN, 16, None, None),
    ),
}


@pytest.mark.parametrize(  # ViT-Base at 224 px takes seconds to build: slow
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n.startswith("vit_base") else n for n in sorted(EXPECTED_DATA)],
)
def test_registered_names_give_the_data_config_and_geometry_users_expect(name: str) -> None:
    """Catches a crop, normalization, class count or geometry that drifts from what the README promises."""
    input_size, num_classes, crop_pct, mean, patch, width, heads = EXPECTED_DATA[name]
    model = timm.create_model(name, depth=1, **({"img_size": 48} if input_size[-1] == 224 else {}))
    config = timm.data.resolve_data_config({}, pretrained_cfg=timm.models.get_pretrained_cfg(name).to_dict())
    assert (config["input_size"], config["crop_pct"], tuple(config["mean"])) == (input_size, crop_pct, mean)
    assert timm.models.get_pretrained_cfg(name).num_classes == num_classes == model.num_classes
    assert model.patch_embed.patch_size == (patch, patch)
    if width is not None:
        assert (model.embed_dim, model.blocks[0].attn.num_heads) == (width, heads)


@pytest.mark.parametrize("name", ["vit_tiny_impulse3", "vit_tiny_mimetic", "vit_tiny_patch2_32"])
def test_timm_citizenship_features_meta_resize_and_gradients(name: str) -> None:
    """What timm's own suite asks of every model, on a tiny build: features_only, a meta-device build that
    solves nothing, dynamic_img_size, set_input_size keeping the fixed code a buffer, a gradient for every
    parameter."""
    features = timm.create_model(name, features_only=True, out_indices=(0, 1), **dict(TINY, depth=2))
    assert [tuple(f.shape) for f in features(torch.randn(2, 3, 16, 16))] == [(2, 192, 8, 8)] * 2
    with torch.device("meta"):
        skeleton = timm.create_model(name, **TINY)
    assert skeleton.structinit_settings is None and skeleton.pos_embed.is_meta
    assert timm.create_model(name, device="meta", **TINY).blocks[0].attn.qkv.weight.is_meta

    model = timm.create_model(name, num_classes=3, **TINY)
    assert "pos_embed" in dict(model.named_buffers()) and "pos_embed" in model.state_dict()
    model(torch.randn(2, 3, 16, 16)).sum().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()] == []
    model.set_input_size(img_size=24)
    assert "pos_embed" in dict(model.named_buffers()) and model.pos_embed.shape[1] == 144
    assert model(torch.randn(1, 3, 24, 24)).shape == (1, 3)
    dynamic = timm.create_model(name, dynamic_img_size=True, **TINY)
    assert dynamic(torch.randn(1, 3, 20, 12)).shape == (1, 10)


def test_the_names_keep_out_of_timms_own_module_lists():
    """timm groups names by the last part of their module's path: ours must not join vision_transformer or convit."""
    ours = set(timm.list_models(module="structinit_vit")) | set(timm.list_models(module="convit_baseline"))
    assert {"vit_tiny_impulse3", "vit_tiny_patch2_32", "convit_tiny_patch2_32"} <= ours
    assert not ours & (set(timm.list_models(module="vision_transformer")) | set(timm.list_models(module="convit")))
