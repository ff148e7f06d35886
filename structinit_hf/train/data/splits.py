"""Image-classification datasets for training and evaluation: a dataset's splits cut and named for a run.

The dataset is loaded by :mod:`.sources` (any ``datasets`` source, its image and label columns) and class names come
from the ``ClassLabel`` feature; a dataset without a validation split gets a stratified one carved from its training
split. From a split to batches (transforms, sampler, loaders): :mod:`.dataloaders`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import datasets
import numpy as np

from ..cli.errors import UsageError
from .sources import find_columns, load_raw_dataset

__all__ = [
    "ImageClassificationData",
    "VALIDATION_SPLITS",
    "check_trained_classes",
    "class_counts",
    "load_image_classification",
    "stratified_split",
]

VALIDATION_SPLITS = ("validation", "valid", "val")


def column_values(split: datasets.Dataset, column: str) -> np.ndarray:
    """Every value of ``column`` as one array, read at once: ``np.asarray(split[column])`` reads a ``datasets``
    Column row by row (about 2 s for CIFAR-10's 50,000 labels, several times in a run's set-up)."""
    return np.asarray(split[column][:])


def _label_names(split: datasets.Dataset, label_column: str) -> list[str]:
    feature = split.features[label_column]
    if isinstance(feature, datasets.ClassLabel):
        return list(feature.names)
    values = np.unique(column_values(split, label_column))
    if not np.issubdtype(values.dtype, np.integer) or values.min() < 0:
        raise ValueError(
            f"label column {label_column!r} holds {values.dtype} values {values[:5].tolist()}...; expected a "
            "ClassLabel feature or integer class ids 0..K-1"
        )
    return [str(index) for index in range(int(values.max()) + 1)]


def stratified_split(labels: Sequence[int], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Split row indices into ``(keep, held_out)`` with ``fraction`` of every class held out.

    Each class with at least two rows gives at least one held-out row; the split depends only on
    ``labels``, ``fraction`` and ``seed``.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the validation fraction must be in (0, 1), got {fraction}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    held_out = []
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        count = min(len(rows) - 1, max(1, round(fraction * len(rows))))
        held_out.extend(rng.permutation(rows)[:count].tolist())
    held_out_set = set(held_out)
    return [i for i in range(len(labels)) if i not in held_out_set], sorted(held_out)


@dataclass
class ImageClassificationData:
    """The splits of one image-classification dataset, cut and named for a training run.

    ``train`` is the training split (minus any carved validation rows), ``validation`` the split
    scored after every epoch, ``evaluation`` the split scored at the end (``evaluation_split`` names it).
    """

    train: datasets.Dataset | None
    validation: datasets.Dataset | None
    evaluation: datasets.Dataset
    evaluation_split: str
    validation_split: str
    image_column: str
    label_column: str
    label_names: list[str]
    source_sizes: tuple[tuple[int, int], tuple[int, int]] | None = None  # (width, height) smallest and largest read
    held_out_fraction: float | None = None  # of the training split's rows, when the validation split was carved
    files_digest: str | None = None  # of the local folder read (:func:`dataset_files_digest`), on the main process

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    def images_per_class(self) -> dict[str, dict[str, int]]:
        """Images of each class in each split: ``{split name: {class name: count}}`` (train, validation,
        evaluation)."""
        named = {"train": self.train, self.validation_split: self.validation, self.evaluation_split: self.evaluation}
        return {
            name: dict(zip(self.label_names, class_counts(split, self.label_column, self.num_classes), strict=True))
            for name, split in named.items()
            if split is not None
        }

    def describe_inputs(self, input_size: Sequence[int]) -> str:
        """What a run trains and scores on, in one line: input resolution, the sizes it was resized from, images per
        class per split and the fraction actually held out."""
        height, width = input_size[-2:]
        words = [f"input {width}x{height} px"]
        if self.source_sizes is not None:
            (w0, h0), (w1, h1) = self.source_sizes
            words[0] += (
                f" (resized from {w0}x{h0})" if (w0, h0) == (w1, h1) else f" (resized from {w0}x{h0} to {w1}x{h1})"
            )
        spans = []
        for name, counts in self.images_per_class().items():
            low, high = min(counts.values(), default=0), max(counts.values(), default=0)
            spans.append(f"{name} {low}" if low == high else f"{name} {low} to {high}")
        words.append(f"images per class: {', '.join(spans)}")
        if self.held_out_fraction is not None:
            words.append(f"{self.held_out_fraction:.1%} of the training images held out for validation")
        return "; ".join(words)


def _split_named(raw: datasets.DatasetDict, name: str | None, what: str) -> datasets.Dataset:
    if name not in raw:
        raise ValueError(f"{what} split {name!r} not found; the dataset has splits {', '.join(raw)}")
    return raw[name]


def _scored_rows(split: datasets.Dataset, limit: int | None) -> datasets.Dataset:
    """``limit`` rows of a scored split drawn at random, kept in the split's order, the same rows in every run:
    an image folder's rows are sorted by class, and its first rows would score its first classes only."""
    if limit is None or limit >= len(split):
        return split
    return split.select(np.sort(np.random.default_rng(0).permutation(len(split))[:limit]))


