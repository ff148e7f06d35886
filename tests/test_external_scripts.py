"""What timm's train.py / validate.py and transformers' run_image_classification.py do with this project's names and
run folders, as the calls those scripts make (docs/training.md gives their command lines)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import timm
import torch
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageClassification, pipeline

import structinit_hf  # noqa: F401  (what train.py's --device-modules structinit_hf imports)
from structinit_hf.models.timm_wrapper import save_checkpoint

REPO = Path(__file__).resolve().parents[1]
TINY = dict(img_size=16, patch_size=4, depth=1, embed_dim=24, num_heads=3)
PARENT_LABELS = [f"parent_{i}" for i in range(10)]
NEW_LABELS = ["cat", "dog", "eel"]
# the keywords timm's train.py passes create_model besides the model's, at their defaults
TRAIN_PY_KWARGS = dict(
    in_chans=3, drop_rate=0.0, drop_path_rate=None, drop_block_rate=None, global_pool=None, bn_momentum=None,
    bn_eps=None, scriptable=False, checkpoint_path="",
)  # fmt: skip


@pytest.fixture
def run_final(tmp_path) -> Path:
    """A run's final/ as the project writes it: a tiny 10-class vit_tiny_impulse3 in a stock timm_wrapper folder."""
    return save_checkpoint(
        timm.create_model("vit_tiny_impulse3", **TINY), tmp_path / "run" / "final", label_names=PARENT_LABELS
    )


def test_train_py_builds_a_plugin_name_with_its_init() -> None:
    model = timm.create_model("vit_tiny_impulse3", pretrained=False, num_classes=3, **TRAIN_PY_KWARGS, **TINY)
    assert model.num_classes == 3 and model.structinit_settings["attention_init"] == "impulse"


def test_train_py_pretrained_path_loads_a_run_under_a_new_head(run_final) -> None:
    """--pretrained --pretrained-path <run>/final/model.safetensors --num-classes 3: train.py's overlay."""
    overlay = dict(file=str(run_final / "model.safetensors"), num_classes=-1)
    model = timm.create_model(
        "vit_tiny_impulse3", pretrained=True, num_classes=3, pretrained_cfg_overlay=overlay, **TRAIN_PY_KWARGS, **TINY
    )
    saved, state = load_file(run_final / "model.safetensors"), model.state_dict()
    assert state["head.weight"].shape == (3, 24) and model.structinit_settings is None  # loaded: no init ran
    for key in sorted(set(saved) - {"head.weight", "head.bias"}):
        assert torch.equal(state[key], saved[key]), key


def test_validate_py_scores_a_run_folder_with_its_own_weights_and_data_config(run_final) -> None:
    """validate.py --model local-dir:<run>/final --pretrained."""
    model = timm.create_model(
        f"local-dir:{run_final}", pretrained=True, num_classes=None, in_chans=3, global_pool=None, scriptable=False
    )
    saved = load_file(run_final / "model.safetensors")
    assert sorted(model.state_dict()) == sorted(saved)
    assert all(torch.equal(model.state_dict()[key], value) for key, value in saved.items())
    config = timm.data.resolve_data_config({}, model=model)
    assert (config["input_size"], config["crop_pct"]) == ((3, 16, 16), 1.0)


def fine_tune_as_run_image_classification(source: Path, out: Path, name_labels_before_saving: bool = False) -> None:
    """run_image_classification.py --model_name_or_path <source> --ignore_mismatched_sizes on a 3-class image folder,
    with no step taken: its config and model loads, then Trainer.save_model's files (``name_labels_before_saving``:
    the in-Python fix docs/training.md gives, run first)."""
    config = AutoConfig.from_pretrained(
        source,
        num_labels=len(NEW_LABELS),
        label2id={name: str(i) for i, name in enumerate(NEW_LABELS)},
        id2label={str(i): name for i, name in enumerate(NEW_LABELS)},
        finetuning_task="image-classification",
    )
    model = AutoModelForImageClassification.from_pretrained(source, config=config, ignore_mismatched_sizes=True)
    assert list(model.config.id2label.values()) == NEW_LABELS
    if name_labels_before_saving:
        model.config.label_names = list(model.config.id2label.values())
    model.save_pretrained(out)
    AutoImageProcessor.from_pretrained(source).save_pretrained(out)


def predicted_labels(folder: Path) -> set[str]:
    classify = pipeline("image-classification", model=str(folder))
    return {answer["label"] for answer in classify(Image.new("RGB", (16, 16)))}


def documented_label_names_fix() -> tuple[str, str, list[str]]:
    """The one line of Python docs/training.md gives for a fine-tuned folder, the folder it fixes and the names."""
    line = re.search(
        r'python -c "(from transformers import AutoConfig;[^"]+)"', (REPO / "docs/training.md").read_text()
    )
    assert line, "docs/training.md lost its label_names line"
    folder = re.search(r"AutoConfig.from_pretrained\('([^']+)'\)", line.group(1)).group(1)
    names = ast.literal_eval(re.search(r"label_names = (\[[^]]*\])", line.group(1)).group(1))
    return line.group(1), folder, names


def test_a_stock_fine_tune_keeps_the_parents_label_names_and_the_pipeline_answers_label_n(run_final, tmp_path):
    fine_tune_as_run_image_classification(run_final, tmp_path / "ft")
    saved = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert (saved["num_classes"], saved["label_names"]) == (3, PARENT_LABELS)
    assert predicted_labels(tmp_path / "ft") == {"LABEL_0", "LABEL_1", "LABEL_2"}


def test_the_documented_line_gives_the_fine_tuned_folder_its_label_names(run_final, tmp_path, monkeypatch):
    code, folder, names = documented_label_names_fix()
    assert names == NEW_LABELS  # the fine-tune below trains on these
    fine_tune_as_run_image_classification(run_final, tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    exec(code, {})
    saved = json.loads((tmp_path / folder / "config.json").read_text())
    assert (saved["num_classes"], saved["label_names"]) == (3, NEW_LABELS)
    assert predicted_labels(tmp_path / folder) == set(NEW_LABELS)
    reloaded = AutoModelForImageClassification.from_pretrained(tmp_path / folder)
    assert reloaded.config.id2label == dict(enumerate(NEW_LABELS))


def test_label_names_set_before_saving_reach_the_pipeline(run_final, tmp_path):
    fine_tune_as_run_image_classification(run_final, tmp_path / "ft", name_labels_before_saving=True)
    assert predicted_labels(tmp_path / "ft") == set(NEW_LABELS)
