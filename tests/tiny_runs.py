"""Tiny training runs shared by the training tests: a depth-1, 16 px ViT and a synthetic dataset."""

from __future__ import annotations

from pathlib import Path

import datasets
import torch
from PIL import Image
from safetensors.torch import load_file

from structinit_hf.training import train, training_parser

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = [
    "--model",
    "vit_tiny_impulse3",
    "--model-kwargs",
    "depth=1",
    "img_size=16",
    "patch_size=4",
    "embed_dim=48",
]
TIMINGS = {"images_per_sec", "val_images_per_sec", "wall_time_s"}  # differ between identical runs


def run(argv: list[str]) -> dict:
    return train(training_parser().parse_args(argv))


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def synthetic_dataset(folder: Path, bad_row: int | None = None) -> Path:
    """A save_to_disk dataset of 32 train and 8 test random 16 px images in 4 classes (class names recorded)."""
    generator = torch.Generator().manual_seed(0)
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=list("abcd"))})

    def split(count: int) -> datasets.Dataset:
        pixels = torch.randint(0, 256, (count, 16, 16, 3), generator=generator, dtype=torch.uint8).numpy()
        images: list = [Image.fromarray(array) for array in pixels]
        if bad_row is not None and count == 32:
            images[bad_row] = {"path": "broken.png", "bytes": b"\x89PNG truncated"}
        return datasets.Dataset.from_dict({"img": images, "label": [i % 4 for i in range(count)]}, features=features)

    datasets.DatasetDict({"train": split(32), "test": split(8)}).save_to_disk(folder)
    return folder


def synthetic_args(dataset: Path, output_dir: Path, *extra: str) -> list[str]:
    """Three epochs of 4 steps of 8 images, one checkpoint kept: every kind of folder swap happens."""
    return [
        *TINY_MODEL, "--dataset", str(dataset), "--output-dir", str(output_dir), "--val-split", "0",
        "--batch-size", "8", "--epochs", "3", "--warmup-epochs", "1", "--keep-checkpoints", "1", *extra,
    ]  # fmt: skip
