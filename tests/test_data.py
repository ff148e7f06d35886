"""Dataset loading for training and evaluation: sources, column detection, splits, image modes, offline Hub."""

from __future__ import annotations

import time
from collections import Counter

import datasets
import numpy as np
import pytest
import torch
from PIL import Image

from structinit_hf.data import (
    EpochShuffleSampler,
    TransformedImages,
    build_transform,
    ensure_hub_reachable,
    find_columns,
    load_image_classification,
    load_raw_dataset,
    stratified_split,
)

NAMES = ["cat", "dog", "frog"]


def _images(count: int, mode: str = "RGB", size: int = 12) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    shape = (size, size) if channels == 1 else (size, size, channels)
    return [Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode) for _ in range(count)]


def _split(count: int, image_column: str = "img", label_column: str = "label", mode: str = "RGB") -> datasets.Dataset:
    features = datasets.Features({image_column: datasets.Image(), label_column: datasets.ClassLabel(names=NAMES)})
    return datasets.Dataset.from_dict(
        {image_column: _images(count, mode), label_column: [i % 3 for i in range(count)]}, features=features
    )


@pytest.mark.parametrize(
    ("image_column", "label_column"),
    [("img", "label"), ("image", "labels"), ("img", "fine_label")],
)
def test_columns_found_by_name(image_column: str, label_column: str) -> None:
    features = _split(3, image_column, label_column).features
    assert find_columns(features) == (image_column, label_column)


def test_cifar100_prefers_fine_label_over_coarse_label() -> None:
    features = datasets.Features(
        {
            "img": datasets.Image(),
            "coarse_label": datasets.ClassLabel(names=["a", "b"]),
            "fine_label": datasets.ClassLabel(names=NAMES),
        }
    )
    assert find_columns(features) == ("img", "fine_label")


def test_columns_found_by_feature_type_and_explicit_names() -> None:
    features = datasets.Features({"photo": datasets.Image(), "category": datasets.ClassLabel(names=NAMES)})
    assert find_columns(features) == ("photo", "category")
    assert find_columns(features, image_column="photo", label_column="category") == ("photo", "category")
    with pytest.raises(ValueError, match="'pixels' not found.*photo, category"):
        find_columns(features, image_column="pixels")


def test_ambiguous_columns_ask_for_the_flag() -> None:
    features = datasets.Features(
        {
            "a": datasets.Image(),
            "b": datasets.Image(),
            "target": datasets.ClassLabel(names=NAMES),
        }
    )
    with pytest.raises(ValueError, match="--image-column"):
        find_columns(features)


def test_stratified_split_holds_out_each_class_in_proportion() -> None:
    labels = [0] * 50 + [1] * 30 + [2] * 20
    keep, held_out = stratified_split(labels, 0.1, seed=3)
    assert sorted(keep + held_out) == list(range(100))
    assert Counter(labels[i] for i in held_out) == {0: 5, 1: 3, 2: 2}
    assert stratified_split(labels, 0.1, seed=3) == (keep, held_out)
    assert stratified_split(labels, 0.1, seed=4)[1] != held_out
    with pytest.raises(ValueError, match="fraction"):
        stratified_split(labels, 1.5, seed=0)


def test_local_folder_without_validation_gets_a_carved_split(cifar10_small) -> None:
    data = load_image_classification(str(cifar10_small), val_split=0.1, max_eval_samples=40, seed=0)
    assert (data.image_column, data.label_column) == ("img", "label")
    assert data.label_names[:3] == ["airplane", "automobile", "bird"] and data.num_classes == 10
    assert len(data.train) + 466 == 4660 and data.validation_split == "train[held-out 0.1]"
    assert data.evaluation_split == "test" and len(data.evaluation) == 40 and len(data.validation) == 40


def test_val_split_zero_validates_on_the_evaluation_split(cifar10_small) -> None:
    data = load_image_classification(str(cifar10_small), val_split=0.0, max_train_samples=30, max_eval_samples=10)
    assert len(data.train) == 30 and data.validation_split == "test" and len(data.validation) == 10
    labels = data.train["label"]
    again = load_image_classification(str(cifar10_small), val_split=0.0, max_train_samples=30, max_eval_samples=10)
    assert again.train["label"] == labels  # the training subset is seeded


