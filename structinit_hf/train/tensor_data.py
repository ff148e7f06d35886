"""The input pipeline of a training run: every image decoded once, checked, and kept as uint8 tensors.

Before the first step each split's images are decoded once (by the DataLoader workers).  An image that
cannot be read is named by split, row and file: the run stops there, or, with ``--skip-bad-images``,
drops the row and says how many it dropped.  When a split's images share one size and fit in memory
they stay decoded as one ``N x 3 x H x W`` uint8 tensor and are augmented as tensors
(:mod:`structinit_hf.train.tensor_augment`), so no epoch decodes a JPEG or PNG again; otherwise (or with
``--input-pipeline pil``) timm's PIL transforms read the split each epoch as before.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import datasets
import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from .data import ImageClassificationData
from .dataloaders import TransformedImages, build_transform, seeded_random_state, split_item
from .errors import UsageError
from .tensor_augment import TensorEvalTransform, TensorTrainTransform, tensor_policy_supported

__all__ = ["DecodedImages", "DecodedSplit", "INPUT_PIPELINES", "MAX_DECODED_BYTES", "decode_split", "training_datasets"]

INPUT_PIPELINES = ("auto", "tensor", "pil")


MAX_DECODED_BYTES = 8 * 2**30  # a split larger than this decoded stays on the PIL path


class _EncodedRows(Dataset):
    """Each row's image decoded to a ``3 x H x W`` uint8 tensor, or the reason it cannot be read."""

    def __init__(self, split: datasets.Dataset, image_column: str) -> None:
        feature = split.features[image_column]
        if not isinstance(feature, datasets.Image):
            raise UsageError(f"column {image_column!r} holds {feature}, not images; set --image-column")
        self.split, self.image_column = split.cast_column(image_column, datasets.Image(decode=False)), image_column

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor | None, str]:
        encoded = self.split[index][self.image_column]
        name = encoded.get("path") or "embedded image"
        try:
            source = io.BytesIO(encoded["bytes"]) if encoded.get("bytes") else encoded["path"]
            with Image.open(source) as image:
                pixels = np.array(image.convert("RGB"))
        except Exception as error:  # noqa: BLE001  whatever PIL raises for bad bytes: report it with the file
            return index, None, f"{name}: {type(error).__name__}: {error}"
        return index, torch.from_numpy(pixels).permute(2, 0, 1), name


def _as_list(rows: list) -> list:
    return rows


@dataclass
class DecodedSplit:
    """A split with its unreadable rows dropped, and its pixels when they fit one uint8 tensor."""

    split: datasets.Dataset
    pixels: torch.Tensor | None
    skipped: int


def decode_split(
    split: datasets.Dataset, image_column: str, name: str, *, workers: int = 0, skip_bad_images: bool = False
) -> DecodedSplit:
    """Decode every image of ``split`` once; stop at an unreadable one unless ``skip_bad_images``."""
    loader = DataLoader(_EncodedRows(split, image_column), batch_size=64, num_workers=workers, collate_fn=_as_list)
    bad: list[tuple[int, str]] = []
    kept: list[torch.Tensor] | None = []
    size = None
    for rows in loader:
        for index, pixels, message in rows:
            if pixels is None:
                bad.append((index, message))
            elif kept is not None:
                size = size or pixels.shape
                if pixels.shape != size or (len(kept) + 1) * pixels.numel() > MAX_DECODED_BYTES:
                    kept = None  # mixed sizes or too large: the PIL path reads this split
                else:
                    kept.append(pixels)
    if bad and not skip_bad_images:
        row, message = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise UsageError(
            f"row {row} of the {name} split is not a readable image: {message}{more}; fix or remove it, or pass "
            "--skip-bad-images to train without unreadable images"
        )
    if bad:
        unreadable = {row for row, _ in bad}
        split = split.select([row for row in range(len(split)) if row not in unreadable])
    pixels = torch.stack(kept) if kept else None
    return DecodedSplit(split, pixels, len(bad))


class DecodedImages(Dataset):
    """Decoded uint8 images and their labels as ``(image tensor, label)`` pairs through a tensor ``transform``.

    An item is a row, or ``(row, seed)``: the transform then runs under
    :func:`~structinit_hf.train.dataloaders.seeded_random_state`, as
    :class:`~structinit_hf.train.dataloaders.TransformedImages` does.
    """

    def __init__(self, pixels: torch.Tensor, labels: torch.Tensor, transform: Callable) -> None:
        self.pixels, self.labels, self.transform = pixels, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        index, seed = split_item(item)
        if seed is None:
            return self.transform(self.pixels[index]), int(self.labels[index])
        with seeded_random_state(seed):
            return self.transform(self.pixels[index]), int(self.labels[index])


def training_datasets(
    data: ImageClassificationData,
    data_config: dict[str, Any],
    augmentation: dict[str, Any],
    *,
    pipeline: str = "auto",
    workers: int = 0,
    skip_bad_images: bool = False,
    log: Callable[[str], object] = print,
) -> tuple[Dataset, Dataset, Dataset, str]:
    """The train, validation and evaluation datasets of a run, and the pipeline used (``tensor`` or ``pil``).

    ``data``'s splits lose their unreadable rows (``skip_bad_images``) or the run stops here, before the
    first step.  ``pipeline='auto'`` takes the tensor path when every split decodes to one uint8 tensor
    and the augmentation has a tensor version.
    """
    if pipeline not in INPUT_PIPELINES:
        raise UsageError(f"--input-pipeline {pipeline!r}; expected one of {', '.join(INPUT_PIPELINES)}")
    named = ((data.train, "train"), (data.validation, data.validation_split), (data.evaluation, data.evaluation_split))
    decoded: dict[int, DecodedSplit] = {}
    for split, name in named:
        if id(split) not in decoded:  # validation and evaluation may be one split: decode it once
            options = dict(workers=workers, skip_bad_images=skip_bad_images)
            decoded[id(split)] = decode_split(split, data.image_column, name, **options)
            if decoded[id(split)].skipped:
                log(f"--skip-bad-images: skipped {decoded[id(split)].skipped} unreadable image(s) of the {name} split")
    parts = [decoded[id(split)] for split, _ in named]
    data.train, data.validation, data.evaluation = (part.split for part in parts)

    tensor_ready = all(part.pixels is not None for part in parts)
    supported = tensor_policy_supported(augmentation.get("auto_augment")) and (
        data_config.get("crop_mode", "center") == "center"
    )
    if pipeline == "tensor" and not (tensor_ready and supported):
        reason = "the images differ in size or are too many" if not tensor_ready else "the augmentation has none"
        raise UsageError(f"--input-pipeline tensor: {reason}; use --input-pipeline pil (or auto)")
    if pipeline == "pil" or not (tensor_ready and supported):
        transforms = (build_transform(data_config, True, **augmentation), build_transform(data_config, False))
        images = [
            TransformedImages(part.split, data.image_column, data.label_column, transform)
            for part, transform in zip(parts, (transforms[0], transforms[1], transforms[1]), strict=True)
        ]
        return *images, "pil"
    transforms = (TensorTrainTransform(data_config, **augmentation), TensorEvalTransform(data_config))
    images = [
        DecodedImages(part.pixels, torch.tensor(part.split[data.label_column]), transform)
        for part, transform in zip(parts, (transforms[0], transforms[1], transforms[1]), strict=True)
    ]
    return *images, "tensor"
