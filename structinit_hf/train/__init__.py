"""The training application (the ``train`` extra): settings in (:class:`TrainingSettings`), one call
(:func:`run`), a record out (:class:`RunRecord`); behind it run folders, data, the loop, checkpoints, evaluation,
fine-tuning, Hub upload and model cards. Built on the plugin; the plugin never imports it.

    from structinit_hf.train import TrainingSettings, run

    record = run(TrainingSettings().with_flags(epochs=1, max_train_samples=64, output_dir="runs/try"))
    print(record.top1, record.output_dir)

Importing this package loads only the settings; :func:`run` loads torch, accelerate and datasets when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .args import DefaultsHelpFormatter, KeyValueAction
from .errors import UsageError
from .settings import (
    SAMPLE_DATASETS,
    DataSettings,
    ModelSettings,
    Recipe,
    RunRecord,
    RunSettings,
    Speed,
    TrainingSettings,
    dataset_source,
)
from .stopping import TrainingStopped

if TYPE_CHECKING:
    from .checkpoints import find_checkpoint, read_trainer_state
    from .data import VALIDATION_SPLITS, dataset_files_digest, find_columns, load_raw_dataset, stratified_split
    from .evaluation import load_images
    from .loop import run
    from .models import load_model
    from .prepare import usable_cpus
    from .run_folder import LOCK_FILE, acquire_run_lock, result_flags

__all__ = [
    "LOCK_FILE",
    "VALIDATION_SPLITS",
    "DefaultsHelpFormatter",
    "KeyValueAction",
    "SAMPLE_DATASETS",
    "DataSettings",
    "ModelSettings",
    "Recipe",
    "RunRecord",
    "RunSettings",
    "Speed",
    "TrainingSettings",
    "TrainingStopped",
    "UsageError",
    "acquire_run_lock",
    "dataset_files_digest",
    "dataset_source",
    "find_checkpoint",
    "find_columns",
    "load_images",
    "load_model",
    "load_raw_dataset",
    "read_trainer_state",
    "result_flags",
    "run",
    "stratified_split",
    "usable_cpus",
]

# public names whose modules import torch or accelerate: loaded on first use (PEP 562)
_LAZY = {
    "run": "loop",
    "VALIDATION_SPLITS": "data",
    "dataset_files_digest": "data",
    "find_columns": "data",
    "load_raw_dataset": "data",
    "stratified_split": "data",
    "load_model": "models",
    "load_images": "evaluation",
    "find_checkpoint": "checkpoints",
    "read_trainer_state": "checkpoints",
    "LOCK_FILE": "run_folder",
    "acquire_run_lock": "run_folder",
    "result_flags": "run_folder",
    "usable_cpus": "prepare",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