def test_save_to_disk_folder_with_validation_split(tmp_path) -> None:
    datasets.DatasetDict({"train": _split(12), "validation": _split(6, mode="L")}).save_to_disk(tmp_path / "ds")
    data = load_image_classification(str(tmp_path / "ds"))
    assert data.validation_split == "validation" and len(data.train) == 12
    assert data.evaluation_split == "validation" and len(data.evaluation) == 6
    with pytest.raises(ValueError, match="'test' not found.*train, validation"):
        load_image_classification(str(tmp_path / "ds"), eval_split="test")


def test_imagefolder_with_grayscale_and_rgba_images_becomes_rgb_tensors(tmp_path) -> None:
    for index, (name, mode) in enumerate([("cat", "L"), ("dog", "RGBA"), ("cat", "RGB"), ("dog", "L")]):
        (tmp_path / "train" / name).mkdir(parents=True, exist_ok=True)
        _images(1, mode)[0].save(tmp_path / "train" / name / f"{index}.png")
    raw = load_raw_dataset(str(tmp_path))
    image, label = find_columns(raw["train"].features)
    assert (image, label) == ("image", "label")
    transform = build_transform(
        {"input_size": (3, 8, 8), "mean": (0.5,) * 3, "std": (0.5,) * 3, "crop_pct": 1.0}, False
    )
    images = TransformedImages(raw["train"], image, label, transform)
    modes = {raw["train"][i]["image"].mode for i in range(4)}
    assert {"L", "RGBA"} <= modes
    for index in range(4):
        tensor, target = images[index]
        assert tensor.shape == (3, 8, 8) and target in (0, 1)


def test_integer_labels_without_classlabel(tmp_path) -> None:
    split = datasets.Dataset.from_dict({"image": _images(6), "label": [0, 2, 1, 2, 0, 1]})
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(tmp_path / "ds")
    assert load_image_classification(str(tmp_path / "ds"), val_split=0.0).label_names == ["0", "1", "2"]


def test_missing_local_folder_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a folder"):
        load_raw_dataset("./no/such/folder")


def test_offline_hub_id_fails_fast_and_points_to_local_folders() -> None:
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match="pass a local folder"):
        load_image_classification("uoft-cs/cifar10")
    assert time.perf_counter() - start < 10


def test_unreachable_hub_fails_fast_without_offline_mode(monkeypatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match="hub.invalid is unreachable.*local folder"):
        ensure_hub_reachable("uoft-cs/cifar10")
    assert time.perf_counter() - start < 10


def test_epoch_shuffle_is_a_function_of_seed_and_epoch() -> None:
    sampler = EpochShuffleSampler(50, seed=1, batch_multiple=16)
    assert len(sampler) == 48
    first = list(sampler)
    assert len(set(first)) == 48 and list(sampler) == first
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first
    replay = EpochShuffleSampler(50, seed=1, batch_multiple=16)
    replay.set_epoch(1)
    assert list(replay) == second
    with pytest.raises(ValueError, match="global batch of 64"):
        EpochShuffleSampler(50, seed=1, batch_multiple=64)


def test_training_transform_uses_the_model_data_config() -> None:
    config = {
        "input_size": (3, 16, 16),
        "mean": (0.0,) * 3,
        "std": (1.0,) * 3,
        "crop_pct": 1.0,
        "interpolation": "bicubic",
    }
    train = build_transform(config, True, auto_augment="rand-m9-mstd0.5", hflip=0.5, scale=(0.5, 1.0))
    evaluate = build_transform(config, False)
    image = _images(1, size=32)[0]
    assert train(image).shape == evaluate(image).shape == (3, 16, 16)
    assert torch.all(evaluate(image) >= 0) and torch.all(evaluate(image) <= 1)  # mean 0, std 1: plain [0, 1] pixels
