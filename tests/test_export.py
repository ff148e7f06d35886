"""save_checkpoint: a stock timm_wrapper folder that stock timm, stock transformers and the pipeline load."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import datasets
import pytest
import timm
import torch
from safetensors.torch import load_file, save_file
from tiny_runs import run, synthetic_dataset
from transformers import AutoImageProcessor, AutoModelForImageClassification, TimmWrapperConfig, pipeline
from without_package import run_without_package

import structinit_hf
from structinit_hf.models import timm_wrapper
from structinit_hf.models.structinit_vit import default_cfgs
from structinit_hf.train.models.loading import load_model

LABELS = [f"class_{i}" for i in range(10)]


def _tiny_timm(**kwargs) -> torch.nn.Module:
    """A registered impulse ViT at 16 px with one 64-wide block, built the way users build it."""
    return timm.create_model(
        "vit_tiny_impulse5", img_size=16, depth=1, embed_dim=64, num_heads=2, seed=2, **kwargs
    ).eval()


def test_timm_model_checkpoint_loads_in_timm_and_transformers(tmp_path: Path):
    model = _tiny_timm()
    folder = structinit_hf.save_checkpoint(model, tmp_path / "final", label_names=LABELS)
    assert folder == tmp_path / "final"
    assert {p.name for p in folder.iterdir()} == {"config.json", "model.safetensors"}  # no remote code
    assert set(load_file(folder / "model.safetensors")) == set(model.state_dict())

    config = json.loads((folder / "config.json").read_text())
    assert config["architecture"] in timm.list_models() and config["architecture"] not in default_cfgs
    assert "num_classes" not in config["model_args"]
    assert config["model_args"]["depth"] == 1 and config["model_args"]["embed_dim"] == 64
    assert (config["num_classes"], config["num_features"], config["label_names"]) == (10, 64, LABELS)
    assert config["pretrained_cfg"]["input_size"] == [3, 16, 16]
    assert {"mean", "std", "crop_pct", "interpolation"} <= set(config["pretrained_cfg"])
    assert config["structinit"]["attention_init"] == "impulse"
    assert (config["structinit"]["kernel_size"], config["structinit"]["seed"]) == (5, 2)
    # every option the init used, not only those given: a checkpoint must not change meaning when a default moves
    assert config["structinit"] == model.structinit_settings
    assert len(config["structinit"]["shifts"]) == 1 and len(config["structinit"]["shifts"][0]) == 2  # block, heads
    assert config["model_type"] == "timm_wrapper" and "auto_map" not in config

    pixels = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = model(pixels)
        from_timm = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
        assert torch.equal(from_timm(pixels), expected)
        from_transformers = AutoModelForImageClassification.from_pretrained(folder).eval()
        assert torch.equal(from_transformers(pixels).logits, expected)
    assert from_transformers.config.id2label[7] == "class_7"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit_tiny_impulse3", "convit_tiny_patch2_32"])
def test_checkpoint_loads_in_stock_timm_and_transformers_without_the_package(tmp_path: Path, name: str):
    """A fresh Python where structinit_hf cannot be imported: stock timm and stock transformers load the folder
    (no trust_remote_code) and compute the same logits."""
    small = dict(depth=2) if name.startswith("convit") else dict(depth=1, embed_dim=64, num_heads=2)
    model = timm.create_model(name, img_size=16, num_classes=3, **small).eval()
    folder = structinit_hf.save_checkpoint(model, tmp_path / "final")
    pixels = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        save_file({"pixels": pixels, "logits": model(pixels)}, tmp_path / "io.safetensors")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["structinit_hf"] = None  # stock timm only
        import timm, torch
        from safetensors.torch import load_file
        io = load_file({str(tmp_path / "io.safetensors")!r})
        from transformers import AutoModelForImageClassification
        model = timm.create_model("local-dir:{folder}", pretrained=True).eval()
        wrapped = AutoModelForImageClassification.from_pretrained({str(folder)!r}).eval()
        with torch.no_grad():
            assert torch.equal(model(io["pixels"]), io["logits"])
            assert torch.equal(wrapped(io["pixels"]).logits, io["logits"])
        print("stock timm ok", type(model).__name__, type(wrapped).__name__)
        """
    )
    out = run_without_package(script, tmp_path)
    assert "stock timm ok" in out and "TimmWrapperForImageClassification" in out


