"""The impulse's ``attn_layer_scale``: the attention branch's layer scale at init, on the layer-scaled ViTs timm and
transformers build, the MLP branch's left as built; its default on the measured classes only, said in one line, and
a scale the user chose kept on every route."""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest
import timm
import torch

from structinit_hf import InitRefused, apply_structured_init, init_refusal
from structinit_hf.benchmark.model_arms import model_profile
from structinit_hf.init.apply import init_record
from structinit_hf.init.layer_scale import (
    KEEP,
    LAYER_SCALES,
    attention_layer_scale,
    attention_scales,
    layer_scale_sites,
)

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
    assert all(
        torch.equal(FAMILIES[name](block), before) for block, before in zip(model.blocks, mlp_before, strict=True)
    )


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
    with pytest.raises(
        ValueError, match=r"attn_layer_scale must be a number > 0 .*got " + repr(value).replace("(", r"\(")
    ):
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
    """Catches the rotary ViT's defaults (the campaign's evidence) not applied, not recorded on the model, not
    overridable, applied to another family, or their record dropped by a re-init that leaves them in the weights."""
    torch.manual_seed(0)
    base = timm.create_model("vit_small_patch16_rope_224", **TINY)
    chosen = apply_structured_init(copy.deepcopy(base), "impulse")
    assert attention_layer_scale(chosen) == 1.0
    assert chosen.structinit_defaults == {"value_init": "mimetic", "attn_layer_scale": 1.0}
    plain = apply_structured_init(copy.deepcopy(base), "impulse", value_init="default", attn_layer_scale="model")
    assert attention_layer_scale(plain) == 1e-5 and not hasattr(plain, "structinit_defaults")
    assert init_record(plain) == {"attn_layer_scale_source": "model's own"}
    proj = "blocks.0.attn.proj.weight"
    assert torch.equal(plain.state_dict()[proj], base.state_dict()[proj])
    assert not torch.equal(chosen.state_dict()[proj], base.state_dict()[proj])  # mimetic V/O written
    relpos = apply_structured_init(timm.create_model("vit_relpos_small_patch16_224", **TINY), "impulse")
    assert attention_layer_scale(relpos) == 1e-6 and not hasattr(relpos, "structinit_defaults")
    again = apply_structured_init(chosen, "mimetic")  # mimetic writes V/O anew, leaves the opened scale
    assert attention_layer_scale(again) == 1.0 and again.structinit_defaults == {"attn_layer_scale": 1.0}
    assert init_record(again) == {"attn_layer_scale": 1.0, "attn_layer_scale_source": "family default"}


def test_the_record_of_the_scale_survives_a_re_init_until_a_scale_is_set():
    """Catches a record dropped by a later init that leaves the scale as it is (impulse then mimetic, default or
    impulse kept), or kept after a later init set another scale."""
    torch.manual_seed(0)
    model = apply_structured_init(timm.create_model("deit3_small_patch16_224", **TINY), "impulse")
    opened = {"attn_layer_scale": 1.0, "attn_layer_scale_source": "family default"}
    for method, options in (
        ("mimetic", {}),
        ("default", {}),
        ("impulse", {}),
        ("impulse", {"attn_layer_scale": "model"}),
    ):
        apply_structured_init(model, method, **options)
        assert attention_layer_scale(model) == 1.0 and init_record(model) == opened, (method, options)
    apply_structured_init(model, "impulse", attn_layer_scale=0.1)
    assert init_record(model) == {"attn_layer_scale": 0.1, "attn_layer_scale_source": "given"}
    assert model.structinit_layer_scale == {"attn_layer_scale": 0.1, "before": 1.0, "source": "given"}


def test_a_rotary_vit_without_layer_scale_takes_the_default_without_a_scale():
    """Catches the default attention scale refusing a rotary ViT that has no layer scale to open."""
    from timm.models.eva import Eva

    torch.manual_seed(0)
    model = Eva(img_size=16, patch_size=4, embed_dim=24, depth=2, num_heads=3, num_classes=3, attn_type="rope",
                qkv_bias=True, use_rot_pos_emb=True, use_abs_pos_emb=False, rope_grid_indexing="xy",
                init_values=None)  # vit_small_patch16_rope_224's arguments, layer scale left out  # fmt: skip
    apply_structured_init(model, "impulse")
    assert attention_scales(model) == [] and model.structinit_defaults == {"value_init": "mimetic"}
    assert init_record(model) == {"value_init": "mimetic"}


