"""The impulse's ``attn_layer_scale`` (issue 67): the attention branch's layer scale at init, on the layer-scaled
ViTs timm builds (DeiT-III, relative-position, rotary), the MLP branch's left as built."""

from __future__ import annotations

import copy

import pytest
import timm
import torch

from structinit_hf import InitRefused, apply_structured_init
from structinit_hf.init.layer_scale import attention_layer_scale, attention_scales

TINY = dict(img_size=16, patch_size=4, depth=2, embed_dim=24, num_heads=3, num_classes=3)
FAMILIES = {  # timm name -> where a block keeps its MLP branch's scale
    "deit3_small_patch16_224": lambda block: block.ls2.gamma,
    "vit_relpos_small_patch16_224": lambda block: block.ls2.gamma,
    "vit_small_patch16_rope_224": lambda block: block.gamma_2,
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_option_opens_the_attention_branch_and_leaves_the_mlp_branch(name):
    """Catches an option that does nothing, that also opens the MLP branch, or that misses a family's attribute."""
    torch.manual_seed(0)
    model = timm.create_model(name, **TINY)
    built = attention_layer_scale(model)
    mlp_before = [FAMILIES[name](block).detach().clone() for block in model.blocks]
    apply_structured_init(model, "impulse", attn_layer_scale=0.1)
    assert built in (1e-6, 1e-5) and len(attention_scales(model)) == TINY["depth"]
    assert all(torch.equal(scale, torch.full_like(scale, 0.1)) for scale in attention_scales(model))
    assert all(torch.equal(FAMILIES[name](block), before) for block, before in zip(model.blocks, mlp_before))


def test_a_model_without_layer_scale_refuses_the_option_unchanged():
    """Catches a value silently ignored on a model with nothing to scale, or a refusal after the init has written."""
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", **TINY)
    before = {key: value.clone() for key, value in model.state_dict().items()}
    with pytest.raises(InitRefused, match="VisionTransformer: has no layer scale on its attention branch"):
        apply_structured_init(model, "impulse", attn_layer_scale=1.0)
    assert all(torch.equal(model.state_dict()[key], value) for key, value in before.items())
    assert not hasattr(model, "structinit_shifts")


@pytest.mark.parametrize("value", [0, -0.5, True, "1"])
def test_a_bad_value_is_refused_naming_the_option(value):
    """Catches a scale of 0 (a closed branch), a negative one, a bool or a string taken as a number."""
    model = timm.create_model("deit3_small_patch16_224", **TINY)
    with pytest.raises(ValueError, match=r"attn_layer_scale must be a number > 0 .*got " + repr(value).replace("(", r"\(")):
        apply_structured_init(model, "impulse", attn_layer_scale=value)


def test_the_opened_scale_is_what_a_stock_timm_build_loads():
    """Catches an opened scale kept outside the weights (a saved model would start at timm's 1e-6 again)."""
    torch.manual_seed(0)
    model = apply_structured_init(timm.create_model("deit3_small_patch16_224", **TINY), "impulse", attn_layer_scale=1.0)
    fresh = timm.create_model("deit3_small_patch16_224", **TINY)
    fresh.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 16, 16)
    assert attention_layer_scale(fresh) == 1.0 and torch.equal(fresh(x), model(x))


