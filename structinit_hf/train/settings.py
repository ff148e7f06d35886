"""The settings of a training run, in and out: :class:`TrainingSettings` (what :func:`structinit_hf.train.run` trains)
and :class:`RunRecord` (what it returns); likewise :class:`EvaluationSettings` and :class:`EvaluationRecord` for
:func:`~structinit_hf.train.evaluate`, and :class:`PushSettings` for :func:`~structinit_hf.train.push_to_hub`.

One frozen group per part of a run (model, data, recipe, speed, run); each field is the ``dest`` of one flag of
``structinit-hf train`` and its default is that flag's default (``tests/test_cli.py`` checks both), so a notebook, the
command line (:mod:`.args` builds these from argv) and ``compare`` describe a run the same way::

    from structinit_hf.train import TrainingSettings, run

    settings = TrainingSettings().with_flags(epochs=1, max_train_samples=64, model_kwargs={"depth": 1})
    record = run(settings)  # record.top1, record.output_dir, record.results (its results.json)

Every field's value is checked against its annotation when the settings are made (the constructors and ``with_flags``
alike): ``epochs=True``, ``lr="1e-3"``, ``epochs=1.5`` or ``model_kwargs=["depth=1"]`` is one ``TypeError`` naming the
setting, its flag, the value and what is allowed, before anything runs (:mod:`.settings_checks` checks the ranges).
What the device and the memory plan decide for the fields left ``None`` is recorded beside them, never written back.
This module imports nothing heavier than the standard library.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .cli.errors import check_field_types

__all__ = [
    "INPUT_PIPELINES",
    "SAMPLE_DATASETS",
    "DataSettings",
    "EvaluationRecord",
    "EvaluationSettings",
    "ModelSettings",
    "PushSettings",
    "Recipe",
    "RunRecord",
    "RunSettings",
    "Speed",
    "TrainingSettings",
    "dataset_source",
]

# the embedded datasets, by the name ``--dataset`` takes
SAMPLE_DATASETS = {"cifar10-sample": Path(__file__).parents[1] / "samples" / "cifar10"}


INPUT_PIPELINES = ("auto", "tensor", "pil")  # tensor: decode once, augment uint8 tensors; pil: timm's PIL transforms


def dataset_source(value: str) -> str:
    """``--dataset``'s value as the loaders take it: the name of an embedded sample becomes its folder."""
    return str(SAMPLE_DATASETS[value]) if value in SAMPLE_DATASETS else value


def flag_of(name: str) -> str:
    """The ``train`` flag of a setting: ``--`` and its name with dashes (``model_kwargs`` -> ``--model-kwargs``)."""
    return "--" + name.replace("_", "-")


class _Flags:
    """A group of flags: each field's type checked against its annotation as the group is made, then lists frozen
    into tuples and dicts copied (a frozen dataclass is frozen only one level deep)."""

    def __post_init__(self) -> None:
        check_field_types(self, flag_of)
        for item in fields(self):  # type: ignore[arg-type]
            value = getattr(self, item.name)
            if isinstance(value, (list, dict)):
                object.__setattr__(self, item.name, tuple(value) if isinstance(value, list) else dict(value))


@dataclass(frozen=True)
class ModelSettings(_Flags):
    """Which network: a timm name, a checkpoint folder or a Hub id, and its builder keywords."""

    model: str = "vit_tiny_impulse3"
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    trust_remote_code: bool = False
    allow_new_label_names: bool = False


@dataclass(frozen=True)
class DataSettings(_Flags):
    """Which dataset, its columns, and which rows train, validate and are scored."""

    dataset: str = "cifar10-sample"
    dataset_config: str | None = None
    image_column: str | None = None
    label_column: str | None = None
    max_eval_samples: int | None = None
    train_split: str = "train"
    eval_split: str | None = None
    val_split: float = 0.1
    max_train_samples: int | None = None
    skip_bad_images: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "dataset", dataset_source(self.dataset))  # the folder of an embedded sample


@dataclass(frozen=True)
class Recipe(_Flags):
    """Batch, optimizer, schedule, augmentation and EMA: what decides the trained weights (the paper's CIFAR recipe)."""

    epochs: int = 200
    batch_size: int = 512
    grad_accum: int | None = None  # None: the fewest micro-batches that fit the memory (the plan decides)
    opt: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.01
    opt_eps: float = 1e-3
    warmup_epochs: float = 10.0
    warmup_lr: float = 1e-6
    min_lr: float = 1e-5
    label_smoothing: float = 0.1
    clip_grad: float = 3.0
    aa: str = "rand-m9-mstd0.5"
    hflip: float = 0.5
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    reprob: float = 0.0
    mixup: float = 0.0
    cutmix: float = 0.0
    model_ema: bool = False
    model_ema_decay: float = 0.9998

    def augmentation(self) -> dict[str, Any]:
        """The training-only transform arguments, as timm's ``create_transform`` names them."""
        return dict(
            auto_augment=None if self.aa == "none" else self.aa,
            hflip=self.hflip,
            scale=self.scale,
            ratio=self.ratio,
            re_prob=self.reprob,
        )


@dataclass(frozen=True)
class Speed(_Flags):
    """How fast it runs; None is left to the device (:func:`structinit_hf.train.training.prepare.device_defaults`)."""

    workers: int | None = None
    mixed_precision: str | None = None
    compile: bool | None = None
    eval_batch_size: int | None = None
    input_pipeline: str = "auto"