def test_pipeline_classifies_a_real_cifar_image(tmp_path: Path, cifar10_sample: Path):
    test_split = datasets.load_dataset(str(cifar10_sample), split="test")
    names = test_split.features["label"].names
    image = test_split[0]["img"]
    model = timm.create_model("vit_tiny_impulse3", img_size=16, depth=1, embed_dim=64, num_heads=2).eval()
    folder = structinit_hf.save_checkpoint(model, tmp_path / "final", label_names=names)

    classifier = pipeline("image-classification", model=str(folder), top_k=3)
    predictions = classifier(image)
    assert len(predictions) == 3 and all(p["label"] in names for p in predictions)

    processor = AutoImageProcessor.from_pretrained(folder)
    pixels = processor(image, return_tensors="pt")["pixel_values"]
    assert pixels.shape == (1, 3, 16, 16)
    with torch.no_grad():
        probabilities = model(pixels).softmax(-1)[0]
    top = probabilities.topk(3)
    assert [p["label"] for p in predictions] == [names[i] for i in top.indices]
    assert [p["score"] for p in predictions] == pytest.approx(top.values.tolist(), abs=1e-5)


def test_transformers_model_exports_the_same_stock_folder(tmp_path: Path):
    model_args = dict(img_size=16, embed_dim=64, num_heads=2, depth=1)
    model = AutoModelForImageClassification.from_config(
        TimmWrapperConfig(architecture="vit_tiny_impulse3", model_args=model_args, num_labels=3)
    )
    folder = structinit_hf.save_checkpoint(model, tmp_path / "final", label_names=["a", "b", "c"])
    assert json.loads((folder / "config.json").read_text())["architecture"] == "vit_base_patch16_224"
    loaded = AutoModelForImageClassification.from_pretrained(folder)
    assert loaded.config.label2id == {"a": 0, "b": 1, "c": 2}
    assert torch.equal(loaded.timm_model.blocks[0].attn.qkv.weight, model.timm_model.blocks[0].attn.qkv.weight)