# the paper's CIFAR geometry (32 px, width 192, 3 heads, depth 12) at patch 4: an 8 x 8 grid
PAPER_GEOMETRY = dict(img_size=32, patch_size=4, embed_dim=192, num_heads=3, depth=12, num_classes=10)
STOCK_LOAD = """
import sys
sys.modules["structinit_hf"] = None
import timm, torch
from safetensors.torch import load_file
folder, io = sys.argv[1], load_file(sys.argv[2])
model = timm.create_model("local-dir:" + folder, pretrained=True).eval()
with torch.no_grad():
    assert torch.equal(model(io["pixels"]), io["logits"]), "logits differ"
from transformers import AutoModelForImageClassification
wrapped = AutoModelForImageClassification.from_pretrained(folder).eval()
with torch.no_grad():
    assert torch.equal(wrapped(io["pixels"]).logits, io["logits"]), "transformers' logits differ"
print(type(model).__name__, float(model.blocks[0].{scale}.flatten()[0]))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, scale", [("deit3_small_patch16_224", "ls1.gamma"), ("vit_small_patch16_rope_224", "gamma_1")]
)
def test_a_family_at_the_paper_geometry_takes_the_init_and_loads_in_stock_timm(name, scale, tmp_path):
    """Catches DeiT-III or a RoPE ViT at the paper's CIFAR geometry that refuses the init (its self-check), and a saved
    folder that stock timm or transformers (no structinit_hf importable) builds with other outputs or another attention
    scale (the RoPE ViT's opened by default)."""
    from safetensors.torch import save_file
    from without_package import run_without_package

    from structinit_hf.models.timm_wrapper import save_checkpoint

    torch.manual_seed(0)
    model = apply_structured_init(timm.create_model(name, **PAPER_GEOMETRY), "impulse")
    assert len(model.structinit_check) == 12 and attention_layer_scale(model) is not None
    save_checkpoint(model, tmp_path / "run", label_names=[str(i) for i in range(10)])
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        save_file({"pixels": pixels, "logits": model.eval()(pixels)}, tmp_path / "io.safetensors")
    script = f"import sys\nsys.argv = ['-', {str(tmp_path / 'run')!r}, {str(tmp_path / 'io.safetensors')!r}]\n"
    out = run_without_package(script + STOCK_LOAD.replace("{scale}", scale), tmp_path).split()
    assert out[0] == type(model).__name__ and float(out[1]) == pytest.approx(attention_layer_scale(model), rel=1e-3)


def test_a_rotary_vit_takes_mimetic_vo_and_an_open_attention_scale_by_default():
    """Catches the rotary family's defaults (issue 67's evidence) not applied, not recorded on the model, not
    overridable, or applied to another family."""
    torch.manual_seed(0)
    base = timm.create_model("vit_small_patch16_rope_224", **TINY)
    chosen = apply_structured_init(copy.deepcopy(base), "impulse")
    assert attention_layer_scale(chosen) == 1.0
    assert chosen.structinit_defaults == {"value_init": "mimetic", "attn_layer_scale": 1.0}
    plain = apply_structured_init(copy.deepcopy(base), "impulse", value_init="default", attn_layer_scale=None)
    assert attention_layer_scale(plain) == 1e-5 and not hasattr(plain, "structinit_defaults")
    proj = "blocks.0.attn.proj.weight"
    assert torch.equal(plain.state_dict()[proj], base.state_dict()[proj])
    assert not torch.equal(chosen.state_dict()[proj], base.state_dict()[proj])  # mimetic V/O written
    relpos = apply_structured_init(timm.create_model("vit_relpos_small_patch16_224", **TINY), "impulse")
    assert attention_layer_scale(relpos) == 1e-6 and not hasattr(relpos, "structinit_defaults")
    again = apply_structured_init(chosen, "mimetic")
    assert not hasattr(again, "structinit_defaults")  # a re-init drops the last init's record


def test_a_rotary_vit_without_layer_scale_takes_the_default_without_a_scale():
    """Catches the default attention scale refusing a rotary ViT that has no layer scale to open."""
    from timm.models.eva import Eva

    torch.manual_seed(0)
    model = Eva(img_size=16, patch_size=4, embed_dim=24, depth=2, num_heads=3, num_classes=3, attn_type="rope",
                qkv_bias=True, use_rot_pos_emb=True, use_abs_pos_emb=False, rope_grid_indexing="xy",
                init_values=None)  # vit_small_patch16_rope_224's arguments, layer scale left out  # fmt: skip
    apply_structured_init(model, "impulse")
    assert attention_scales(model) == [] and model.structinit_defaults == {"value_init": "mimetic"}


def test_a_stock_rotary_vit_records_the_defaults_it_took():
    """Catches a run's record (its config's structinit) that leaves out the defaults its model was built with."""
    from structinit_hf.train._internal import load_model

    loaded = load_model("vit_small_patch16_rope_224", num_classes=3, model_kwargs={**TINY, "attention_init": "impulse"})
    defaults = {"value_init": "mimetic", "attn_layer_scale": 1.0}
    assert loaded.init["structinit_defaults"] == defaults and loaded.init["shifts"]
    assert {key: loaded.init[key] for key in ("attention_init", "family", *defaults)} == {
        "attention_init": "impulse", "family": "rope", **defaults
    }  # fmt: skip
    assert loaded.init["kernel_size"] == 3  # every setting, defaults filled in, as the registered names record


def test_a_layer_scaled_vit_opens_its_attention_scale_by_default_and_a_plain_one_is_unchanged():
    """Catches the ViT family's default (DeiT-III's evidence) not applied, applied to the MLP branch, refusing a ViT
    without layer scale, or skipped by the registered names' route."""
    torch.manual_seed(0)
    deit3 = apply_structured_init(timm.create_model("deit3_small_patch16_224", **TINY), "impulse")
    assert attention_layer_scale(deit3) == 1.0 and deit3.structinit_defaults == {"attn_layer_scale": 1.0}
    assert all(torch.equal(block.ls2.gamma, torch.full_like(block.ls2.gamma, 1e-6)) for block in deit3.blocks)
    kept = apply_structured_init(timm.create_model("deit3_small_patch16_224", **TINY), "impulse", attn_layer_scale=None)
    assert attention_layer_scale(kept) == 1e-6
    plain = apply_structured_init(timm.create_model("vit_tiny_patch16_224", **TINY), "impulse")
    assert attention_scales(plain) == [] and not hasattr(plain, "structinit_defaults")
    registered = timm.create_model("vit_tiny_impulse3", init_values=1e-6, **TINY)
    assert attention_layer_scale(registered) == 1.0 and registered.structinit_settings["attn_layer_scale"] == 1.0
