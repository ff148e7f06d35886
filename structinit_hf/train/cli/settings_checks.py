"""The values of ``train``'s flags that argparse cannot check and that would only fail later: a negative learning rate,
an auto-augment policy timm cannot parse, a batch that does not split into equal micro-batches. Each is refused before
anything runs, in one line naming the flag, its value and what is allowed.
"""

from __future__ import annotations

import math
from importlib.util import find_spec
from typing import Any

import timm.optim
from timm.data.auto_augment import augment_and_mix_transform, auto_augment_transform, rand_augment_transform

from ..settings import TrainingSettings
from .errors import UsageError, did_you_mean

__all__ = ["MAX_BATCH", "MAX_SEED", "check_run_args"]

MAX_BATCH = 2**20  # images per optimizer step: far beyond any recipe


MAX_SEED = 2**32 - 1  # numpy's seed range (accelerate's set_seed seeds numpy too)


def _named(flag: str, value: Any, shown: str | None = None) -> str:
    """``--lr 0.0 (lr=0.0)``: a value as the command line and the settings both spell it."""
    return f"--{flag} {value if shown is None else shown} ({flag.replace('-', '_')}={value!r})"


def _out_of_range(flag: str, value: Any, allowed: str, shown: str | None = None) -> UsageError:
    return UsageError(f"{_named(flag, value, shown)}: out of range; allowed: {allowed}")


def check_run_args(settings: TrainingSettings, num_processes: int) -> None:
    """Refuse, in one line naming the flag and the setting, its value and what is allowed, any value that cannot
    work."""
    data, recipe, speed, run = settings.data, settings.recipe, settings.speed, settings.run
    positive = (
        ("epochs", recipe.epochs), ("batch-size", recipe.batch_size), ("grad-accum", recipe.grad_accum),
        ("checkpoint-every", run.checkpoint_every), ("keep-checkpoints", run.keep_checkpoints),
        ("checkpoint-steps", run.checkpoint_steps),
        ("eval-batch-size", speed.eval_batch_size), ("max-train-samples", data.max_train_samples),
        ("max-eval-samples", data.max_eval_samples),
    )  # fmt: skip
    for flag, value in positive:
        if value is not None and value < 1:
            raise _out_of_range(flag, value, "an integer >= 1")
    if recipe.batch_size > MAX_BATCH:  # the memory planner would search for ever
        raise _out_of_range("batch-size", recipe.batch_size, f"an integer in [1, {MAX_BATCH:,}]")
    ranges = (  # flag, value, allowed, check
        ("seed", run.seed, f"an integer in [0, {MAX_SEED}]", lambda v: 0 <= v <= MAX_SEED),
        ("workers", speed.workers, ">= 0", lambda v: v is None or v >= 0),
        ("lr", recipe.lr, "> 0", lambda v: v > 0),
        ("weight-decay", recipe.weight_decay, ">= 0", lambda v: v >= 0),
        ("opt-eps", recipe.opt_eps, "> 0", lambda v: v > 0),
        ("warmup-epochs", recipe.warmup_epochs, ">= 0", lambda v: v >= 0),
        ("warmup-lr", recipe.warmup_lr, ">= 0", lambda v: v >= 0),
        ("min-lr", recipe.min_lr, ">= 0", lambda v: v >= 0),
        ("label-smoothing", recipe.label_smoothing, "0 <= value < 1", lambda v: 0 <= v < 1),
        ("clip-grad", recipe.clip_grad, ">= 0 (0 disables clipping)", lambda v: v >= 0),
        ("hflip", recipe.hflip, "a probability in [0, 1]", lambda v: 0 <= v <= 1),
        ("reprob", recipe.reprob, "a probability in [0, 1]", lambda v: 0 <= v <= 1),
        ("mixup", recipe.mixup, ">= 0 (0 disables it)", lambda v: v >= 0),
        ("cutmix", recipe.cutmix, ">= 0 (0 disables it)", lambda v: v >= 0),
        ("model-ema-decay", recipe.model_ema_decay, "0 <= value < 1", lambda v: 0 <= v < 1),
        ("val-split", data.val_split, "a fraction in [0, 1)", lambda v: 0 <= v < 1),
        ("checkpoint-minutes", run.checkpoint_minutes, "> 0 (minutes)", lambda v: v is None or v > 0),
    )
    for flag, value, allowed, check in ranges:
        if not math.isfinite(value if value is not None else 0) or not check(value):
            raise _out_of_range(flag, value, allowed)
    low, high = recipe.scale
    if not 0 < low <= high <= 1:
        allowed = "MIN MAX with 0 < MIN <= MAX <= 1 (area fractions)"
        raise _out_of_range("scale", recipe.scale, allowed, f"{low:g} {high:g}")
    low, high = recipe.ratio
    if not 0 < low <= high:
        raise _out_of_range("ratio", recipe.ratio, "MIN MAX with 0 < MIN <= MAX (aspect ratios)", f"{low:g} {high:g}")
    _check_auto_augment(recipe.aa)
    if run.report_to == "tensorboard" and find_spec("tensorboard") is None:  # accelerate would drop it silently
        raise ModuleNotFoundError(
            f"{_named('report-to', 'tensorboard')}: tensorboard is not installed", name="tensorboard"
        )
    if recipe.opt.lower() not in timm.optim.list_optimizers():
        names = timm.optim.list_optimizers()
        raise UsageError(
            f"{_named('opt', recipe.opt, repr(recipe.opt))}: not a timm optimizer{did_you_mean(recipe.opt, names)}; "
            "e.g. adamw, sgd"
        )
    per_process, remainder = divmod(recipe.batch_size, num_processes * (recipe.grad_accum or 1))
    if remainder:
        accumulation = f" x {_named('grad-accum', recipe.grad_accum)}" if recipe.grad_accum else ""
        raise UsageError(
            f"{_named('batch-size', recipe.batch_size)} is not divisible by {num_processes} processes{accumulation}; "
            "the global batch must split into equal micro-batches"
        )
    if (recipe.mixup or recipe.cutmix) and recipe.grad_accum and per_process % 2:
        raise UsageError(f"mixup/cutmix need an even micro-batch, got {per_process}")


def _check_auto_augment(policy: str) -> None:
    """``--aa``: ``none`` or a policy timm builds (``rand-m9-mstd0.5``, ``augmix-m5``, ``original``, ...)."""
    if policy == "none":
        return
    build = auto_augment_transform  # dispatched on the prefix as timm's transforms_imagenet_train does
    if policy.startswith("rand"):
        build = rand_augment_transform
    elif policy.startswith("augmix"):
        build = augment_and_mix_transform
    try:
        build(policy, dict(translate_const=10, img_mean=(124, 116, 104)))
    except (AssertionError, KeyError, ValueError, IndexError) as error:
        raise UsageError(
            f"{_named('aa', policy, repr(policy))}: not a timm auto-augment policy ({error}); allowed: none, "
            "rand-m<M>[-n<N>][-mstd<S>][-inc<0|1>] (e.g. rand-m9-mstd0.5), augmix-m<M>[-w<W>][-d<D>], original, "
            "originalr, v0, v0r, 3a"
        ) from None
