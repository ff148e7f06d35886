"""What ``compare`` (:mod:`structinit_hf.benchmark`) and the repository's study use of the training application beyond
its user API (:data:`structinit_hf.train.__all__`): the run-folder lock, the dataset's columns, digest and stratified
split, checkpoints, model and image loading, the parsers' helpers; and what the study's scripts reach: the scripts'
runner, the loaders, the device's defaults, the memory plan's figures, the Hub folder's staging. Internal: names here
may change in any release.

Like the package, it loads a name's module (torch, accelerate, datasets) only when the name is first used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cli.args import DefaultsHelpFormatter, KeyValueAction
    from .cli.commands import run_script, script_imports
    from .cli.errors import check_field_types
    from .cli.settings_checks import check_run_args
    from .data.dataloaders import train_dataloader
    from .data.image_folders import dataset_files_digest
    from .data.images import rgb_image
    from .data.sources import find_columns, load_raw_dataset
    from .data.splits import VALIDATION_SPLITS, load_image_classification, stratified_split
    from .data.tensor_data import training_datasets
    from .models.evaluation import library_versions, load_images, numerics
    from .models.kwargs import check_model_kwargs, user_init_options
    from .models.loading import load_model, model_data_config
    from .publish.hub import ATTENTION_IMAGE, CARD_FILE, stage_repo_folder
    from .settings import SAMPLE_DATASETS, dataset_source, flag_of
    from .training.checkpoints import find_checkpoint, read_trainer_state
    from .training.memory_plan import STEP_OVERHEAD, saved_bytes_per_image
    from .training.prepare import device_defaults, native_bf16, setup_run, usable_cpus
    from .training.run_folder import LOCK_FILE, acquire_run_lock, result_flags

# name -> the module of train/ that defines it
_HOMES = {
    "DefaultsHelpFormatter": "cli.args",
    "KeyValueAction": "cli.args",
    "run_script": "cli.commands",
    "script_imports": "cli.commands",
    "check_field_types": "cli.errors",
    "check_run_args": "cli.settings_checks",
    "train_dataloader": "data.dataloaders",
    "dataset_files_digest": "data.image_folders",
    "rgb_image": "data.images",
    "find_columns": "data.sources",
    "load_raw_dataset": "data.sources",
    "VALIDATION_SPLITS": "data.splits",
    "load_image_classification": "data.splits",
    "stratified_split": "data.splits",
    "training_datasets": "data.tensor_data",
    "library_versions": "models.evaluation",
    "load_images": "models.evaluation",
    "numerics": "models.evaluation",
    "check_model_kwargs": "models.kwargs",
    "user_init_options": "models.kwargs",
    "load_model": "models.loading",
    "model_data_config": "models.loading",
    "ATTENTION_IMAGE": "publish.hub",
    "CARD_FILE": "publish.hub",
    "stage_repo_folder": "publish.hub",
    "SAMPLE_DATASETS": "settings",
    "dataset_source": "settings",
    "flag_of": "settings",
    "find_checkpoint": "training.checkpoints",
    "read_trainer_state": "training.checkpoints",
    "STEP_OVERHEAD": "training.memory_plan",
    "saved_bytes_per_image": "training.memory_plan",
    "device_defaults": "training.prepare",
    "native_bf16": "training.prepare",
    "setup_run": "training.prepare",
    "usable_cpus": "training.prepare",
    "LOCK_FILE": "training.run_folder",
    "acquire_run_lock": "training.run_folder",
    "result_flags": "training.run_folder",
}

__all__ = [
    "ATTENTION_IMAGE",
    "CARD_FILE",
    "DefaultsHelpFormatter",
    "KeyValueAction",
    "LOCK_FILE",
    "SAMPLE_DATASETS",
    "STEP_OVERHEAD",
    "VALIDATION_SPLITS",
    "acquire_run_lock",
    "check_field_types",
    "check_model_kwargs",
    "check_run_args",
    "dataset_files_digest",
    "dataset_source",
    "device_defaults",
    "find_checkpoint",
    "find_columns",
    "flag_of",
    "library_versions",
    "load_image_classification",
    "load_images",
    "load_model",
    "load_raw_dataset",
    "model_data_config",
    "native_bf16",
    "numerics",
    "read_trainer_state",
    "result_flags",
    "rgb_image",
    "run_script",
    "saved_bytes_per_image",
    "script_imports",
    "setup_run",
    "stage_repo_folder",
    "stratified_split",
    "train_dataloader",
    "training_datasets",
    "usable_cpus",
    "user_init_options",
]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(f".{_HOMES[name]}", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
