"""Any timm model in ``train``, ``evaluate`` and ``compare``: a stock name built at another size is fed at that size,
saved as trained, and compared across the inits it takes."""

from __future__ import annotations

import json

import pytest
from tiny_runs import image_folder, run

from structinit_hf.__main__ import main
from structinit_hf.train.models import load_model, model_data_config

STOCK = ["--model", "vit_tiny_patch16_224", "--model-kwargs", "img_size=32", "depth=1", "embed_dim=24", "num_heads=3"]


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
