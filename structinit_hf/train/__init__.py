"""The training application (the ``train`` extra): each command a call, settings in and a record out.

    from structinit_hf.train import EvaluationSettings, TrainingSettings, evaluate, run

    record = run(TrainingSettings().with_flags(epochs=1, max_train_samples=64, output_dir="runs/try"))
    scores = evaluate(EvaluationSettings(model="runs/try/final", dataset="cifar10-sample"))
    print(record.top1, scores.top1)

:func:`run` trains (:class:`TrainingSettings` in, :class:`RunRecord` out), :func:`evaluate` scores a trained model
(:class:`EvaluationSettings`, :class:`EvaluationRecord`), :func:`push_to_hub` publishes a run
(:class:`PushSettings`, :class:`PushResult`); the commands ``structinit-hf train``, ``evaluate`` and ``push-to-hub``
only parse their command line into these settings. A value no call can use is a :class:`UsageError` (a wrong type
also a ``TypeError``) naming the setting. Built on the plugin; the plugin never imports it. What ``compare`` and the
study use beyond these names is in :mod:`._internal`.

Importing this package loads only the settings; the calls load torch, accelerate and datasets when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .cli.errors import UsageError
from .settings import (
    DataSettings,
    EvaluationRecord,
    EvaluationSettings,
    ModelSettings,
    PushSettings,
    Recipe,
    RunRecord,
    RunSettings,
    Speed,
    TrainingSettings,
)
from .training.stopping import TrainingStopped

if TYPE_CHECKING:
    from .models.evaluation import evaluate
    from .publish.hub import PushResult, push_to_hub
    from .training.loop import run

__all__ = [
    "DataSettings",
    "EvaluationRecord",
    "EvaluationSettings",
    "ModelSettings",
    "PushResult",
    "PushSettings",
    "Recipe",
    "RunRecord",
    "RunSettings",
    "Speed",
    "TrainingSettings",
    "TrainingStopped",
    "UsageError",
    "evaluate",
    "push_to_hub",
    "run",
]

# the calls and the record whose modules import torch, accelerate or huggingface_hub: loaded on first use (PEP 562)
_LAZY = {
    "run": "training.loop",
    "evaluate": "models.evaluation",
    "push_to_hub": "publish.hub",
    "PushResult": "publish.hub",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