def test_a_stock_rotary_vit_records_the_defaults_it_took():
    """Catches a run's record (its config's structinit) that leaves out the defaults its model was built with, or
    where its layer scale came from."""
    from structinit_hf.train._internal import load_model

    loaded = load_model("vit_small_patch16_rope_224", num_classes=3, model_kwargs={**TINY, "attention_init": "impulse"})
    expected = {"attention_init": "impulse", "family": "rope", "kernel_size": 3, "value_init": "mimetic",
                "attn_layer_scale": 1.0, "attn_layer_scale_source": "family default"}  # fmt: skip
    assert {key: loaded.init[key] for key in expected} == expected and loaded.init["shifts"]


def test_a_layer_scaled_vit_opens_its_attention_scale_by_default_and_a_plain_one_is_unchanged():
    """Catches DeiT-III's default not applied, applied to the MLP branch, refusing a ViT without layer scale, or
    applied by a registered name to a scale the user built with ``init_values``."""
    torch.manual_seed(0)
    deit3 = apply_structured_init(timm.create_model("deit3_small_patch16_224", **TINY), "impulse")
    assert attention_layer_scale(deit3) == 1.0 and deit3.structinit_defaults == {"attn_layer_scale": 1.0}
    assert all(torch.equal(block.ls2.gamma, torch.full_like(block.ls2.gamma, 1e-6)) for block in deit3.blocks)
    kept = apply_structured_init(timm.create_model("deit3_small_patch16_224", **TINY), "impulse", attn_layer_scale=KEEP)
    assert attention_layer_scale(kept) == 1e-6
    plain = apply_structured_init(timm.create_model("vit_tiny_patch16_224", **TINY), "impulse")
    assert attention_scales(plain) == [] and not hasattr(plain, "structinit_defaults") and init_record(plain) == {}
    registered = timm.create_model("vit_tiny_impulse3", init_values=1e-6, **TINY)
    assert attention_layer_scale(registered) == 1e-6
    assert registered.structinit_settings["attn_layer_scale_source"] == "model's own"


# --- the change said in one line --------------------------------------------------------------------------------------


def _said(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name.startswith("structinit_hf") and r.levelno == logging.WARNING
    ]


def test_what_the_init_changed_is_said_once_in_one_line_naming_before_after_and_how_to_keep(caplog):
    """Catches a layer scale or value/output changed by a default or a given value without a word, a line that does
    not name the values or the way to keep the model's own, a line where nothing changed (a kept scale, a plain ViT,
    init_refusal's question), and a line the logging level cannot silence."""
    caplog.set_level(logging.WARNING)
    torch.manual_seed(0)
    apply_structured_init(timm.create_model("deit3_small_patch16_224", **TINY), "impulse")
    (line,) = _said(caplog)
    assert "ls1.gamma" in line and "1e-06 -> 1," in line and "attn_layer_scale='model' keeps" in line
    caplog.clear()
    apply_structured_init(timm.create_model("vit_small_patch16_rope_224", **TINY), "impulse")
    (line,) = _said(caplog)
    assert "gamma_1" in line and "1e-05 -> 1," in line and "value/output" in line and "value_init='default'" in line
    caplog.clear()
    apply_structured_init(timm.create_model("deit3_small_patch16_224", **TINY), "impulse", attn_layer_scale=0.1)
    (line,) = _said(caplog)
    assert "1e-06 -> 0.1, attn_layer_scale=0.1 given" in line
    caplog.clear()
    apply_structured_init(timm.create_model("deit3_small_patch16_224", **TINY), "impulse", attn_layer_scale=KEEP)
    apply_structured_init(timm.create_model("vit_tiny_patch16_224", **TINY), "impulse")
    assert init_refusal(timm.create_model("deit3_small_patch16_224", **TINY), "impulse") is None
    assert _said(caplog) == []
    logging.getLogger("structinit_hf").setLevel(logging.ERROR)
    try:
        apply_structured_init(timm.create_model("deit3_small_patch16_224", **TINY), "impulse")
    finally:
        logging.getLogger("structinit_hf").setLevel(logging.NOTSET)
    assert _said(caplog) == []


