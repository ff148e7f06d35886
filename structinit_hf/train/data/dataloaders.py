"""From a split to batches: timm's transforms, each sample augmented under its own seed, the epoch shuffle, the loaders.

Images go through timm's ``create_transform`` with the model's own data config.  A training sample's augmentation
depends on ``(seed, epoch, position)`` only, so a resumed run replays the order and the augmentation of the epoch it
resumes at, whatever the number of workers.
"""

from __future__ import annotations

import multiprocessing
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import datasets
import numpy as np
import torch
from PIL import Image
from timm.data import create_transform
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

from ..cli.errors import UsageError
from ..settings import Recipe
from .images import rgb_image

__all__ = [
    "EpochShuffleSampler",
    "SeededSamples",
    "TransformedImages",
    "build_transform",
    "eval_dataloader",
    "fit_batch",
    "preserved_random_state",
    "seed_generators",
    "split_item",
    "train_dataloader",
    "worker_context",
]


def worker_context(workers: int) -> multiprocessing.context.BaseContext | None:
    """How a loader's ``workers`` start: forked on Linux, whatever this process's default start method is.

    A process started by multiprocessing's spawn (each benchmark run) inherits spawn as its default, and a spawned
    worker is a fresh interpreter that imports torch, timm and datasets and unpickles the data before its first batch,
    for every loader's workers: seconds each, minutes for a run's set-up, its first batch and its first validation. A
    forked worker starts with all of it loaded. Elsewhere (macOS, Windows) the platform's default stays."""
    if workers == 0 or sys.platform != "linux":
        return None
    return multiprocessing.get_context("fork")


