"""A comparison's runs: the training settings of one (arm, seed) run, its folder, and whether a finished run is it.

A run is finished when its ``results.json`` exists; a finished run is reused only if it is the run the comparison
would train now (same settings), and a run cut short resumes from its newest complete checkpoint (``resume="auto"``).
Training goes through :func:`structinit_hf.train.run` only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..train import TrainingSettings
from ..train._internal import result_flags
from .arms import Arm
from .profiles import BenchmarkDataset, Profile, arm_model_kwargs

RUN_RESULTS = "results.json"


RUN_LOG = "train.log"


RUN_TIMING = "benchmark_run.json"


RUN_SPECIFIC_ARGS = ("model", "model_kwargs", "seed", "output_dir", "resume", "dataset", "dataset_config")


NEGATABLE_FLAGS = ("compile",)  # train.py's on/off flags whose default depends on the device


def flag_values(name: str, value: Any) -> list[str]:
    flag = f"--{name.replace('_', '-')}"
    if isinstance(value, bool):  # False: the flag's --no- form where it has one (--no-compile), else nothing
        return [flag] if value else ([f"--no-{name.replace('_', '-')}"] if name in NEGATABLE_FLAGS else [])
    if isinstance(value, list | tuple):
        return [flag, *map(str, value)]
    return [flag, str(value)]


def run_settings(profile: Profile, arm: Arm, seed: int, dataset: BenchmarkDataset, run_dir: Path) -> TrainingSettings:
    """The training settings of one (arm, seed) run: the profile's recipe, the arm's model (a model-* arm's: the
    profile's), resumable (``--resume auto``: a run cut short continues from its newest complete checkpoint, bit for
    bit; a new one starts fresh)."""
    return TrainingSettings().with_flags(
        model=arm.model or profile.model,
        model_kwargs=arm_model_kwargs(arm, profile),
        dataset=dataset.dataset,
        dataset_config=dataset.config,
        **profile.recipe,
        seed=seed,
        output_dir=run_dir,
        resume="auto",
    )


def run_dir_for(runs_dir: Path, arm: Arm, seed: int) -> Path:
    return Path(runs_dir) / f"{arm.name}-seed{seed}"


def is_finished(run_dir: Path) -> bool:
    return (run_dir / RUN_RESULTS).is_file()


def changed_flags(run_dir: Path, settings: TrainingSettings) -> str:
    """The flags a finished run was trained with that ``settings`` would change, as ``--flag old (now new)``; empty
    when it is the run ``settings`` describe (the flags the device and the memory plan resolve count when set)."""
    recorded = json.loads((run_dir / RUN_RESULTS).read_text())["args"]
    wanted = result_flags(settings.flags())
    resolved = ("mixed_precision", "grad_accum")  # decided by the device and memory when left out
    changed = [
        key
        for key, value in wanted.items()
        if key != "output_dir" and recorded.get(key) != value and not (key in resolved and value is None)
    ]
    return ", ".join(f"--{key.replace('_', '-')} {recorded.get(key)} (now {wanted[key]})" for key in changed)