# --- an explicit choice wins, on every route ------------------------------------------------------------------------


def _python(init_values=None, **options):
    kwargs = {} if init_values is None else {"init_values": init_values}
    return apply_structured_init(timm.create_model("deit3_small_patch16_224", **TINY, **kwargs), "impulse", **options)


def _registered(init_values=None, **options):
    kwargs = {} if init_values is None else {"init_values": init_values}
    return timm.create_model("vit_tiny_impulse3", **TINY, **kwargs, **options)


def _model_kwargs(init_values=None, **options):
    """``train --model deit3_small_patch16_224 --model-kwargs ... attention_init=impulse``, as the command line reads
    and checks them."""
    from structinit_hf.train._internal import check_model_kwargs, load_model
    from structinit_hf.train.cli.args import training_parser

    words = [f"{k}={v}" for k, v in {**TINY, "init_values": init_values, **options}.items() if v is not None]
    argv = ["--model", "deit3_small_patch16_224", "--model-kwargs", "attention_init=impulse", *words]
    kwargs = training_parser().parse_args(argv).model_kwargs
    check_model_kwargs(kwargs, "deit3_small_patch16_224")
    return load_model("deit3_small_patch16_224", model_kwargs=kwargs).model


def _config(init_values=None, **options):
    from transformers import AutoModelForImageClassification

    from structinit_hf import StructInitViTConfig

    geometry = {key: value for key, value in TINY.items() if key != "num_classes"}
    model_args = {**geometry, **({} if init_values is None else {"init_values": init_values}), **options}
    config = StructInitViTConfig(architecture="vit_tiny_impulse3", model_args=model_args)
    return AutoModelForImageClassification.from_config(StructInitViTConfig.from_dict(config.to_dict())).timm_model


def _compare(init_values=None, **options):
    """The model a ``compare --model deit3_small_patch16_224`` run trains for its arm (``model-impulse3``, or
    ``model-impulse3-asbuilt`` for ``attn_layer_scale='model'``), built as training builds it."""
    from structinit_hf.benchmark.arms import MODEL_ARMS
    from structinit_hf.benchmark.model_arms import model_inits
    from structinit_hf.benchmark.profiles import BenchmarkDataset
    from structinit_hf.benchmark.runs import run_settings
    from structinit_hf.train._internal import load_model

    geometry = {**TINY, **({} if init_values is None else {"init_values": init_values})}
    name = {None: "model-impulse3", KEEP: "model-impulse3-asbuilt"}[options.get("attn_layer_scale")]
    arms = model_inits("deit3_small_patch16_224", geometry, [MODEL_ARMS[name]]).arms
    profile = replace(model_profile("deit3_small_patch16_224"), architecture=geometry)
    flags = run_settings(profile, arms[0], 0, BenchmarkDataset("cifar10-sample"), Path("unused")).flags()
    return load_model(flags["model"], model_kwargs=flags["model_kwargs"]).model


ROUTES = {"python": _python, "registered": _registered, "model-kwargs": _model_kwargs, "config": _config,
          "compare": _compare}  # fmt: skip


def _source(model) -> str | None:
    record = getattr(model, "structinit_settings", None) or init_record(model)
    return record.get("attn_layer_scale_source")


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_layer_scale_the_user_built_is_kept_on_every_route(route):
    """Catches an ``init_values`` the user gave overridden by the impulse's default (the weights at 1 beside a record
    of 1e-5), on each route a user builds a model by."""
    torch.manual_seed(0)
    built = 1e-5 if route == "python" else 1e-6  # Python tells a chosen scale by its value; the others by the keyword
    model = ROUTES[route](init_values=built)
    assert attention_layer_scale(model) == built and _source(model) == "model's own"


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_attn_layer_scale_model_keeps_the_model_s_own_on_every_route(route):
    """Catches the one spelling of "keep the model's own" refused, dropped or read as the default on a route."""
    torch.manual_seed(0)
    model = ROUTES[route](init_values=None if route in ("python", "model-kwargs", "compare") else 1e-6,
                          attn_layer_scale=KEEP)  # fmt: skip
    assert attention_layer_scale(model) == 1e-6 and _source(model) == "model's own"


