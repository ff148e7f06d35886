"""Image-classification datasets for training and evaluation: any ``datasets`` source, its columns and splits.

A dataset is a Hub id (``uoft-cs/cifar10``), a local folder that :func:`datasets.load_dataset` reads
(parquet, arrow, imagefolder) or a :meth:`~datasets.Dataset.save_to_disk` folder.  The image and label
columns are found by name or feature type, class names come from the ``ClassLabel`` feature, and a
dataset without a validation split gets a stratified one carved from its training split.  From a split to
batches (transforms, sampler, loaders): :mod:`.dataloaders`.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import datasets
import numpy as np
from datasets.data_files import SPLIT_KEYWORDS
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder
from huggingface_hub import constants as hub_constants
from timm.utils.misc import natural_key

from .errors import UsageError
from .settings import SAMPLE_DATASETS, DataSettings, dataset_source

__all__ = [
    "IMAGE_COLUMNS",
    "ImageClassificationData",
    "LABEL_COLUMNS",
    "SAMPLE_DATASETS",
    "VALIDATION_SPLITS",
    "dataset_source",
    "dataset_files_digest",
    "ensure_hub_reachable",
    "find_columns",
    "known_label_names",
    "load_image_classification",
    "image_folder_files",
    "load_raw_dataset",
    "read_image_folder",
    "stratified_split",
    "timm_label_order",
]

IMAGE_COLUMNS = ("img", "image")


LABEL_COLUMNS = ("label", "labels", "fine_label")


VALIDATION_SPLITS = ("validation", "valid", "val")


_SAVE_TO_DISK_FILES = ("dataset_dict.json", "state.json")


def ensure_hub_reachable(name: str, what: str = "dataset") -> None:
    """Fail at once, with a useful message, when ``name`` would need the Hugging Face Hub and it is out of reach.

    Without this check a hub id on an offline machine costs minutes of HTTP retries before failing.
    In offline mode (``HF_HUB_OFFLINE=1``) nothing is probed: the caller reads the local cache.
    """
    if hub_constants.HF_HUB_OFFLINE:
        return
    endpoint = urlparse(hub_constants.ENDPOINT)
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname, port), timeout=5).close()
    except OSError as error:
        raise ConnectionError(_offline_message(name, what, f"{endpoint.hostname} is unreachable: {error}")) from None


def _offline_message(name: str, what: str, reason: str) -> str:
    local = (
        "a local folder (parquet, arrow, imagefolder or save_to_disk)"
        if what == "dataset"
        else "a local checkpoint folder"
    )
    return f"cannot load {what} {name!r} from the Hugging Face Hub ({reason}); pass {local} instead"


def _is_save_to_disk_folder(path: Path) -> bool:
    return any((path / name).is_file() for name in _SAVE_TO_DISK_FILES)


# a top-level folder named for a split (any case, a separator and more may follow: Train/, training_set/, val-2024/)
# holds that split, as datasets names it: train, validation or test
_SPLIT_OF_KEYWORD = {keyword: str(split) for split, keywords in SPLIT_KEYWORDS.items() for keyword in keywords}
_SPLIT_FOLDER = re.compile(rf"({'|'.join(sorted(_SPLIT_OF_KEYWORD, key=len, reverse=True))})([-._ 0-9].*)?", re.I)
_IMAGE_EXTENSIONS = frozenset(extension.lower() for extension in ImageFolder.EXTENSIONS)
_DATA_FILES = (".parquet", ".arrow", ".csv", ".jsonl", ".json")
_DATASETS_CACHE_FILES = ("cache-", "tmp")  # what datasets' map, filter and shuffle may write into a folder


def _skipped(name: str) -> bool:
    """Hidden files and folders (``.DS_Store``, macOS's ``._photo.jpg``) and ``__``-prefixed folders (a zip's
    ``__MACOSX/``), which ``datasets`` skips too."""
    return name.startswith((".", "__"))


def _visible(path: Path) -> list[Path]:
    """The entries of a folder that are not :func:`_skipped`."""
    return sorted(entry for entry in path.iterdir() if not _skipped(entry.name))


def _images(path: Path) -> list[Path]:
    """The images directly in a folder."""
    return [entry for entry in _visible(path) if entry.suffix.lower() in _IMAGE_EXTENSIONS and entry.is_file()]


def _files_below(folder: Path) -> list[Path]:
    """Every file below ``folder`` that is not :func:`_skipped`, symbolic links to folders followed (as timm's
    ``ImageFolder`` does) except one that leads back to a folder it is in (a loop)."""
    found = []
    for root, folders, files in os.walk(folder, followlinks=True):
        here = Path(root)
        above = {os.path.realpath(path) for path in (here, *here.parents) if path == folder or folder in path.parents}
        folders[:] = [name for name in folders if not _skipped(name) and os.path.realpath(here / name) not in above]
        found.extend(here / name for name in files if not _skipped(name))
    return sorted(found)


def _split_of(name: str) -> str | None:
    match = _SPLIT_FOLDER.fullmatch(name)
    return _SPLIT_OF_KEYWORD[match.group(1).lower()] if match else None


def image_folder_files(folder: Path) -> dict[str, dict[str, list[Path]]] | None:
    """The images of a local image folder, ``{split: {class: [image, ...]}}``, or ``None`` for a folder that is not
    one (no image, or data files that ``datasets`` reads: parquet, arrow, csv, json).

    An image folder is one sub-folder per class with its images directly inside, optionally under split folders:
    a folder whose every sub-folder with images is named for a split (``train/``, ``Test/``, ``training_set/``,
    ``val/``, any case) holds the splits (a split folder without images is no split), otherwise the folder is one
    ``train`` split. Only the top level names splits: a class
    named ``train`` or ``test_tube``, or a file named ``fox_train_1.jpg``, stays what it is. Symbolic links are
    followed and hidden files skipped, as timm's ``ImageFolder`` does. Refused in one line naming the file or folder:
    an image outside any class folder, a sub-folder inside a class (``datasets`` would label ``cat/indoor/1.jpg``
    ``indoor``), a class folder without images, a folder mixing split folders with others, two folders for one
    split (and, in :func:`read_image_folder`, a single class)."""
    files = _files_below(folder)
    if any(path.suffix.lower() in _DATA_FILES for path in files) or not any(
        path.suffix.lower() in _IMAGE_EXTENSIONS for path in files
    ):
        return None
    holding = {path.relative_to(folder).parts[0] for path in files if path.suffix.lower() in _IMAGE_EXTENSIONS}
    top = [entry for entry in _visible(folder) if entry.name in holding and entry.is_dir()]  # folders with images
    splits = {entry: _split_of(entry.name) for entry in top}
    if top and all(splits.values()):
        _refuse_loose_images(folder, folder, "its split folders")
        roots: dict[str, Path] = {}
        for entry, split in splits.items():
            if split in roots:
                raise UsageError(
                    f"--dataset {folder}: the folders {roots[split].name}/ and {entry.name}/ both hold the {split} "
                    "split; merge them, or rename one"
                )
            roots[split] = entry
    else:
        named = [entry.name for entry, split in splits.items() if split and not _images(entry)]  # images below only
        if named:
            others = [entry.name for entry, split in splits.items() if entry.name not in named]
            raise UsageError(
                f"--dataset {folder}: the folder mixes split folders ({', '.join(named)}) with class folders "
                f"({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); put every class folder in a split "
                "folder, or rename the split folders"
            )
        roots = {"train": folder}
    return {split: _class_images(folder, root, by_split=root != folder) for split, root in roots.items()}


def _refuse_loose_images(folder: Path, root: Path, where: str) -> None:
    stray = _images(root)
    if stray:
        more = f" (and {len(stray) - 1} more)" if len(stray) > 1 else ""
        raise UsageError(
            f"--dataset {folder}: the image {stray[0].relative_to(folder)}{more} is not in a class folder; an image "
            f"folder holds one sub-folder per class directly in {where}, each image in its class's: move it into "
            "one, or remove it"
        )


def _class_images(folder: Path, root: Path, by_split: bool) -> dict[str, list[Path]]:
    """``{class: [image, ...]}`` of the class folders in ``root`` (``folder`` or one of its split folders)."""
    _refuse_loose_images(folder, root, "its split folders" if by_split else "the folder")
    classes, empty = {}, []
    for class_folder in (entry for entry in _visible(root) if entry.is_dir()):
        nested = [
            path
            for sub in _visible(class_folder)
            if sub.is_dir()
            for path in _files_below(sub)
            if path.suffix.lower() in _IMAGE_EXTENSIONS
        ]
        if nested:
            depth = len(nested[0].relative_to(folder).parts) - 1 - by_split
            more = f" (and {len(nested) - 1} more)" if len(nested) > 1 else ""
            raise UsageError(
                f"--dataset {nested[0].parent}: a sub-folder {depth} levels deep (its image "
                f"{nested[0].relative_to(folder)}{more}); an image folder takes images directly in their class folder "
                f"(1 level deep): move them up into {class_folder.name}/, or make each sub-folder a class folder of "
                "its own"
            )
        images = _images(class_folder)
        if images:
            classes[class_folder.name] = images
        else:
            empty.append(str(class_folder.relative_to(folder)))
    if empty:
        raise UsageError(
            f"--dataset {folder}: the class folder(s) {', '.join(empty)} hold no images; add images or remove them "
            "(a class without images cannot be learnt)"
        )
    return classes


def read_image_folder(folder: Path) -> datasets.DatasetDict | None:
    """A local image folder (:func:`image_folder_files`) as ``datasets`` splits with ``image`` and ``label`` columns,
    its classes numbered as timm's ``ImageFolder`` numbers them (:func:`timm_label_order`, over every split's class
    names); ``None`` for a folder that is not an image folder. Images are read when a row is."""
    folder = folder.expanduser().absolute()  # rows that do not depend on the working folder
    splits = image_folder_files(folder)
    if splits is None:
        return None
    names = timm_label_order({name for classes in splits.values() for name in classes})
    if len(names) < 2:
        raise UsageError(
            f"--dataset {folder}: one class folder ({names[0]}); an image folder needs one sub-folder per class, "
            "at least 2"
        )
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=names)})
    label, loaded = {name: index for index, name in enumerate(names)}, {}
    for split, classes in splits.items():
        rows = sorted((str(path), label[name]) for name, paths in classes.items() for path in paths)
        images, labels = zip(*rows, strict=True)
        loaded[split] = datasets.Dataset.from_dict({"image": list(images), "label": list(labels)}, features=features)
    return datasets.DatasetDict(loaded)


def dataset_files_digest(dataset: str) -> str | None:
    """A digest of a local dataset folder's files (each one's path and size, less the cache files ``datasets`` writes
    beside a ``save_to_disk`` folder's data and links that lead nowhere), ``None`` for a Hub id: a folder whose files
    were added, removed or changed in size since a run read it gets another digest (``compare`` then refuses to
    reuse the run)."""
    path = Path(dataset_source(dataset)).expanduser()
    if not path.is_dir():
        return None
    digest = hashlib.sha256()
    for file in _files_below(path):
        if file.name.startswith(_DATASETS_CACHE_FILES):
            continue
        try:
            size = file.stat().st_size
        except OSError:  # a broken link: no image either
            continue
        digest.update(f"{file.relative_to(path).as_posix()}\0{size}\n".encode())
    return digest.hexdigest()[:16]


def timm_label_order(names: Sequence[str]) -> list[str]:
    """Class names in the order timm's ``ImageFolder`` numbers class folders (``natural_key``: numbers by value,
    letters without case), so a run scores the same through timm's ``validate.py`` as through ``evaluate``."""
    return sorted(names, key=natural_key)


