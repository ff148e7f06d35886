"""A dataset's ``datasets`` inputs: a Hub id (``uoft-cs/cifar10``), a local folder that :func:`datasets.load_dataset`
reads (parquet, arrow, imagefolder) or a :meth:`~datasets.Dataset.save_to_disk` folder, loaded as a ``DatasetDict``
(:func:`load_raw_dataset`; a local image folder through :mod:`.image_folders`), and its image and label columns, found
by name or feature type (:func:`find_columns`). Its splits cut for a run: :mod:`.splits`.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import datasets
from huggingface_hub import constants as hub_constants

from ..cli.errors import UsageError, did_you_mean
from ..settings import DataSettings
from .image_folders import image_folder_files, read_image_folder, timm_label_order

__all__ = [
    "IMAGE_COLUMNS",
    "LABEL_COLUMNS",
    "ensure_hub_reachable",
    "find_columns",
    "known_label_names",
    "load_raw_dataset",
]

IMAGE_COLUMNS = ("img", "image")


LABEL_COLUMNS = ("label", "labels", "fine_label")

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


def _local(dataset: str) -> bool:
    """Whether ``dataset`` names a local path, not a Hub id (``namespace/name``): it exists, starts like a path, has
    more than one ``/``, or is ``a/b`` beside a folder ``a/`` (a mistyped folder, not a Hub id)."""
    path = Path(dataset).expanduser()
    if path.exists() or dataset.startswith((".", "/", "~")) or dataset.count("/") > 1:
        return True
    return dataset.count("/") == 1 and path.parent.is_dir()


def _not_a_folder(dataset: str) -> UsageError:
    """The one line for a local ``dataset`` that is no folder: a file, or nothing, and what its parent holds."""
    path = Path(dataset).expanduser()
    if path.exists():
        return UsageError(f"dataset {dataset!r} is not a folder; pass a Hub id or a folder that datasets can load")
    parent = next((folder for folder in path.parents if folder.is_dir()), None)
    beside = ""
    if parent is not None:
        there = sorted(item.name for item in parent.iterdir() if item.is_dir() and not item.name.startswith("."))
        beside = f" ({parent}/ holds {', '.join(there[:8]) or 'no folders'}{did_you_mean(path.name, there)})"
    return UsageError(
        f"dataset folder {dataset!r} does not exist{beside}; pass a folder that datasets can load, or a Hub id whose "
        "namespace is not a local folder"
    )


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
    elif _local(dataset):
        raise _not_a_folder(dataset)
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


def known_label_names(data: DataSettings) -> list[str] | None:
    """The class names as the dataset's metadata records them (no image read), or ``None`` if it does not."""
    path = Path(data.dataset).expanduser()
    if not path.is_dir() and _local(data.dataset):
        raise _not_a_folder(data.dataset)
    if not _local(data.dataset):
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