@pytest.mark.parametrize("route", ["python", "registered", "model-kwargs"])
def test_a_scale_given_beside_init_values_wins(route):
    """Catches a given attn_layer_scale ignored where the model was built with init_values."""
    model = ROUTES[route](init_values=1e-6, attn_layer_scale=0.5)
    assert attention_layer_scale(model) == 0.5 and _source(model) == "given"


def test_attn_layer_scale_none_on_the_command_line_names_the_spelling_that_keeps():
    """Catches ``--model-kwargs attn_layer_scale=None`` refused with advice that gives the default instead."""
    from structinit_hf.train import UsageError
    from structinit_hf.train._internal import check_model_kwargs

    with pytest.raises(UsageError, match=r"attn_layer_scale=None: .*attn_layer_scale=model keeps"):
        check_model_kwargs({"attention_init": "impulse", "attn_layer_scale": None}, "deit3_small_patch16_224")


# --- every layer-scaled block found; the default only where it was measured -----------------------------------------


def _transformers(kind: str):
    from transformers import (
        BeitConfig,
        BeitForImageClassification,
        Data2VecVisionConfig,
        Data2VecVisionForImageClassification,
        Dinov2Config,
        Dinov2ForImageClassification,
    )

    common = dict(image_size=16, patch_size=2, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                  intermediate_size=96, num_labels=3)  # fmt: skip
    if kind == "dinov2":
        return Dinov2ForImageClassification(Dinov2Config(**common, layerscale_value=1e-5))
    relative = dict(use_relative_position_bias=True, use_mask_token=False)
    if kind == "beit":
        return BeitForImageClassification(BeitConfig(**common, **relative))
    return Data2VecVisionForImageClassification(Data2VecVisionConfig(**common, **relative))


SMALL = dict(img_size=32, patch_size=4, depth=2, embed_dim=48, num_heads=3, num_classes=3)
BLOCKS = {  # a model per row of LAYER_SCALES, and the scale it is built at
    ("timm", "Block", "ls1.gamma"): (lambda: timm.create_model("deit3_small_patch16_224", **SMALL), 1e-6),
    ("timm", "RelPosBlock", "ls1.gamma"): (lambda: timm.create_model("vit_relpos_small_patch16_224", **SMALL), 1e-6),
    ("timm", "EvaBlock", "gamma_1"): (lambda: timm.create_model("vit_small_patch16_rope_224", **SMALL), 1e-5),
    ("timm", "LayerScaleBlock", "gamma_1"): (lambda: timm.create_model("cait_xxs24_224", **SMALL), 1e-5),
    ("timm", "Block", "gamma_1"): (lambda: timm.create_model("beit_base_patch16_224", **SMALL), 0.1),
    ("transformers", "BeitLayer", "lambda_1"): (lambda: _transformers("beit"), 0.1),
    ("transformers", "Data2VecVisionLayer", "lambda_1"): (lambda: _transformers("data2vec"), 0.1),
    ("transformers", "Dinov2Layer", "layer_scale1.lambda1"): (lambda: _transformers("dinov2"), 1e-5),
}


def test_the_table_lists_each_tested_block_once():
    """Catches a row of LAYER_SCALES without a model here, or a model here for a block the table leaves out."""
    assert sorted((site.library, site.block, site.attribute) for site in LAYER_SCALES) == sorted(BLOCKS)


