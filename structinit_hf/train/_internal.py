"""What ``compare`` (:mod:`structinit_hf.benchmark`) and the repository's study use of the training application beyond
its user API (:data:`structinit_hf.train.__all__`): the run-folder lock, the dataset's columns, digest and stratified
split, checkpoints, model and image loading, the parsers' helpers. Internal: names here may change in any release.

Like the package, it loads a name's module (torch, accelerate, datasets) only when the name is first used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .args import DefaultsHelpFormatter, KeyValueAction
    from .checkpoints import find_checkpoint, read_trainer_state
    from .data import VALIDATION_SPLITS, dataset_files_digest, find_columns, load_raw_dataset, stratified_split
    from .errors import check_field_types
    from .evaluation import load_images
    from .models import load_model
    from .prepare import usable_cpus
    from .run_folder import LOCK_FILE, acquire_run_lock, result_flags
    from .settings import SAMPLE_DATASETS, dataset_source, flag_of

# name -> the module of train/ that defines it
_HOMES = {
    "DefaultsHelpFormatter": "args",
    "KeyValueAction": "args",
    "find_checkpoint": "checkpoints",
    "read_trainer_state": "checkpoints",
    "VALIDATION_SPLITS": "data",
    "dataset_files_digest": "data",
    "find_columns": "data",
    "load_raw_dataset": "data",
    "stratified_split": "data",
    "check_field_types": "errors",
    "load_images": "evaluation",
    "load_model": "models",
    "usable_cpus": "prepare",
    "LOCK_FILE": "run_folder",
    "acquire_run_lock": "run_folder",
    "result_flags": "run_folder",
    "SAMPLE_DATASETS": "settings",
    "dataset_source": "settings",
    "flag_of": "settings",
}

__all__ = [
    "DefaultsHelpFormatter",
    "KeyValueAction",
    "LOCK_FILE",
    "SAMPLE_DATASETS",
    "VALIDATION_SPLITS",
    "acquire_run_lock",
    "check_field_types",
    "dataset_files_digest",
    "dataset_source",
    "find_checkpoint",
    "find_columns",
    "flag_of",
    "load_images",
    "load_model",
    "load_raw_dataset",
    "read_trainer_state",
    "result_flags",
    "stratified_split",
    "usable_cpus",
]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(f".{_HOMES[name]}", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
