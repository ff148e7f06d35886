"""Every way a transformers user saves a model of this package gives a folder stock transformers and timm load.

Each check runs in a fresh Python, as a user's next session would: without structinit_hf (it cannot be imported
there), or with ``import structinit_hf`` before ``import transformers``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoModel, AutoModelForImageClassification, Trainer, TrainingArguments
from without_package import run_without_package

from structinit_hf import StructInitViTConfig

TINY_ARGS = dict(img_size=16, patch_size=2, embed_dim=32, depth=2, num_heads=2, seed=3)
LABELS = ["cat", "dog", "bird"]
OLD_RELEASE = Path(__file__).parent / "data" / "structinit_vit_0.1"

# what a user without the plugin runs on a folder: the model, the image processor, the pipeline and stock timm,
# each giving the logits the saving process computed (io.safetensors beside the folder)
LOAD_EVERYWHERE = """
import json, sys
import timm, torch
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoImageProcessor, AutoModelForImageClassification, pipeline
folder, io = sys.argv[1], load_file(sys.argv[2])
model = AutoModelForImageClassification.from_pretrained(folder).eval()
with torch.no_grad():
    assert torch.equal(model(io["pixels"]).logits, io["logits"])
    assert torch.equal(timm.create_model("local-dir:" + folder, pretrained=True).eval()(io["pixels"]), io["logits"])
processor = AutoImageProcessor.from_pretrained(folder)
assert processor(Image.new("RGB", (40, 40)), return_tensors="pt")["pixel_values"].shape == (1, 3, 16, 16)
labels = [row["label"] for row in pipeline("image-classification", model=folder)(Image.new("RGB", (40, 40)))]
new_head = AutoModelForImageClassification.from_pretrained(folder, num_labels=5, ignore_mismatched_sizes=True)
print(json.dumps({"model": type(model).__name__, "labels": sorted(labels), "heads": new_head.config.num_labels,
                  "structinit": model.config.structinit["attention_init"]}))
"""


def _without_plugin(folder: Path, io: Path, tmp_path: Path) -> dict:
    script = f"import sys\nsys.modules['structinit_hf'] = None\nsys.argv = ['-', {str(folder)!r}, {str(io)!r}]\n"
    return json.loads(run_without_package(script + LOAD_EVERYWHERE, tmp_path).splitlines()[-1])


def _save_io(model, path: Path) -> Path:
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        save_file({"pixels": pixels, "logits": model.eval()(pixels).logits}, path)
    return path


def _classifier() -> AutoModelForImageClassification:
    config = StructInitViTConfig(
        architecture="vit_tiny_impulse5", model_args=TINY_ARGS, id2label=dict(enumerate(LABELS)), num_labels=3
    )
    return AutoModelForImageClassification.from_config(config)


@pytest.mark.slow
def test_save_pretrained_folder_loads_without_the_plugin(tmp_path: Path):
    model = _classifier()
    model.save_pretrained(tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == "timm_wrapper" and config["architecture"] == "vit_base_patch16_224"
    assert config["structinit"]["attention_init"] == "impulse" and config["structinit"]["kernel_size"] == 5
    assert config["pretrained_cfg"]["classifier"] == "head" and config["pretrained_cfg"]["num_classes"] == 3
    assert isinstance(model.config, StructInitViTConfig)  # the live model keeps the config it was built with
    loaded = _without_plugin(tmp_path / "out", _save_io(model, tmp_path / "io.safetensors"), tmp_path)
    assert loaded == {
        "model": "TimmWrapperForImageClassification", "labels": sorted(LABELS), "heads": 5, "structinit": "impulse"
    }  # fmt: skip


@pytest.mark.slow
def test_a_swin_folder_loads_without_the_plugin(tmp_path: Path):
    """A structured-init Swin at a CIFAR geometry saves as timm's stock Swin-T name with its model_args: a fresh
    Python without the plugin builds it in transformers, timm and a pipeline and gets the saving process's logits."""
    swin_args = dict(img_size=16, embed_dim=24, depths=(1, 1), num_heads=(2, 4), seed=3)
    config = StructInitViTConfig(
        architecture="swin_tiny_impulse3_patch2_window4_32",
        model_args=swin_args,
        id2label=dict(enumerate(LABELS)),
        num_labels=3,
    )
    model = AutoModelForImageClassification.from_config(config)
    model.save_pretrained(tmp_path / "out")
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["architecture"] == "swin_tiny_patch4_window7_224" and saved["model_args"]["window_size"] == 4
    loaded = _without_plugin(tmp_path / "out", _save_io(model, tmp_path / "io.safetensors"), tmp_path)
    assert loaded == {
        "model": "TimmWrapperForImageClassification", "labels": sorted(LABELS), "heads": 5, "structinit": "impulse"
    }  # fmt: skip


