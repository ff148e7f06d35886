"""Local image folders read as timm's ``ImageFolder`` reads them: one sub-folder per class, optionally under split
folders (``train/``, ``val/``, ``test/``), turned into ``datasets`` splits (:func:`read_image_folder`), and a digest
of a local dataset folder's files (:func:`dataset_files_digest`). Any other ``datasets`` source: :mod:`.sources`.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

import datasets
from datasets.data_files import SPLIT_KEYWORDS
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder
from timm.utils.misc import natural_key

from ..cli.errors import UsageError
from ..settings import dataset_source

__all__ = ["dataset_files_digest", "image_folder_files", "read_image_folder", "timm_label_order"]

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