def load_raw_dataset(dataset: str, config: str | None = None) -> datasets.DatasetDict:
    """Load ``dataset`` (Hub id, local data folder or ``save_to_disk`` folder) as a ``DatasetDict``.

    A local image folder is read as timm's ``ImageFolder`` reads it (:func:`read_image_folder`)."""
    path = Path(dataset).expanduser()
    if path.is_dir():
        if _is_save_to_disk_folder(path):
            loaded = datasets.load_from_disk(str(path))
        else:
            loaded = read_image_folder(path)
            if loaded is None:
                loaded = datasets.load_dataset(str(path), name=config)
    elif path.exists() or dataset.startswith((".", "/", "~")):
        raise ValueError(f"dataset {dataset!r} is not a folder; pass a Hub id or a folder that datasets can load")
    else:
        ensure_hub_reachable(dataset)
        try:
            loaded = datasets.load_dataset(dataset, name=config)
        except ConnectionError as error:  # offline mode and not in the local cache
            raise ConnectionError(_offline_message(dataset, "dataset", str(error))) from None
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({"train": loaded})
    if not isinstance(loaded, datasets.DatasetDict):
        raise TypeError(f"dataset {dataset!r} loaded as {type(loaded).__name__}; expected a map-style DatasetDict")
    return loaded