@pytest.mark.parametrize("row", sorted(BLOCKS), ids=lambda row: f"{row[0]}-{row[1]}-{row[2]}")
def test_every_layer_scaled_block_takes_a_given_scale_and_keeps_its_own_unless_measured(row):
    """Catches a block class whose scale the init misses (transformers' DINOv2: `attn_layer_scale=1.0` refused), and
    the opened scale given by default to a family the campaign never measured (BEiT, DINOv2, CaiT)."""
    build, built = BLOCKS[row]
    torch.manual_seed(0)
    model = build()
    site = next(site for site in LAYER_SCALES if (site.library, site.block, site.attribute) == row)
    assert layer_scale_sites(model) and {found for found, _ in layer_scale_sites(model)} == {site}
    assert attention_layer_scale(model) == pytest.approx(built, rel=1e-3)
    by_default = apply_structured_init(copy.deepcopy(model), "impulse")
    expected = site.opens[1] if site.opens else built
    assert attention_layer_scale(by_default) == pytest.approx(expected, rel=1e-3)
    given = apply_structured_init(model, "impulse", attn_layer_scale=1.0)
    assert attention_layer_scale(given) == 1.0 and _source(given) == "given"


def test_the_coverage_table_of_the_docs_names_every_block():
    """Catches docs/method.md's layer-scale table missing a class the init finds, or where it keeps the scale."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "method.md").read_text()
    for site in LAYER_SCALES:
        assert f"| {site.library} `{site.block}` | `{site.attribute}` |" in text, site


def test_an_unknown_option_is_a_value_error_naming_it_and_the_allowed_ones():
    """Catches an unknown impulse option raised as TypeError (the docs say ValueError), or a message without it."""
    model = timm.create_model("deit3_small_patch16_224", **TINY)
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'kernal_size'; allowed: preset, kernel_size"):
        apply_structured_init(model, "impulse", kernal_size=3)


def test_train_says_the_opened_scale_once_in_its_log_and_records_where_it_came_from(tmp_path, capsys):
    """Catches ``train`` opening DeiT-III's scale without a line in its log, saying it twice, or a run's config
    whose init record does not say where its layer scale came from."""
    from tiny_runs import run, synthetic_dataset

    data = synthetic_dataset(tmp_path / "data")
    geometry = ["img_size=16", "patch_size=4", "depth=1", "embed_dim=24", "num_heads=3", "attention_init=impulse"]
    argv = ["--model", "deit3_small_patch16_224", "--model-kwargs", *geometry, "--dataset", str(data), "--val-split",
            "0", "--batch-size", "8", "--epochs", "1", "--warmup-epochs", "0"]  # fmt: skip
    run([*argv, "--output-dir", str(tmp_path / "opened")])
    printed = capsys.readouterr()
    assert (printed.out + printed.err).count("attention layer scale (ls1.gamma, 1 blocks) 1e-06 -> 1,") == 1
    config = json.loads((tmp_path / "opened" / "final" / "config.json").read_text())
    assert config["structinit"]["attn_layer_scale_source"] == "family default"
    run([*argv[:-10], "init_values=1e-05", *argv[-10:], "--output-dir", str(tmp_path / "kept")])
    printed = capsys.readouterr()
    assert "attention layer scale" not in printed.out + printed.err
    config = json.loads((tmp_path / "kept" / "final" / "config.json").read_text())
    assert config["structinit"]["attn_layer_scale_source"] == "model's own"
    assert config["model_args"]["init_values"] == 1e-05


def test_a_vit_with_register_tokens_the_layout_does_not_know_is_refused_in_one_line():
    """Catches transformers' DINOv2 with registers ending in the self-check's RuntimeError instead of a refusal."""
    from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    config = Dinov2WithRegistersConfig(image_size=16, patch_size=4, hidden_size=24, num_hidden_layers=2,
                                       num_attention_heads=3, intermediate_size=48, num_register_tokens=4)  # fmt: skip
    model = Dinov2WithRegistersModel(config)
    before = {key: value.clone() for key, value in model.state_dict().items()}
    with pytest.raises(InitRefused, match="tokens the init's layout does not know .* fed 17 of a block's 21 tokens"):
        apply_structured_init(model, "impulse")
    assert all(torch.equal(before[key], value) for key, value in model.state_dict().items())