def _validation_split(
    raw: datasets.DatasetDict,
    train: datasets.Dataset | None,
    train_split: str | None,
    val_split: float,
    label_column: str,
    seed: int,
) -> tuple[datasets.Dataset | None, datasets.Dataset | None, str | None]:
    """``(train, validation, validation name)``: the dataset's own validation split (``validation``, ``valid`` or
    ``val``), else ``val_split`` of the training rows held out, stratified by class; no validation split without
    either."""
    name = next((name for name in VALIDATION_SPLITS if name in raw), None)
    if name is not None:
        return train, raw[name], name
    if train is not None and val_split > 0:
        keep, held_out = stratified_split(column_values(train, label_column), val_split, seed)
        if not held_out:
            raise ValueError(
                f"--val-split {val_split:g} holds out no image of the {len(train)} in {train_split!r}: a class needs 2 "
                "images to hold one out; the smallest dataset without a test split has 2 images in some class"
            )
        return train.select(keep), train.select(held_out), f"{train_split}[held-out {val_split:g}]"
    return train, None, None


def load_image_classification(
    dataset: str,
    config: str | None = None,
    *,
    train_split: str | None = "train",
    eval_split: str | None = None,
    val_split: float = 0.1,
    image_column: str | None = None,
    label_column: str | None = None,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    seed: int = 0,
) -> ImageClassificationData:
    """Load ``dataset`` and arrange its splits for training (``train_split``) and scoring (``eval_split``).

    The per-epoch validation split is the dataset's own (``validation``, ``valid`` or ``val``); without
    one, ``val_split`` (a fraction) of the training rows is held out, stratified by class, and with
    ``val_split=0`` the evaluation split is used.  ``eval_split`` defaults to ``test``, else the
    validation split.  ``train_split=None`` loads only what evaluation needs.  ``max_train_samples``
    keeps a seeded random subset of the training rows, ``max_eval_samples`` a random subset of the
    validation and evaluation splits, the same rows whatever the seed.
    """
    if not 0.0 <= val_split < 1.0:
        raise ValueError(f"val_split must be a fraction in [0, 1), got {val_split}")
    for name, limit in (("max_train_samples", max_train_samples), ("max_eval_samples", max_eval_samples)):
        if limit is not None and limit < 1:
            raise ValueError(f"{name} must be a positive int, got {limit}")
    raw = load_raw_dataset(dataset, config)
    first = raw[train_split] if train_split in raw else next(iter(raw.values()))
    image, label = find_columns(first.features, image_column, label_column)
    raw = datasets.DatasetDict({name: split.select_columns([image, label]) for name, split in raw.items()})

    train = _split_named(raw, train_split, "train") if train_split is not None else None
    if train is not None:
        check_trained_classes(raw, train_split, label, _label_names(train, label))
    rows = len(train) if train is not None else 0
    train, validation, validation_name = _validation_split(raw, train, train_split, val_split, label, seed)
    held_out = len(validation) / rows if train is not None and "held-out" in (validation_name or "") else None
    if eval_split is None:
        eval_split = "test" if "test" in raw else validation_name
    if eval_split is None:
        only = next(iter(raw)) if len(raw) == 1 else None
        fits = (
            f"--eval-split {only} (every image, those trained on included) or --val-split 0.1"
            if only
            else (f"--eval-split with one of {', '.join(raw)}")
        )
        raise UsageError(
            f"no split to evaluate on: the dataset has splits {', '.join(raw)} and no test or validation split; "
            f"pass {fits}"
        )
    evaluation = validation if eval_split == validation_name else _split_named(raw, eval_split, "evaluation")
    if validation is None:
        validation, validation_name = evaluation, eval_split

    if train is not None and max_train_samples is not None and max_train_samples < len(train):
        train = train.shuffle(seed=seed, keep_in_memory=True).select(range(max_train_samples))  # no cache file
    return ImageClassificationData(
        train=train,
        validation=_scored_rows(validation, max_eval_samples),
        evaluation=_scored_rows(evaluation, max_eval_samples),
        evaluation_split=eval_split,
        validation_split=validation_name,
        image_column=image,
        label_column=label,
        label_names=_label_names(train if train is not None else evaluation, label),
        held_out_fraction=held_out,
    )


def class_counts(split: datasets.Dataset, label_column: str, num_classes: int) -> list[int]:
    """How many rows of ``split`` each class id ``0 .. num_classes - 1`` has."""
    labels = column_values(split, label_column).astype(np.int64)
    return np.bincount(labels, minlength=num_classes)[:num_classes].tolist()


def check_trained_classes(raw: datasets.DatasetDict, train_split: str, label_column: str, names: list[str]) -> None:
    """Refuse, in one line, classes that have images in another split but none in ``train_split``: the model would
    have an output for them that no image trained (a class present only in ``test/``)."""
    trained = class_counts(raw[train_split], label_column, len(names))
    for name, split in raw.items():
        if name == train_split:
            continue
        counts = class_counts(split, label_column, len(names))
        missing = [names[k] for k in range(len(names)) if trained[k] == 0 and counts[k] > 0]
        if missing:
            raise UsageError(
                f"class(es) {', '.join(map(repr, missing))}: images in the {name!r} split but none in "
                f"{train_split!r}; a model cannot learn a class it never sees: add training images, or remove the class"
            )
