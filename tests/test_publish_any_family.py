"""Any timm network a user trains is published: ``train --model <timm name> --model-kwargs ... attention_init=...`` and
compare's ``model-default`` arm push (dry run and to the Hub stand-in) with the init's full record and a card naming
the real network; ``save_checkpoint`` takes a timm model the init took; ``StructInitViTConfig`` names the route for
timm's own names."""

from __future__ import annotations

import json

import pytest
import timm
import torch
from fake_hub import FakeHub
from test_hub import TOKEN, no_xet, online  # noqa: F401  (fixtures)
from tiny_runs import run, synthetic_dataset

import structinit_hf
from structinit_hf.__main__ import main
from structinit_hf.train import PushSettings, push_to_hub

GEOMETRY = dict(img_size=16, patch_size=4, embed_dim=48, depth=1, num_heads=3)
WORDS = [f"{key}={value}" for key, value in GEOMETRY.items()]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return synthetic_dataset(tmp_path_factory.mktemp("data") / "synthetic")


def _train(dataset, out, model: str, *model_kwargs: str) -> dict:
    argv = ["--model", model, "--model-kwargs", *WORDS, *model_kwargs, "--dataset", str(dataset), "--output-dir",
            str(out), "--val-split", "0", "--batch-size", "16", "--epochs", "1", "--warmup-epochs", "0"]  # fmt: skip
    return run(argv)


@pytest.mark.parametrize(
    ("model", "network", "said"),
    [
        ("vit_small_patch16_rope_224", "Eva", "its rotary query/key biases are set"),
        ("deit3_small_patch16_224", "VisionTransformer", "query/key weights take mimetic"),
        ("vit_tiny_patch16_224", "VisionTransformer", "query/key weights take mimetic"),
    ],
)
def test_a_timm_name_trained_with_an_init_publishes_its_full_record(dataset, tmp_path, capsys, model, network, said):
    """Catches ``results.json: init.attention_init is 'impulse' but init.kernel_size is missing`` (the train route
    recorded only the options given), ``no model card template for 'deit3_small_patch16_224'``, and a card that names
    another network than the one trained."""
    out = tmp_path / "run"
    results = _train(dataset, out, model, "attention_init=impulse")
    assert results["init"]["kernel_size"] == 3 and results["init"]["seed"] == 0 and results["init"]["shifts"]
    assert main(["push-to-hub", "--run-dir", str(out), "--repo-id", "me/tiny", "--dry-run"]) == 0
    card = capsys.readouterr().out
    assert f"- **Architecture:** timm `{network}`, width 48, depth 1, 3 heads, patch 4 x 4 on 16 x 16 px" in card
    assert f"- **Loads as:** timm `{model}` with " in card and "Registered as" not in card
    assert "structured (impulse 3x3) initialization" in card and said in card and "| kernel_size | `3` |" in card
    if model != "vit_tiny_patch16_224":  # the layer-scaled families: the scale the impulse opened is said
        assert "The attention branch's layer scale started at 1 (`attn_layer_scale`, the family's default)" in card


def test_a_timm_name_trained_with_an_init_is_pushed_and_loads_with_stock_timm(dataset, tmp_path, online, no_xet):  # noqa: F811
    out = tmp_path / "run"
    _train(dataset, out, "deit3_small_patch16_224", "attention_init=impulse")
    with FakeHub(token=TOKEN) as hub:
        push_to_hub(PushSettings(out, "me/deit3-tiny", endpoint=hub.url))
        snapshot = hub.write_snapshot("me/deit3-tiny", tmp_path / "arrived")
    config = json.loads((snapshot / "config.json").read_text())
    assert config["architecture"] == "deit3_small_patch16_224" and config["structinit"]["kernel_size"] == 3
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    loaded = timm.create_model(f"local-dir:{snapshot}", pretrained=True).eval()
    trained = timm.create_model(f"local-dir:{out / 'final'}", pretrained=True).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(images), trained(images))
    assert "timm `VisionTransformer`, width 48" in (snapshot / "README.md").read_text()


def test_compare_model_default_arm_publishes(dataset, tmp_path, capsys):
    """Catches compare's ``model-default`` run of DeiT-III refused a card (``no model card template``)."""
    out = tmp_path / "cmp"
    argv = ["compare", "--model", "deit3_small_patch16_224", "--model-kwargs", *WORDS, "--arms", "model-default",
            "--dataset", str(dataset), "--epochs", "1", "--batch-size", "16", "--output-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["push-to-hub", "--run-dir", str(out / "model-default-seed0"), "--repo-id", "me/d", "--dry-run"]) == 0
    card = capsys.readouterr().out
    assert "timm's default initialisation" in card and "- **Architecture:** timm `VisionTransformer`, width 48" in card


def test_save_checkpoint_takes_a_timm_model_the_init_took(tmp_path):
    """Catches ``TypeError: expected a model built by one of this package's timm names`` for timm's own DeiT-III
    after ``apply_structured_init``: the folder loads in transformers with the same logits and records the init."""
    from transformers import AutoModelForImageClassification

    model = timm.create_model("deit3_small_patch16_224", **GEOMETRY, num_classes=3)
    structinit_hf.apply_structured_init(model, "impulse")
    folder = structinit_hf.save_checkpoint(model, tmp_path / "out", label_names=["a", "b", "c"])
    config = json.loads((folder / "config.json").read_text())
    assert config["structinit"]["attention_init"] == "impulse" and config["structinit"]["shifts"]
    assert config["label_names"] == ["a", "b", "c"] and "num_classes" not in config["model_args"]
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    loaded = AutoModelForImageClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(pixel_values=images).logits, model.eval()(images))
    with pytest.raises(TypeError, match="save_checkpoint takes a timm model"):
        structinit_hf.save_checkpoint(torch.nn.Linear(2, 2), tmp_path / "linear")


def test_struct_init_vit_config_names_the_route_for_timm_own_names():
    """Catches ``StructInitViTConfig(architecture="deit3_small_patch16_224", model_args={"attention_init": ...})``
    ending in timm's raw ``TypeError``: one line naming the route that does take the init."""
    with pytest.raises(ValueError, match=r"only this package's timm names build with .*apply_structured_init") as info:
        structinit_hf.StructInitViTConfig(
            architecture="deit3_small_patch16_224", model_args={"attention_init": "impulse"}
        )
    assert "attention_init='impulse'" in str(info.value) and "\n" not in str(info.value)
    structinit_hf.StructInitViTConfig(architecture="deit3_small_patch16_224", model_args={"img_size": 32})  # no init


def test_dir_lists_the_lazy_names():
    assert {"StructInitViTConfig", "save_checkpoint", "apply_structured_init"} <= set(dir(structinit_hf))
