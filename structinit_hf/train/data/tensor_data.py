"""The input pipeline of a training run: every image decoded once, checked, and kept as uint8 tensors.

Before the first step each split's images are decoded once (by the DataLoader workers).  An image that
cannot be read is named by split, row and file: the run stops there, or, with ``--skip-bad-images``,
drops the row and says how many it dropped.  When a split's images share one size and fit in memory
they stay decoded as one ``N x 3 x H x W`` uint8 tensor and are augmented as tensors
(:mod:`structinit_hf.train.data.tensor_augment`), so no epoch decodes a JPEG or PNG again; otherwise (or with
``--input-pipeline pil``) timm's PIL transforms read the split each epoch as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import datasets
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..cli.errors import UsageError
from ..settings import INPUT_PIPELINES
from .dataloaders import SeededSamples, TransformedImages, build_transform, worker_context
from .images import open_rgb, shrink_to
from .splits import ImageClassificationData, class_counts
from .tensor_augment import TensorEvalTransform, TensorTrainTransform, tensor_policy_supported

__all__ = [
    "DecodedImages",
    "DecodedSplit",
    "INPUT_PIPELINES",
    "MAX_DECODED_BYTES",
    "decode_split",
    "training_datasets",
    "unreadable_image_error",
]

MAX_DECODED_BYTES = 8 * 2**30  # a split larger than this decoded stays on the PIL path


class _EncodedRows(Dataset):
    """Each row's image decoded by :func:`~.images.rgb_image` (and shrunk to ``shorter_side``) as
    an ``H x W x 3`` uint8 array with its size as stored, or the reason it cannot be read.

    An array, not a tensor: a loader worker hands arrays over pickled in its batch, where each tensor would travel
    as a file descriptor of its own (a minute for CIFAR-10's 60,000 images on 5 workers, 50x the decoding)."""

    def __init__(
        self, split: datasets.Dataset, image_column: str, shorter_side: int | None, interpolation: str
    ) -> None:
        feature = split.features[image_column]
        if not isinstance(feature, datasets.Image):
            raise UsageError(f"column {image_column!r} holds {feature}, not images; set --image-column")
        self.split, self.image_column = split.cast_column(image_column, datasets.Image(decode=False)), image_column
        self.shorter_side, self.interpolation = shorter_side, interpolation

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> tuple[int, np.ndarray | None, str, tuple[int, int] | None]:
        encoded = self.split[index][self.image_column]
        name = encoded.get("path") or "embedded image"
        try:
            image = open_rgb(encoded)
        except Exception as error:  # noqa: BLE001  whatever PIL raises for bad bytes: report it with the file
            return index, None, f"{name}: {type(error).__name__}: {error}", None
        size = image.size
        if self.shorter_side is not None:
            image = shrink_to(image, self.shorter_side, self.interpolation)
        return index, np.array(image), name, size


def _as_list(rows: list) -> list:
    return rows


@dataclass
class DecodedSplit:
    """A split with its unreadable rows dropped, its pixels when they fit one uint8 tensor, and the sizes its images
    had as stored (width, height: the smallest and the largest by area)."""

    split: datasets.Dataset
    pixels: torch.Tensor | None
    skipped: int
    source_sizes: tuple[tuple[int, int], tuple[int, int]] | None = None


def unreadable_image_error(bad: list[tuple[int, str]], name: str, flag: str = "--skip-bad-images") -> UsageError:
    """The one line that stops a command at its first unreadable image: row, file, how many more, and ``flag``."""
    row, message = bad[0]
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return UsageError(
        f"row {row} of the {name} split is not a readable image: {message}{more}; fix or remove it, or pass "
        f"{flag} to go on without unreadable images"
    )


def decode_split(
    split: datasets.Dataset,
    image_column: str,
    name: str,
    *,
    workers: int = 0,
    skip_bad_images: bool = False,
    keep_pixels: bool = True,
    shorter_side: int | None = None,
    interpolation: str = "bicubic",
) -> DecodedSplit:
    """Decode every image of ``split`` once; stop at an unreadable one unless ``skip_bad_images``.

    With ``keep_pixels`` the images stay decoded as one uint8 tensor when they share a size (after shrinking each
    to ``shorter_side``, as timm's evaluation resize would) and fit :data:`MAX_DECODED_BYTES`."""
    rows = _EncodedRows(split, image_column, shorter_side, interpolation)
    loader = DataLoader(
        rows, batch_size=64, num_workers=workers, collate_fn=_as_list, multiprocessing_context=worker_context(workers)
    )
    bad: list[tuple[int, str]] = []
    pixels: torch.Tensor | None = None
    keep = keep_pixels
    smallest = largest = None
    for batch in loader:
        for index, array, message, size in batch:
            if array is None:
                bad.append((index, message))
                continue
            image = torch.from_numpy(array).permute(2, 0, 1)
            smallest = size if smallest is None or size[0] * size[1] < smallest[0] * smallest[1] else smallest
            largest = size if largest is None or size[0] * size[1] > largest[0] * largest[1] else largest
            if not keep:
                continue
            if pixels is None:  # one tensor for the split, filled in place: no second copy at the end
                if len(split) * image.numel() > MAX_DECODED_BYTES:
                    keep = False  # too large: the PIL path reads this split
                    continue
                pixels = torch.empty((len(split), *image.shape), dtype=torch.uint8)
            if image.shape != pixels.shape[1:]:
                keep, pixels = False, None  # mixed sizes: the PIL path reads this split
            else:
                pixels[index] = image
    if bad and not skip_bad_images:
        raise unreadable_image_error(bad, name)
    if bad:
        unreadable = {row for row, _ in bad}
        kept_rows = [row for row in range(len(split)) if row not in unreadable]
        split = split.select(kept_rows)
        pixels = pixels[kept_rows] if pixels is not None else None
    sizes = (smallest, largest) if smallest is not None else None
    return DecodedSplit(split, pixels if keep else None, len(bad), sizes)


class DecodedImages(SeededSamples):
    """Decoded uint8 images and their labels as ``(image tensor, label)`` pairs through a tensor ``transform``; an
    item is a row or ``(row, seed)``, as :class:`~structinit_hf.train.data.dataloaders.SeededSamples` says."""

    def __init__(self, pixels: torch.Tensor, labels: torch.Tensor, transform: Callable) -> None:
        self.pixels, self.labels, self.transform = pixels, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def sample(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.pixels[index]), int(self.labels[index])


def decoded_shorter_side(data_config: dict[str, Any]) -> int:
    """The shorter side the decode-once path keeps an image at, at most: timm's evaluation resize
    (``input size / crop_pct``), which every crop and resize of training and evaluation starts from or below."""
    crop_pct = data_config.get("crop_pct") or 0.875
    return max(math.floor(side / crop_pct) for side in data_config["input_size"][-2:])


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
    supported = tensor_policy_supported(augmentation.get("auto_augment")) and (
        data_config.get("crop_mode", "center") == "center"
    )
    named = ((data.train, "train"), (data.validation, data.validation_split), (data.evaluation, data.evaluation_split))
    options = dict(
        workers=workers,
        skip_bad_images=skip_bad_images,
        keep_pixels=pipeline != "pil" and supported,
        shorter_side=decoded_shorter_side(data_config),
        interpolation=data_config.get("interpolation", "bicubic"),
    )
    decoded: dict[int, DecodedSplit] = {}
    for split, name in named:
        if id(split) not in decoded:  # validation and evaluation may be one split: decode it once
            decoded[id(split)] = decode_split(split, data.image_column, name, **options)
            if decoded[id(split)].skipped:
                log(f"--skip-bad-images: skipped {decoded[id(split)].skipped} unreadable image(s) of the {name} split")
    parts = [decoded[id(split)] for split, _ in named]
    before = class_counts(data.train, data.label_column, data.num_classes)
    data.train, data.validation, data.evaluation = (part.split for part in parts)
    after = class_counts(data.train, data.label_column, data.num_classes)
    emptied = [name for name, had, has in zip(data.label_names, before, after, strict=True) if had and not has]
    if emptied:
        raise UsageError(
            f"--skip-bad-images: every training image of class(es) {', '.join(map(repr, emptied))} is unreadable; "
            "a model cannot learn a class it never sees: fix those images, or remove the class"
        )
    sizes = [size for part in decoded.values() if part.source_sizes for size in part.source_sizes]
    if sizes:
        data.source_sizes = (min(sizes, key=lambda wh: wh[0] * wh[1]), max(sizes, key=lambda wh: wh[0] * wh[1]))

    tensor_ready = all(part.pixels is not None for part in parts)
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
    images = [  # [:] reads the label column at once, where torch.tensor would read a datasets Column row by row
        DecodedImages(part.pixels, torch.tensor(part.split[data.label_column][:]), transform)
        for part, transform in zip(parts, (transforms[0], transforms[1], transforms[1]), strict=True)
    ]
    return *images, "tensor"
