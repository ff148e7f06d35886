"""What :func:`structinit_hf.benchmark.compare` compares (:class:`CompareSettings`) and what it returns
(:class:`CompareResult`): the call behind ``structinit-hf compare``, whose parser only reads argv into these settings.

    from structinit_hf.benchmark import CompareSettings, compare

    result = compare(CompareSettings(dataset="my_images/", seeds=(0, 1, 2)))
    print(result.table)  # what the command prints; result.top1["impulse3"][0] is one run's top-1

Each field is the ``dest`` of one flag of ``structinit-hf compare`` and its default that flag's. Every field's type is
checked when the settings are made (a bool is no number, a float no int, a list no dict): one ``TypeError`` naming the
setting, its flag, the value and what is allowed. The values are checked when :func:`compare` starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..train._internal import check_field_types, dataset_source, flag_of
from .profiles import PROFILES, proxy_lr

__all__ = [
    "DEFAULT_ARMS",
    "FAMILIES",
    "PRECISIONS",
    "PROFILE",
    "RECIPE_FLAGS",
    "THREADS",
    "CompareResult",
    "CompareSettings",
]

PROFILE = PROFILES["cpu-proxy-n2500"]  # the defaults: the CPU proxy at 2,500 training images


DEFAULT_ARMS = ("default", "mimetic", "impulse3")


# per architecture (--family): the proxy profile whose geometry the arms train and the arms trained by default
FAMILIES = {
    "vit": (PROFILE, DEFAULT_ARMS),
    "swin": (PROFILES["cpu-proxy-n2500-swin"], ("swin-default", "swin-mimetic", "swin-impulse3")),
    "mixer": (PROFILES["cpu-proxy-n2500-mixer"], ("mixer-default", "mixer-impulse3")),
}


THREADS = 2  # torch threads by default, whatever the machine: the README's table was measured on 2 cores


# --mixed-precision: auto is bf16 autocast where the device computes bf16 natively (a CUDA GPU that supports it, a CPU
# with AVX512-BF16 or AMX: 2.5x the fp32 step on the CPU proxy, docs/benchmarks.md, "The CPU step"), fp32 elsewhere
PRECISIONS = ("auto", "bf16", "no")


# what a user may set of each run's recipe
RECIPE_FLAGS = ("epochs", "max_train_samples", "batch_size", "lr", "aa", "mixup", "cutmix", "skip_bad_images")


@dataclass(frozen=True)
class CompareSettings:
    """A comparison: which data, which inits (by architecture, ``family``, or any timm ``model``), which seeds, and
    each run's recipe; ``None`` is decided when it runs (``arms``: the family's, ``lr``: the proxy's for the head
    dimension, ``output_dir``: ``runs/compare-<dataset>-<time>``)."""

    dataset: str = "cifar10-sample"
    family: str = "vit"
    model: str | None = None
    arms: tuple[str, ...] | None = None
    seeds: tuple[int, ...] = (0,)
    epochs: int = PROFILE.recipe["epochs"]
    max_train_samples: int | None = PROFILE.recipe["max_train_samples"]
    batch_size: int = PROFILE.recipe["batch_size"]
    lr: float | None = None
    aa: str = PROFILE.recipe["aa"]
    mixup: float = 0.0
    cutmix: float = 0.0
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    threads: int = THREADS
    mixed_precision: str = "auto"
    skip_bad_images: bool = False
    output_dir: Path | None = None

    def __post_init__(self) -> None:
        check_field_types(self, flag_of)
        for item in fields(self):  # frozen one level deeper: lists into tuples, the dict a copy
            value = getattr(self, item.name)
            if isinstance(value, (list, dict)):
                object.__setattr__(self, item.name, tuple(value) if isinstance(value, list) else dict(value))
        object.__setattr__(self, "dataset", dataset_source(self.dataset))  # the folder of an embedded sample
        if self.output_dir is not None:
            object.__setattr__(self, "output_dir", Path(self.output_dir))

    def resolved_lr(self) -> float:
        """``lr``, else the proxy recipe's rate for the head dimension the arms are built with."""
        if self.lr is not None:
            return self.lr
        if self.family != "vit":  # the family's proxy rate (its heads are 16 wide)
            return FAMILIES[self.family][0].recipe["lr"]
        architecture = {**PROFILE.architecture, **self.model_kwargs}
        try:
            head_dim = int(architecture["embed_dim"]) // int(architecture["num_heads"])
        except (TypeError, ValueError, ZeroDivisionError):  # the model's own check names the bad value
            head_dim = 0
        return proxy_lr(head_dim)

    def resolved_precision(self) -> str:
        """``mixed_precision`` as the runs train it: auto resolved on the device accelerate trains on."""
        if self.mixed_precision != "auto":
            return self.mixed_precision
        from accelerate import PartialState  # here: the settings import none of the training stack

        from ..train._internal import native_bf16

        return "bf16" if native_bf16(PartialState().device) else "no"


@dataclass(frozen=True)
class CompareResult:
    """What :func:`~structinit_hf.benchmark.compare` returns: the table it printed and the figures behind it."""

    output_dir: Path  # one run folder per (arm, seed), results.json, compare.md, curves.png
    table: str  # the markdown table printed (compare.md)
    top1: dict[str, dict[int, float]]  # arm -> seed -> final top-1 (percent) on the scored split
    vs_default: dict[str, dict[str, Any]]  # arm -> its paired difference to timm's default: mean, per seed, ...
    verdicts: dict[str, str]  # arm -> the table's verdict against timm's default ("one seed: no verdict", ...)
    record: dict[str, Any]  # everything, as results.json holds it
