"""Any timm model in ``train``, ``evaluate`` and ``compare``: a stock name built at another size is fed at that size,
saved as trained, and compared across the inits it takes."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_runs import image_folder, run

from structinit_hf.__main__ import main
from structinit_hf.benchmark.arms import MODEL_ARMS
from structinit_hf.benchmark.model_arms import DEFAULT_MODEL_ARMS, head_dim, model_inits
from structinit_hf.train.cli.errors import UsageError
from structinit_hf.train.models.loading import load_model, model_data_config

STOCK = ["--model", "vit_tiny_patch16_224", "--model-kwargs", "img_size=32", "depth=1", "embed_dim=24", "num_heads=3"]
# a stock ViT at the proxy's token and head width (patch 2, 3 heads of 16), one block
TINY_VIT = {"img_size": 16, "patch_size": 2, "depth": 1, "embed_dim": 48, "num_heads": 3}


@pytest.mark.parametrize(
    ("model_kwargs", "input_size", "channels_of_mean"),
    [
        ({"img_size": 32, "depth": 1}, (3, 32, 32), 3),
        ({"img_size": 24, "patch_size": 8, "in_chans": 1, "depth": 1}, (1, 24, 24), 1),
    ],
)
def test_a_stock_name_built_at_another_size_is_fed_at_its_own(model_kwargs, input_size, channels_of_mean):
    """Catches the data config read off the pretrained cfg (224 px, 3 channels), which the model built at 32 px
    refuses at its first step (``Input height (224) doesn't match model (32)``)."""
    model = load_model("vit_tiny_patch16_224", num_classes=2, model_kwargs=model_kwargs).model
    config = model_data_config(model)
    assert config["input_size"] == input_size and len(config["mean"]) == channels_of_mean


@pytest.mark.slow
def test_a_stock_name_at_32_px_trains_evaluates_and_saves_its_size(tmp_path, capsys):
    """The issue's command, end to end: trained at 32 px on a folder of 20 px images, evaluated from its folder, and
    the folder's transformers image processor prepares images at 32 px for its TimmWrapper."""
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    images = image_folder(tmp_path / "images", ["a", "b"], per_class=6)
    out = tmp_path / "run"
    results = run([*STOCK, "--dataset", str(images), "--epochs", "1", "--output-dir", str(out)])
    assert results["input_size"] == [3, 32, 32]
    saved = json.loads((out / "final" / "config.json").read_text())
    assert saved["architecture"] == "vit_tiny_patch16_224" and saved["pretrained_cfg"]["input_size"] == [3, 32, 32]
    assert main(["evaluate", "--model", str(out / "final"), "--dataset", str(images)]) == 0
    assert "top-1" in capsys.readouterr().out
    processor = AutoImageProcessor.from_pretrained(out / "final")
    pixels = processor(Image.open(images / "a" / "0.png").convert("RGB"), return_tensors="pt")["pixel_values"]
    model = AutoModelForImageClassification.from_pretrained(out / "final")
    assert pixels.shape == (1, 3, 32, 32) and model(pixel_values=pixels).logits.shape == (1, 2)


def _qk(model: torch.nn.Module) -> torch.Tensor:
    return model.blocks[0].attn.qkv.weight[: 2 * model.embed_dim].detach().clone()


def test_an_init_named_in_model_kwargs_runs_on_a_stock_timm_model_and_is_recorded():
    """Catches ``attention_init`` on a name of timm's own reaching timm's builder (``unexpected keyword``) or being
    dropped: the init writes Q/K and the record names it, its options and the shifts it wrote."""
    torch.manual_seed(0)
    stock = load_model("vit_tiny_patch16_224", model_kwargs=TINY_VIT)
    torch.manual_seed(0)
    kwargs = {**TINY_VIT, "attention_init": "impulse", "kernel_size": 5}
    impulse = load_model("vit_tiny_patch16_224", model_kwargs=kwargs)
    assert stock.init == {} and not torch.equal(_qk(stock.model), _qk(impulse.model))
    assert {key: impulse.init[key] for key in ("attention_init", "kernel_size")} == {"attention_init": "impulse",
                                                                                    "kernel_size": 5}  # fmt: skip
    assert len(impulse.init["shifts"]) == 1 and len(impulse.init["shifts"][0]) == 3  # one block of 3 heads
    assert type(impulse.model).__name__ == "VisionTransformer"  # timm's own class, not this package's
    with pytest.raises(ValueError, match="ResNet"):  # a model without attention: the init's own one line
        load_model("test_resnet", model_kwargs={"attention_init": "mimetic"})


def test_compare_model_keeps_the_inits_a_model_takes_and_says_why_it_refuses_the_others():
    arms = [MODEL_ARMS[name] for name in DEFAULT_MODEL_ARMS]
    vit = model_inits("vit_tiny_patch16_224", TINY_VIT, arms)
    assert [arm.name for arm in vit.arms] == list(DEFAULT_MODEL_ARMS) and vit.refused == {} and vit.head_dim == 16
    assert {arm.model for arm in vit.arms} == {"vit_tiny_patch16_224"}
    resnet = model_inits("test_resnet", {}, arms)
    assert [arm.name for arm in resnet.arms] == ["model-default"] and resnet.head_dim == 0
    assert set(resnet.refused) == {"model-mimetic", "model-impulse3"}
    assert all(why.startswith("ResNet") and "\n" not in why for why in resnet.refused.values())
    with pytest.raises(UsageError, match="refuses every init asked for"):
        model_inits("test_resnet", {}, arms[1:])
    with pytest.raises(UsageError, match="--model-kwargs attention_init, kernel_size: compare --model sets the init"):
        model_inits("vit_tiny_patch16_224", {**TINY_VIT, "attention_init": "impulse", "kernel_size": 3}, arms)


@pytest.mark.parametrize(
    ("name", "model_kwargs", "expected"),
    [
        ("cait_xxs24_224", {"img_size": 32, "depth": 1}, 48),  # talking heads: no head_dim kept, the scale says it
        ("swin_tiny_patch4_window7_224", {"img_size": 32, "window_size": 4, "depths": (1, 1, 1, 1)}, 32),
        ("test_resnet", {}, 0),
    ],
)
def test_the_head_dimension_that_sets_compares_rate_is_read_off_any_attention(name, model_kwargs, expected):
    """Catches a head dimension read as 0 (so the rate of narrow heads, 1e-3) where a model keeps no ``head_dim``."""
    assert head_dim(load_model(name, model_kwargs=model_kwargs).model) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--family", "swin", "--model", "test_vit"], "--family swin --model test_vit: pass one"),
        (
            ["--model", "test_vit", "--arms", "default"],
            "--arms default: not model arms (--model test_vit); allowed: "
            "model-default, model-mimetic, model-auto, model-impulse3, model-impulse5",
        ),
    ],
)
def test_compare_model_bad_flags_are_one_line(argv, message, capsys):
    assert main(["compare", *argv]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and message in errors[0], errors


@pytest.mark.slow
def test_compare_model_trains_each_init_on_the_stock_model_resumes_and_notes_refusals(tmp_path, capsys):
    """``compare --model``: timm's default, mimetic and impulse on a stock ViT, each run a stock model with its init
    recorded, the paired difference to the default, a rerun that trains nothing; on a ResNet only the default trains
    and the notes under the table say why the inits are left out."""
    images = image_folder(tmp_path / "images", ["a", "b"], per_class=6)
    out = tmp_path / "vit"
    geometry = [f"{key}={value}" for key, value in TINY_VIT.items()]
    argv = ["compare", "--model", "vit_tiny_patch16_224", "--model-kwargs", *geometry, "--dataset", str(images),
            "--epochs", "1", "--output-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr()
    record = json.loads((out / "results.json").read_text())
    assert list(record["top1"]) == list(DEFAULT_MODEL_ARMS) and set(record["vs_default"]) == set(DEFAULT_MODEL_ARMS[1:])
    assert record["refused"] == {} and record["model"] == "vit_tiny_patch16_224"
    impulse = json.loads((out / "model-impulse3-seed0" / "results.json").read_text())
    assert impulse["model"] == "vit_tiny_patch16_224" and impulse["init"]["attention_init"] == "impulse"
    assert impulse["model_kwargs"]["img_size"] == 16 and impulse["input_size"] == [3, 16, 16]
    assert "which init for images on vit_tiny_patch16_224" in printed.out and "| impulse 3x3 |" in printed.out
    assert main(argv) == 0  # the same command again: every run reused
    assert "3 of 3 runs already finished" in capsys.readouterr().err

    out = tmp_path / "resnet"
    argv = ["compare", "--model", "test_resnet", "--dataset", str(images), "--epochs", "1", "--output-dir", str(out)]
    assert main(argv) == 0
    table = (out / "compare.md").read_text()
    assert list(json.loads((out / "results.json").read_text())["top1"]) == ["model-default"]
    assert "| timm's default |" in table and "| mimetic |" not in table
    assert "mimetic: not compared, the model refuses it: ResNet: has no attention layers" in table
    assert "impulse 3x3: not compared, the model refuses it: ResNet" in table


def test_compare_model_says_under_its_table_where_the_campaign_found_the_impulse_does_not_pay():
    """Catches the campaign's verdict on a family (the relative-position ViT's) left out of compare --model's table,
    or printed for a family where the impulse pays (the plain ViT)."""
    from structinit_hf.benchmark.compare_inits import render_table

    arms = [MODEL_ARMS[name] for name in DEFAULT_MODEL_ARMS]
    tiny = {**TINY_VIT, "num_classes": 3}
    relpos = model_inits("vit_relpos_small_patch16_224", tiny, arms)
    assert "relative-position ViTs" in relpos.note and "docs/campaign.md" in relpos.note
    assert model_inits("vit_tiny_patch16_224", tiny, arms).note == ""
    record = {
        "dataset_name": "images", "model": "vit_relpos_small_patch16_224", "train_images": 12, "epochs": 1,
        "seeds": [0], "num_eval_images": 4, "split": "test", "top1": {"model-default": {0: 50.0}}, "vs_default": {},
        "refused": {}, "family_note": relpos.note,
    }  # fmt: skip
    assert render_table(record).rstrip().endswith(relpos.note)


DEIT3_ARMS = ("model-default", "model-impulse3", "model-impulse3-attnls1", "model-impulse3-asbuilt")


def test_compare_model_merges_arms_that_start_from_the_same_weights_and_says_what_each_init_changed():
    """Catches two arms that would train the same weights under two labels (DeiT-III's impulse opens the scale by
    default, as model-impulse3-attnls1 does; a RoPE ViT's also writes mimetic V/O), an as-built arm that takes a family
    default (or is a second label of the impulse where the model has none), and a table without the lines that say
    so."""
    from structinit_hf.benchmark.compare_inits import render_table

    tiny = {**TINY_VIT, "num_classes": 3}
    deit3 = model_inits("deit3_small_patch16_224", tiny, [MODEL_ARMS[name] for name in DEIT3_ARMS])
    assert [arm.name for arm in deit3.arms] == ["model-default", "model-impulse3", "model-impulse3-asbuilt"]
    assert deit3.merged == {"model-impulse3-attnls1": "model-impulse3"}
    assert list(deit3.changes) == ["model-impulse3"] and "1e-06 -> 1," in deit3.changes["model-impulse3"]
    rope_arms = ("model-impulse3", "model-impulse3-mimeticvo-attnls1", "model-impulse3-asbuilt")
    rope = model_inits("vit_small_patch16_rope_224", tiny, [MODEL_ARMS[name] for name in rope_arms])
    assert rope.merged == {"model-impulse3-mimeticvo-attnls1": "model-impulse3"}
    as_built = rope.arms[-1].model_kwargs
    assert as_built == {
        "attention_init": "impulse",
        "kernel_size": 3,
        "attn_layer_scale": "model",
        "value_init": "default",
    }
    plain = model_inits("vit_tiny_patch16_224", tiny, [MODEL_ARMS[name] for name in DEIT3_ARMS[1:]])
    assert plain.merged == {"model-impulse3-asbuilt": "model-impulse3"} and list(plain.refused) == [DEIT3_ARMS[2]]
    record = {
        "dataset_name": "images", "model": "deit3_small_patch16_224", "train_images": 12, "epochs": 1, "seeds": [0],
        "num_eval_images": 4, "split": "test", "top1": {arm.name: {0: 50.0} for arm in deit3.arms}, "vs_default": {},
        "refused": {}, "family_note": "", "merged": deit3.merged, "init_changes": deit3.changes,
    }  # fmt: skip
    notes = render_table(record).rstrip().splitlines()[-2:]
    assert notes[0].startswith("impulse 3x3: impulse init on VisionTransformer: attention layer scale (ls1.gamma")
    assert notes[1].startswith("impulse 3x3, attention layer scale 1: the same weights as impulse 3x3 on deit3_small")


def test_compare_help_lists_the_as_built_arm():
    """Catches the as-built arm left out of the arms ``--help`` lists for ``--model``."""
    from structinit_hf.benchmark.compare_inits import compare_parser

    text = " ".join(compare_parser().format_help().split()).replace("- ", "-")  # argparse wraps at hyphens
    assert "model-impulse3-asbuilt" in text


@pytest.mark.slow
def test_compare_model_trains_merged_arms_once_and_logs_the_opened_scale(tmp_path, capsys):
    """``compare --model deit3_small_patch16_224`` with model-impulse3 and model-impulse3-attnls1: one run, one row,
    the merge said before training and under the table, the opened scale in the run's log and its record."""
    images = image_folder(tmp_path / "images", ["a", "b"], per_class=6)
    out = tmp_path / "deit3"
    geometry = [f"{key}={value}" for key, value in TINY_VIT.items()]
    argv = ["compare", "--model", "deit3_small_patch16_224", "--model-kwargs", *geometry, "--dataset", str(images),
            "--epochs", "1", "--arms", *DEIT3_ARMS[:3], "--output-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert sorted(path.name for path in out.iterdir() if path.is_dir()) == [
        "model-default-seed0",
        "model-impulse3-seed0",
    ]
    assert printed.count("the same weights as impulse 3x3 on deit3_small_patch16_224") == 2  # before and under
    assert "1e-06 -> 1, the default for a timm Block" in (out / "model-impulse3-seed0" / "train.log").read_text()
    init = json.loads((out / "model-impulse3-seed0" / "results.json").read_text())["init"]
    assert init["attn_layer_scale"] == 1.0 and init["attn_layer_scale_source"] == "family default"