def test_a_failed_save_leaves_the_existing_checkpoint_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    good = structinit_hf.save_checkpoint(_tiny_timm(), tmp_path / "final", label_names=LABELS)
    before = {p.name: p.read_bytes() for p in good.iterdir()}

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(timm_wrapper, "save_file", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        structinit_hf.save_checkpoint(_tiny_timm(), tmp_path / "final", label_names=list("abcdefghij"))
    assert {p.name: p.read_bytes() for p in good.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["final"]  # no staging folder left behind

    monkeypatch.undo()
    structinit_hf.save_checkpoint(_tiny_timm(), tmp_path / "final", label_names=list("abcdefghij"))
    assert json.loads((good / "config.json").read_text())["label_names"] == list("abcdefghij")
    assert [p.name for p in tmp_path.iterdir()] == ["final"]


def test_bad_input_is_rejected(tmp_path: Path):
    model = _tiny_timm()
    with pytest.raises(ValueError, match="label_names must be 10 unique names"):
        structinit_hf.save_checkpoint(model, tmp_path / "a", label_names=["x", "y", "z"])
    with pytest.raises(ValueError, match="unique"):
        structinit_hf.save_checkpoint(model, tmp_path / "a", label_names=["x"] * 10)
    with pytest.raises(TypeError, match="save_checkpoint takes a timm model .*, got Linear"):
        structinit_hf.save_checkpoint(torch.nn.Linear(2, 2), tmp_path / "a")  # timm's own are taken: a timm model
    assert list(tmp_path.iterdir()) == []


def test_model_built_with_num_classes_saves_a_readable_folder(tmp_path: Path):
    """train.py builds with num_classes=...; the folder is an ordinary one others can read."""
    model = _tiny_timm(num_classes=3)
    folder = structinit_hf.save_checkpoint(model, tmp_path / "final", label_names=["a", "b", "c"])
    assert json.loads((folder / "config.json").read_text())["num_classes"] == 3
    umask = os.umask(0)
    os.umask(umask)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask
    loaded = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    with torch.no_grad():
        x = torch.randn(2, 3, 16, 16)
        torch.testing.assert_close(loaded(x), model(x))


def test_pytorch_default_init_model_saves(tmp_path: Path):
    """The benchmark's kaiming arm (timm's weight_init='reset') exports like any other."""
    model = timm.create_model("vit_tiny_patch2_32", img_size=16, depth=1, weight_init="reset", num_classes=3).eval()
    folder = structinit_hf.save_checkpoint(model, tmp_path / "final", label_names=["a", "b", "c"])
    loaded = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    with torch.no_grad():
        x = torch.randn(2, 3, 16, 16)
        torch.testing.assert_close(loaded(x), model(x))


def test_a_trained_run_loads_exactly_every_documented_way(tmp_path: Path):
    """A depth-2 run's final/, loaded as README.md and docs/ show: each way gives the logits of the network it saved,
    or, under a new head, its features. The registered name with the file alone (the name's depth 12) is refused
    in one line: timm's non-strict load under a new head would fill 2 of 12 blocks and leave the rest fresh."""
    kwargs = dict(depth=2, img_size=16, patch_size=4, embed_dim=48)
    argv = ["--model", "vit_tiny_impulse3", "--model-kwargs", *(f"{k}={v}" for k, v in kwargs.items())]
    dataset, out = synthetic_dataset(tmp_path / "data"), tmp_path / "run"
    run([*argv, "--dataset", str(dataset), "--output-dir", str(out), "--epochs", "1", "--batch-size", "8"])
    final, file = out / "final", str(out / "final" / "model.safetensors")
    config = json.loads((final / "config.json").read_text())
    saved = timm.create_model(config["architecture"], num_classes=4, **config["model_args"]).eval()
    saved.load_state_dict(load_file(file), strict=True)
    pixels = torch.randn(2, 3, 16, 16)
    overlay = dict(pretrained_cfg_overlay=dict(file=file))
    with torch.no_grad():
        logits, features = saved(pixels), saved.forward_features(pixels)
        exact = {
            "local-dir": timm.create_model(f"local-dir:{final}", pretrained=True),
            "name + file": timm.create_model("vit_tiny_impulse3", pretrained=True, **overlay, **kwargs),
            "name + file, its classes": timm.create_model(
                "vit_tiny_impulse3", pretrained=True, num_classes=4, **overlay, **kwargs
            ),
            "structinit-hf --model": load_model(str(final)).model,
        }
        for route, model in exact.items():
            assert torch.equal(model.eval()(pixels), logits), route
        from_pretrained = AutoModelForImageClassification.from_pretrained(final).eval()
        assert torch.equal(from_pretrained(pixels).logits, logits)
        new_head = {
            "local-dir": timm.create_model(f"local-dir:{final}", pretrained=True, num_classes=3),
            "name + file": timm.create_model("vit_tiny_impulse3", pretrained=True, num_classes=3, **overlay, **kwargs),
            "train.py --pretrained-path": timm.create_model(
                "vit_tiny_impulse3",
                pretrained=True,
                num_classes=4,
                pretrained_cfg_overlay=dict(file=file, num_classes=-1),
                **kwargs,
            ),
            "from_pretrained": AutoModelForImageClassification.from_pretrained(
                final, num_labels=3, ignore_mismatched_sizes=True
            ).timm_model,
        }
        for route, model in new_head.items():
            assert torch.equal(model.eval().forward_features(pixels), features), route
    run_geometry = {k: v for k, v in kwargs.items() if k != "depth"}  # all but the depth: the name's 12 blocks
    for num_classes in (3, 4):
        with pytest.raises(ValueError, match=r"tensors missing from the weights \(blocks\.\d+\..*local-dir:"):
            timm.create_model("vit_tiny_impulse3", pretrained=True, num_classes=num_classes, **overlay, **run_geometry)
