"""Init "auto": for the family it is given, the init the committed evidence says leads (one table,
``structinit_hf.init.options.AUTO_INITS``), recorded in the model like any init and said in one line."""

from __future__ import annotations

import copy
import logging

import pytest
import timm
import torch

from structinit_hf import apply_structured_init
from structinit_hf.benchmark.arms import ALL_ARMS, MODEL_ARMS
from structinit_hf.benchmark.model_arms import model_inits
from structinit_hf.init.options import AUTO_INITS, FAMILIES
from structinit_hf.train.models.loading import load_model

TINY = dict(img_size=16, patch_size=4, depth=2, embed_dim=24, num_heads=3, num_classes=3)
CHOICES = {  # timm name -> (its family, what auto writes)
    "vit_tiny_patch16_224": ("vit", "impulse"),
    "deit3_small_patch16_224": ("vit", "impulse"),
    "vit_small_patch16_rope_224": ("rope", "impulse"),
    "vit_relpos_small_patch16_224": ("relpos", "impulse"),
}


def test_every_family_has_a_choice_with_its_reason():
    assert {key.split("/")[0] for key in AUTO_INITS} == set(FAMILIES)
    assert all(method in ("impulse", "mimetic", "default") and reason for method, _, reason in AUTO_INITS.values())


@pytest.mark.parametrize("name", sorted(CHOICES))
def test_auto_writes_its_familys_choice_records_it_and_says_it(name, caplog):
    """Catches auto writing another init than the table's (or the family defaults lost), no record, or no line."""
    family, method = CHOICES[name]
    torch.manual_seed(0)
    built = timm.create_model(name, **TINY)
    with caplog.at_level(logging.WARNING, logger="structinit_hf"):
        auto = apply_structured_init(copy.deepcopy(built), "auto", seed=3)
    options = {**AUTO_INITS[family][1], "seed": 3} if method != "default" else {}
    chosen = apply_structured_init(copy.deepcopy(built), method, **options)
    assert all(torch.equal(a, b) for a, b in zip(auto.state_dict().values(), chosen.state_dict().values(), strict=True))
    assert auto.structinit_auto == {"method": method, "options": options, "reason": AUTO_INITS[family][2]}
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("structinit_hf")]
    said = [line for line in lines if line.startswith("init 'auto'")]
    assert len(said) == 1 and AUTO_INITS[family][2] in said[0]
    assert all(f"{k}={v!r}" in said[0] for k, v in AUTO_INITS[family][1].items())  # control='normmatched' named
    assert ("timm's default init, left as built" in said[0]) == (method == "default")


def test_a_relative_position_vit_built_with_its_layer_scale_at_1_gets_mimetic():
    """Catches the open row never chosen (the evidence differs there: mimetic led), or chosen for the family built."""
    torch.manual_seed(0)
    opened = apply_structured_init(timm.create_model("vit_relpos_small_patch16_224", **TINY, init_values=1.0), "auto")
    built = apply_structured_init(timm.create_model("vit_relpos_small_patch16_224", **TINY), "auto")
    assert (
        opened.structinit_auto["method"] == "mimetic" and built.structinit_auto["options"]["control"] == "normmatched"
    )
    assert opened.structinit_auto["reason"] == AUTO_INITS["relpos/open"][2]


@pytest.mark.parametrize(
    ("name", "built_with", "arm"),
    [("vit_small_patch16_rope_224", {}, "model-impulse3-mimeticvo-attnls1-normmatched"),
     ("vit_small_patch16_rope_224", {"init_values": 1.0}, "model-impulse3-mimeticvo"),
     ("vit_relpos_small_patch16_224", {}, "model-impulse3-normmatched")],
)  # fmt: skip
def test_auto_writes_the_arm_the_evidence_measured(name, built_with, arm):
    """Catches auto on the rotary or relative-position ViT drifting from the campaign arm whose records chose it (a
    family default lost, another kernel, the control on another base, or on a build it was never measured on)."""
    torch.manual_seed(0)
    built = timm.create_model(name, **TINY, **built_with)
    auto = apply_structured_init(copy.deepcopy(built), "auto")
    options = {k: v for k, v in ALL_ARMS[arm].model_kwargs.items() if k != "attention_init"}
    measured = apply_structured_init(copy.deepcopy(built), ALL_ARMS[arm].model_kwargs["attention_init"], **options)
    assert all(torch.equal(a, b) for a, b in zip(auto.state_dict().values(), measured.state_dict().values(), strict=True))


def test_auto_takes_a_seed_only():
    with pytest.raises(ValueError, match=r"init method 'auto' takes only seed, got \['kernel_size'\]"):
        apply_structured_init(timm.create_model("vit_tiny_patch16_224", **TINY), "auto", kernel_size=5)


def test_the_train_route_records_the_init_auto_chose():
    """Catches a run that records 'auto' (no init a card or a reload can name) instead of what it wrote."""
    loaded = load_model("deit3_small_patch16_224", model_kwargs={**TINY, "attention_init": "auto"})
    assert loaded.model.structinit_settings["attention_init"] == "impulse"
    assert loaded.model.structinit_settings["chosen_by"] == "auto"
    assert loaded.model.structinit_settings["attn_layer_scale"] == 1.0


def test_compare_offers_auto_as_an_arm_and_merges_it_where_it_is_another_arm():
    """Catches an auto arm compare refuses, or one trained twice where it writes what another arm writes."""
    arms = [MODEL_ARMS["model-default"], MODEL_ARMS["model-auto"]]
    swin = dict(img_size=32, patch_size=2, window_size=4, embed_dim=24, depths=(2, 2), num_heads=(3, 6), num_classes=3)
    swin_inits = model_inits("swin_tiny_patch4_window7_224", swin, arms)  # auto is timm's default there
    assert [arm.name for arm in swin_inits.arms] == ["model-default"]
    assert swin_inits.merged == {"model-auto": "model-default"}
    deit3 = model_inits("deit3_small_patch16_224", TINY, arms)
    assert [arm.name for arm in deit3.arms] == ["model-default", "model-auto"] and not deit3.merged