def seed_generators(seed: int) -> None:
    """Seed Python's, NumPy's and torch's (CPU) global generators with ``seed``."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.default_generator.manual_seed(seed)  # the CPU generator only: torch.manual_seed costs ~1 ms (CUDA)


@contextmanager
def preserved_random_state() -> Iterator[None]:
    """Python's, NumPy's and torch's (CPU) global generators as they were, afterwards. In a DataLoader worker nothing
    else draws from them, so nothing is saved there."""
    restore = get_worker_info() is None
    if restore:
        python_state, numpy_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        if restore:
            random.setstate(python_state)
            np.random.set_state(numpy_state)
            torch.set_rng_state(torch_state)


def split_item(item: int | tuple[int, int]) -> tuple[int, int | None]:
    """A dataset item as ``(row, seed)``; ``seed`` is ``None`` for a plain row (evaluation)."""
    return (int(item[0]), int(item[1])) if isinstance(item, tuple | list) else (int(item), None)


class SeededSamples(Dataset):
    """Items that are a row, or ``(row, seed)``: a training sample is augmented under its own seed, so its augmentation
    depends on ``(seed, epoch, position)`` only, not on the number of DataLoader workers nor on whether they persist
    across epochs, and a resumed run replays it exactly. Subclasses give :meth:`sample`.

    torch's DataLoader fetches a batch through :meth:`__getitems__`: the generators are saved and restored once per
    batch, not once per sample (a quarter of the input pipeline's time on the CPU proxy:
    docs/benchmarks.md, "The CPU step"); each sample is still seeded by its own seed, so the batches are the same."""

    def sample(self, index: int) -> tuple[torch.Tensor, int]:
        raise NotImplementedError

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        return self.__getitems__([item])[0]

    def __getitems__(self, items: list[int | tuple[int, int]]) -> list[tuple[torch.Tensor, int]]:
        rows = [split_item(item) for item in items]
        if all(seed is None for _, seed in rows):  # evaluation: nothing drawn
            return [self.sample(index) for index, _ in rows]
        batch = []
        with preserved_random_state():
            for index, seed in rows:
                if seed is not None:
                    seed_generators(seed)
                batch.append(self.sample(index))
        return batch


class TransformedImages(SeededSamples):
    """A ``datasets`` split as ``(image tensor, label)`` pairs, each image decoded by :func:`.images.rgb_image`."""

    def __init__(self, split: datasets.Dataset, image_column: str, label_column: str, transform: Callable) -> None:
        self.split, self.image_column, self.label_column, self.transform = split, image_column, label_column, transform

    def __len__(self) -> int:
        return len(self.split)

    def sample(self, index: int) -> tuple[torch.Tensor, int]:
        row = self.split[index]
        image = row[self.image_column]
        if not isinstance(image, Image.Image):
            raise UsageError(
                f"column {self.image_column!r} holds {type(image).__name__}, not images; set --image-column"
            )
        return self.transform(rgb_image(image)), int(row[self.label_column])


def build_transform(data_config: dict[str, Any], is_training: bool, **augmentation: Any) -> Callable:
    """timm's ``create_transform`` for the model's data config (input size, mean, std, crop, interpolation).

    ``augmentation`` holds the training-only arguments (``auto_augment``, ``hflip``, ``scale``, ``ratio``,
    ``re_prob``, ``color_jitter``); evaluation uses the deterministic resize-and-crop.
    """
    keys = ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")
    config = {key: data_config[key] for key in keys if key in data_config}
    return create_transform(**config, is_training=is_training, **(augmentation if is_training else {}))


class EpochShuffleSampler(Sampler[tuple[int, int]]):
    """A shuffle that is a function of ``(seed, epoch)`` only, cut to whole global batches.

    Yields ``(row, sample_seed)``: the seed under which that sample is augmented.  Every process draws
    the same order (accelerate shards the batches), and a resumed run replays the order and the
    augmentation of the epoch it resumes at.  Call :meth:`set_epoch` before iterating (accelerate's
    ``DataLoaderShard.set_epoch`` forwards to it).  With ``epochs``, one pass yields that epoch and every later one
    up to ``epochs`` back to back: the loader's workers then prepare an epoch's first batches while the previous one
    ends and is validated, where a pass per epoch would leave the accelerator waiting for them at each epoch's start.
    """

    def __init__(self, num_rows: int, seed: int, batch_multiple: int = 1, epochs: int | None = None) -> None:
        if num_rows < batch_multiple:
            raise ValueError(
                f"{num_rows} training rows do not fill one global batch of {batch_multiple}; lower --batch-size"
            )
        self.num_rows, self.seed, self.batch_multiple = num_rows, seed, batch_multiple
        self.epochs, self.epoch = epochs, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def epoch_rows(self) -> int:
        """Rows an epoch: whole global batches."""
        return self.num_rows // self.batch_multiple * self.batch_multiple

    def _epochs(self) -> range:
        return range(self.epoch, self.epoch + 1 if self.epochs is None else self.epochs)

    def __len__(self) -> int:
        return self.epoch_rows * len(self._epochs())

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for epoch in self._epochs():
            generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            order = torch.randperm(self.num_rows, generator=generator)[: self.epoch_rows]
            seeds = torch.randint(0, 2**62, (self.epoch_rows,), generator=generator)
            yield from zip(order.tolist(), seeds.tolist(), strict=True)


def train_dataloader(
    images: Dataset,
    micro_batch: int,
    global_batch: int,
    seed: int,
    workers: int,
    pin_memory: bool = False,
    epochs: int | None = None,
) -> DataLoader:
    """Shuffled, whole-global-batch loader for one process's micro-batches (accelerate shards it).

    One pass covers the epochs from the sampler's current one up to ``epochs`` (see :class:`EpochShuffleSampler`),
    or that one epoch.  With workers, they persist across passes (the per-sample seeds keep that exact on resume).
    The loader draws its workers' base seed from its own generator, so starting a pass leaves the global random
    state (mixup, drop-path) alone.
    """
    sampler = EpochShuffleSampler(len(images), seed, global_batch, epochs)
    return DataLoader(
        images,
        batch_size=micro_batch,
        sampler=sampler,
        drop_last=True,
        num_workers=workers,
        pin_memory=pin_memory,
        persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(seed),
        multiprocessing_context=worker_context(workers),
    )


def eval_dataloader(
    images: Dataset, batch_size: int, workers: int, pin_memory: bool = False, persistent: bool = False
) -> DataLoader:
    """In-order loader over every row (``gather_for_metrics`` drops the padding of the last batch).

    ``persistent`` keeps its workers between passes (the per-epoch validation loader).
    """
    return DataLoader(
        images,
        batch_size=batch_size,
        shuffle=False,
        num_workers=workers,
        pin_memory=pin_memory,
        persistent_workers=persistent and workers > 0,
        multiprocessing_context=worker_context(workers),
    )


def fit_batch(recipe: Recipe, train_rows: int, num_processes: int, say) -> Recipe:
    """``recipe`` with the global batch that trains: ``--batch-size``, or, where the training split holds fewer rows,
    the largest batch it fills (whole micro-batches on every process, even ones under mixup/cutmix); said in one
    line. The learning rate is not scaled: this recipe sets it per run, not per image. A split too small for even
    one batch is refused in one line that names the smallest it can take."""
    if train_rows >= recipe.batch_size:
        return recipe
    unit = num_processes * (recipe.grad_accum or 1) * (2 if recipe.mixup or recipe.cutmix else 1)
    fitted = train_rows // unit * unit
    if fitted < 1:
        raise UsageError(
            f"{train_rows} training image(s): too few to train on; the smallest training split is {unit} images "
            f"(one batch on {num_processes} process(es)), after the --val-split hold-out"
        )
    say(
        f"batch: the training split has {train_rows} images, fewer than --batch-size {recipe.batch_size}; training "
        f"with batch {fitted} ({train_rows // fitted} step(s) an epoch), the lr unchanged"
    )
    return replace(recipe, batch_size=fitted)