@dataclass(frozen=True)
class RunSettings(_Flags):
    """Where the run writes, its seed, checkpoints, resume and logging."""

    output_dir: Path | None = None
    seed: int = 0
    checkpoint_every: int = 1
    checkpoint_steps: int | None = None  # also every N optimizer steps inside an epoch
    checkpoint_minutes: float | None = None  # also once M minutes have passed since the last checkpoint
    keep_checkpoints: int = 2
    resume: str | None = None
    report_to: str = "none"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.output_dir is not None:
            object.__setattr__(self, "output_dir", Path(self.output_dir))


_GROUPS = {"model": ModelSettings, "data": DataSettings, "recipe": Recipe, "speed": Speed, "run": RunSettings}


@dataclass(frozen=True)
class TrainingSettings:
    """A training run, grouped: built once (from flags or argv) and never changed; two runs are the same run when
    their settings are equal."""

    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    recipe: Recipe = field(default_factory=Recipe)
    speed: Speed = field(default_factory=Speed)
    run: RunSettings = field(default_factory=RunSettings)

    def __post_init__(self) -> None:
        check_field_types(self)

    @classmethod
    def flag_names(cls) -> dict[str, str]:
        """Every flag's ``dest`` -> the group that holds it."""
        return {item.name: group for group, kind in _GROUPS.items() for item in fields(kind)}

    def with_flags(self, **flags: Any) -> TrainingSettings:
        """These settings with some flags changed, each by its ``dest`` (``epochs=1, model_kwargs={"depth": 1}``);
        an unknown name is a ``TypeError`` naming it."""
        owners = self.flag_names()
        unknown = sorted(set(flags) - set(owners))
        if unknown:
            raise TypeError(f"not training flags: {', '.join(unknown)}; allowed: {', '.join(owners)}")
        changes: dict[str, dict[str, Any]] = {}
        for name, value in flags.items():
            changes.setdefault(owners[name], {})[name] = value
        return replace(self, **{group: replace(getattr(self, group), **values) for group, values in changes.items()})

    def flags(self, **resolved: Any) -> dict[str, Any]:
        """Every flag by its dest, as JSON values; ``resolved`` replaces the ones the device or the memory plan decided
        (``mixed_precision``, ``grad_accum``): what ``results.json``, the trackers and the resume check record."""
        flat = {name: value for group in fields(self) for name, value in asdict(getattr(self, group.name)).items()}
        unknown = set(resolved) - set(flat)
        if unknown:
            raise KeyError(f"not flags: {sorted(unknown)}")
        return json.loads(json.dumps({**flat, **resolved}, default=str))


class _Scores:
    """Top-1 and top-5 (percent) on the scored split, read from a record's ``results``."""

    results: dict[str, Any]

    @property
    def top1(self) -> float:
        return self.results["top1"]

    @property
    def top5(self) -> float:
        return self.results["top5"]


@dataclass(frozen=True)
class RunRecord(_Scores):
    """What a finished training run returns: its folder and its ``results.json`` record (flags, init, scores)."""

    output_dir: Path
    results: dict[str, Any]


@dataclass(frozen=True)
class EvaluationSettings(_Flags):
    """What :func:`structinit_hf.train.evaluate` scores: each field the ``dest`` of one flag of ``structinit-hf
    evaluate``, its default that flag's. ``None`` for a split flag: what the model's own run did on this dataset."""

    model: str  # the trained model: a run's final/ folder, hf-hub:<repo> or a transformers Hub id
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    trust_remote_code: bool = False
    allow_new_label_names: bool = False
    allow_untrained: bool = False  # a timm name's fresh weights, scored as a baseline
    dataset: str = "cifar10-sample"
    dataset_config: str | None = None
    image_column: str | None = None
    label_column: str | None = None
    max_eval_samples: int | None = None
    workers: int = 0
    train_split: str | None = None
    eval_split: str | None = None
    val_split: float | None = None
    skip_bad_images: bool = False
    seed: int | None = None
    batch_size: int = 256
    mixed_precision: str | None = None
    output: Path | None = None  # None: evaluation.json beside the model folder

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "dataset", dataset_source(self.dataset))
        if self.output is not None:
            object.__setattr__(self, "output", Path(self.output))


@dataclass(frozen=True)
class EvaluationRecord(_Scores):
    """What :func:`structinit_hf.train.evaluate` returns: where its record went and the record (scores, flags)."""

    output: Path
    results: dict[str, Any]

    @property
    def num_samples(self) -> int:
        """How many images were scored."""
        return self.results["num_samples"]


@dataclass(frozen=True)
class PushSettings(_Flags):
    """What :func:`structinit_hf.train.push_to_hub` publishes: each field but ``endpoint`` the ``dest`` of one flag of
    ``structinit-hf push-to-hub``, its default that flag's."""

    run_dir: Path  # a finished training run's folder (final/ and results.json)
    repo_id: str  # 'namespace/name'
    private: bool = False
    revision: str | None = None  # None: main
    dataset_id: str | None = None  # the Hub dataset a local copy came from
    license: str = "apache-2.0"
    dry_run: bool = False  # stage and report, no network call
    endpoint: str | None = None  # None: HF_ENDPOINT, huggingface_hub's default

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "run_dir", Path(self.run_dir))