def _pick_column(
    features: datasets.Features, names: Sequence[str], feature_type: type, what: str, flag: str, explicit: str | None
) -> str:
    if explicit is not None:
        if explicit not in features:
            raise UsageError(f"{flag} {explicit!r}: no such column; the dataset has columns {', '.join(features)}")
        if not _holds(features[explicit], feature_type):
            fitting = [name for name, feature in features.items() if _holds(feature, feature_type)]
            raise UsageError(
                f"{flag} {explicit!r}: that column holds {_describe(features[explicit])}, not {what}s; "
                f"{'columns that do: ' + ', '.join(fitting) if fitting else 'no column does'}"
            )
        return explicit
    for name in names:
        if name in features:
            return name
    typed = [name for name, feature in features.items() if isinstance(feature, feature_type)]
    if len(typed) == 1:
        return typed[0]
    if feature_type is datasets.ClassLabel and list(features) == [
        name for name in features if _holds(features[name], datasets.Image)
    ]:  # only images: datasets' imagefolder drops the labels of a folder with a single class sub-folder
        raise UsageError(
            f"the dataset has images but no labels (columns: {', '.join(features)}); an image folder needs one "
            "sub-folder per class, at least 2"
        )
    raise ValueError(
        f"cannot tell which column holds the {what}s (looked for {', '.join(names)} or a single "
        f"{feature_type.__name__} feature) among {', '.join(features)}; set it with {flag}"
    )