@pytest.mark.slow
def test_trainer_save_model_folder_loads_without_the_plugin(tmp_path: Path):
    model = _classifier()
    generator = torch.Generator().manual_seed(0)
    data = [{"pixel_values": torch.randn(3, 16, 16, generator=generator), "labels": i % 3} for i in range(8)]
    args = TrainingArguments(
        output_dir=str(tmp_path / "trainer"), max_steps=2, per_device_train_batch_size=4, report_to=[], use_cpu=True
    )
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    trainer.save_model(str(tmp_path / "out"))
    loaded = _without_plugin(tmp_path / "out", _save_io(model, tmp_path / "io.safetensors"), tmp_path)
    assert loaded["model"] == "TimmWrapperForImageClassification" and loaded["labels"] == sorted(LABELS)


def test_features_model_saves_a_stock_folder(tmp_path: Path):
    model = AutoModel.from_config(StructInitViTConfig(model_args=TINY_ARGS))
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["model_type"], config["num_classes"]) == ("timm_wrapper", 0)
    reloaded = AutoModel.from_pretrained(tmp_path)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[key], value, rtol=0, atol=0, msg=key)


@pytest.mark.slow
def test_plugin_imported_before_transformers_loads_old_and_new_folders(tmp_path: Path):
    """``import structinit_hf`` first, transformers second (the natural order): a 0.1 folder (model_type
    structinit_vit) and a folder saved today both load."""
    _classifier().save_pretrained(tmp_path / "new")
    script = textwrap.dedent(
        f"""
        import structinit_hf, sys
        assert "transformers" not in sys.modules
        from transformers import AutoModelForImageClassification
        old = AutoModelForImageClassification.from_pretrained({str(OLD_RELEASE)!r})
        new = AutoModelForImageClassification.from_pretrained({str(tmp_path / "new")!r})
        print(type(old).__name__, type(new).__name__)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["StructInitViTForImageClassification", "TimmWrapperForImageClassification"]


def test_a_mixer_timm_has_no_name_for_warns_when_saved_and_the_readme_links_a_doc_that_says_why(tmp_path: Path):
    """Catches a Mixer folder that stock timm rejects ("Unknown model (mixer_s4_32)") written without a word, a
    warning for a folder stock timm does load (a ViT under vit_tiny_patch16_224), and the README sending a reader
    about Mixer saves to a doc that never mentions Mixer."""
    import re
    import warnings

    import timm

    from structinit_hf import save_checkpoint

    mixer = timm.create_model("mixer_s4_impulse3_32", num_blocks=1, num_classes=3)
    with pytest.warns(UserWarning, match=r"as 'mixer_s4_32', a name only structinit_hf registers .* stock timm cannot"):
        save_checkpoint(mixer, tmp_path / "mixer")
    assert json.loads((tmp_path / "mixer" / "config.json").read_text())["architecture"] == "mixer_s4_32"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_checkpoint(timm.create_model("vit_tiny_impulse3", depth=1, num_classes=3), tmp_path / "vit")
    repo = Path(__file__).resolve().parents[1]
    lines = [line for line in (repo / "README.md").read_text().splitlines() if "Mixer" in line and "saved" in line]
    linked = {doc for line in lines for doc in re.findall(r"\]\((docs/[\w.-]+\.md)", line)}
    assert linked, lines
    assert all("Mixer" in (repo / doc).read_text() for doc in linked), linked
