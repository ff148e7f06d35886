"""The training flags' values, checked before a run starts: one line naming the flag, its value and what is allowed.

argparse checks the types; these are the values that would only fail later (a negative learning rate, an
auto-augment policy timm cannot parse, a batch that does not split into equal micro-batches).
"""

from __future__ import annotations

import argparse
import ast
import math
from importlib.util import find_spec
from typing import Any

import timm.optim
from timm.data.auto_augment import augment_and_mix_transform, auto_augment_transform, rand_augment_transform

from .errors import UsageError, did_you_mean

__all__ = ["KeyValueAction", "MAX_BATCH", "MAX_SEED", "check_run_args"]

MAX_BATCH = 2**20  # images per optimizer step: far beyond any recipe


MAX_SEED = 2**32 - 1  # numpy's seed range (accelerate's set_seed seeds numpy too)


def _out_of_range(flag: str, value: Any, allowed: str) -> UsageError:
    return UsageError(f"--{flag} {value}: out of range; allowed: {allowed}")


def check_run_args(args: argparse.Namespace, num_processes: int) -> None:
    """Refuse, in one line naming the flag, its value and what is allowed, any recipe value that cannot work."""
    positive = (
        "epochs", "batch_size", "grad_accum", "checkpoint_every", "keep_checkpoints", "eval_batch_size",
        "max_train_samples", "max_eval_samples",
    )  # fmt: skip
    for name in positive:
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise _out_of_range(name.replace("_", "-"), getattr(args, name), "an integer >= 1")
    if args.batch_size > MAX_BATCH:  # the memory planner would search for ever
        raise _out_of_range("batch-size", args.batch_size, f"an integer in [1, {MAX_BATCH:,}]")
    ranges = (  # flag, value, allowed, check
        ("seed", args.seed, f"an integer in [0, {MAX_SEED}]", lambda v: 0 <= v <= MAX_SEED),
        ("workers", args.workers, ">= 0", lambda v: v is None or v >= 0),
        ("lr", args.lr, "> 0", lambda v: v > 0),
        ("weight-decay", args.weight_decay, ">= 0", lambda v: v >= 0),
        ("opt-eps", args.opt_eps, "> 0", lambda v: v > 0),
        ("warmup-epochs", args.warmup_epochs, ">= 0", lambda v: v >= 0),
        ("warmup-lr", args.warmup_lr, ">= 0", lambda v: v >= 0),
        ("min-lr", args.min_lr, ">= 0", lambda v: v >= 0),
        ("label-smoothing", args.label_smoothing, "0 <= value < 1", lambda v: 0 <= v < 1),
        ("clip-grad", args.clip_grad, ">= 0 (0 disables clipping)", lambda v: v >= 0),
        ("hflip", args.hflip, "a probability in [0, 1]", lambda v: 0 <= v <= 1),
        ("reprob", args.reprob, "a probability in [0, 1]", lambda v: 0 <= v <= 1),
        ("mixup", args.mixup, ">= 0 (0 disables it)", lambda v: v >= 0),
        ("cutmix", args.cutmix, ">= 0 (0 disables it)", lambda v: v >= 0),
        ("model-ema-decay", args.model_ema_decay, "0 <= value < 1", lambda v: 0 <= v < 1),
        ("val-split", args.val_split, "a fraction in [0, 1)", lambda v: 0 <= v < 1),
    )
    for flag, value, allowed, check in ranges:
        if not math.isfinite(value if value is not None else 0) or not check(value):
            raise _out_of_range(flag, value, allowed)
    low, high = args.scale
    if not 0 < low <= high <= 1:
        raise _out_of_range("scale", f"{low:g} {high:g}", "MIN MAX with 0 < MIN <= MAX <= 1 (area fractions)")
    low, high = args.ratio
    if not 0 < low <= high:
        raise _out_of_range("ratio", f"{low:g} {high:g}", "MIN MAX with 0 < MIN <= MAX (aspect ratios)")
    _check_auto_augment(args.aa)
    if args.report_to == "tensorboard" and find_spec("tensorboard") is None:  # accelerate would drop it silently
        raise ModuleNotFoundError("--report-to tensorboard: tensorboard is not installed", name="tensorboard")
    if args.opt.lower() not in timm.optim.list_optimizers():
        names = timm.optim.list_optimizers()
        raise UsageError(f"--opt {args.opt!r}: not a timm optimizer{did_you_mean(args.opt, names)}; e.g. adamw, sgd")
    per_process, remainder = divmod(args.batch_size, num_processes * (args.grad_accum or 1))
    if remainder:
        accumulation = f" x --grad-accum {args.grad_accum}" if args.grad_accum else ""
        raise UsageError(
            f"--batch-size {args.batch_size} is not divisible by {num_processes} processes{accumulation}; "
            "the global batch must split into equal micro-batches"
        )
    if (args.mixup or args.cutmix) and args.grad_accum and per_process % 2:
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
            f"--aa {policy!r}: not a timm auto-augment policy ({error}); allowed: none, "
            "rand-m<M>[-n<N>][-mstd<S>][-inc<0|1>] (e.g. rand-m9-mstd0.5), augmix-m<M>[-w<W>][-d<D>], original, "
            "originalr, v0, v0r, 3a"
        ) from None


class KeyValueAction(argparse.Action):
    """``--model-kwargs depth=3 pseudo_input=learned`` as a dict: values read as Python literals, else strings.

    timm's ``ParseKwargs`` does the same but ends a word without ``=`` in a ``ValueError`` traceback from
    inside ``parse_args``; here it is argparse's own one-line usage error (exit status 2).
    """

    def __call__(self, parser, namespace, values, option_string=None):
        kwargs = {}
        for word in values:
            key, sep, text = word.partition("=")
            if not sep or not key:
                parser.error(f"{option_string}: {word!r} is not key=value (for example depth=3 kernel_size=5)")
            try:
                kwargs[key] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                kwargs[key] = text  # a bare word such as pseudo_input=learned
        setattr(namespace, self.dest, kwargs)