def _holds(feature: Any, feature_type: type) -> bool:
    """Whether a column of ``feature`` can serve as the image (an ``Image``) or label column (a ``ClassLabel``
    or integer value)."""
    if feature_type is datasets.ClassLabel and isinstance(feature, datasets.Value):
        return feature.dtype.startswith(("int", "uint"))
    return isinstance(feature, feature_type)


def _describe(feature: Any) -> str:
    if isinstance(feature, datasets.Value):
        return f"{feature.dtype} values"
    return type(feature).__name__


def find_columns(
    features: datasets.Features, image_column: str | None = None, label_column: str | None = None
) -> tuple[str, str]:
    """Return the ``(image, label)`` column names: the given ones, else ``img``/``image`` and
    ``label``/``labels``/``fine_label``, else the one ``Image`` / ``ClassLabel`` feature.

    A given column must hold what it is named for: images (an ``Image`` feature), or labels (a ``ClassLabel`` or
    integers)."""
    image = _pick_column(features, IMAGE_COLUMNS, datasets.Image, "image", "--image-column", image_column)
    label = _pick_column(features, LABEL_COLUMNS, datasets.ClassLabel, "label", "--label-column", label_column)
    return image, label


def _label_names(split: datasets.Dataset, label_column: str) -> list[str]:
    feature = split.features[label_column]
    if isinstance(feature, datasets.ClassLabel):
        return list(feature.names)
    values = np.unique(np.asarray(split[label_column]))
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
        keep, held_out = stratified_split(train[label_column], val_split, seed)
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
    labels = np.asarray(split[label_column], dtype=np.int64)
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


def known_label_names(data: DataSettings) -> list[str] | None:
    """The class names as the dataset's metadata records them (no image read), or ``None`` if it does not."""
    path = Path(data.dataset).expanduser()
    if not path.exists() and not data.dataset.startswith((".", "/", "~")):
        ensure_hub_reachable(data.dataset)  # an unreachable Hub fails at once, as loading it would
    try:
        image_folder = image_folder_files(path) if path.is_dir() and not _is_save_to_disk_folder(path) else None
        if image_folder is not None:
            return timm_label_order({name for classes in image_folder.values() for name in classes})
        if path.is_dir() and _is_save_to_disk_folder(path):
            loaded = datasets.load_from_disk(str(path))  # memory-mapped: nothing decoded
            split = loaded[data.train_split] if isinstance(loaded, datasets.DatasetDict) else loaded
            features = split.features
        else:
            source = str(path) if path.is_dir() else data.dataset
            features = datasets.load_dataset_builder(source, name=data.dataset_config).info.features
        _, label = find_columns(features, data.image_column, data.label_column)
    except Exception:  # noqa: BLE001  no usable metadata: the labels come from the loaded dataset instead
        return None
    feature = features[label]
    return list(feature.names) if isinstance(feature, datasets.ClassLabel) else None
