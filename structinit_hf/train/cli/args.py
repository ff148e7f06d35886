"""The command lines of ``train`` and ``evaluate``: their parsers, and argv turned into
:class:`~structinit_hf.train.settings.TrainingSettings` (:func:`settings_from_args`).

argparse checks the types (:mod:`.settings_checks` the values). Each flag of :func:`training_parser` is one field of
the settings, its default the field's; nothing past :func:`settings_from_args` reads an ``argparse.Namespace``.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from ...init.layer_scale import KEEP, LAYER_SCALES
from ...init.options import FAMILY_IMPULSE_DEFAULTS
from ..settings import INPUT_PIPELINES, TrainingSettings, dataset_source

__all__ = [
    "DefaultsHelpFormatter",
    "FlagsGivenParser",
    "KeyValueAction",
    "add_dataset_arguments",
    "add_model_arguments",
    "evaluation_parser",
    "settings_from_args",
    "training_parser",
]


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


def _shown(value: object) -> str:
    """A default as a command line spells it: a switch ``on``/``off``, a list its words, ``{}`` ``none``."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return " ".join(map(_shown, value))
    if isinstance(value, dict):
        return " ".join(f"{key}={item}" for key, item in value.items()) or "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """argparse's help with each flag's default stated once: ``(default: X)`` appended unless the help already says
    what decides it (``default: ...``), ``(required)`` for a required flag. Unlike ``ArgumentDefaultsHelpFormatter``,
    never a second ``(default: None)`` after a help that explains the default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS or "default:" in text:
            return text
        if action.required:
            return f"{text} (required)"
        return f"{text} (default: {_shown(action.default).replace('%', '%%')})"


class FlagsGivenParser(argparse.ArgumentParser):
    """argparse's parser that also notes which flags the command line gave, by their ``dest``, in
    ``args.flags_given``: a resumed run takes the others from what its checkpoint recorded."""

    def parse_known_args(self, args=None, namespace=None):  # noqa: ANN001, ANN201  argparse's signature
        parsed, extras = super().parse_known_args(args, namespace)
        unset = object()  # argparse fills in a default only where the namespace has no value yet
        probe = argparse.Namespace(**{action.dest: unset for action in self._actions})
        super().parse_known_args(args, probe)
        parsed.flags_given = frozenset(dest for dest, value in vars(probe).items() if value is not unset)
        return parsed, extras


def settings_from_args(args: argparse.Namespace) -> TrainingSettings:
    """The settings of ``training_parser().parse_args(...)``: the one place a parsed command line becomes settings."""
    return TrainingSettings().with_flags(**{name: getattr(args, name) for name in TrainingSettings.flag_names()})


# The parsers. train and evaluate share the model and dataset flags.


def add_dataset_arguments(parser: argparse.ArgumentParser, evaluation: bool = False) -> None:
    """The dataset flags shared by ``train.py`` and ``evaluate.py``."""
    group = parser.add_argument_group("dataset")
    group.add_argument(
        "--dataset",
        type=dataset_source,
        default="cifar10-sample",
        help="Hub id (e.g. uoft-cs/cifar10), local data folder (parquet, arrow, imagefolder), save_to_disk folder, or "
        "cifar10-sample: the 2,560 / 1,000-image CIFAR-10 sample shipped with the package",
    )
    group.add_argument(
        "--dataset-config",
        default=None,
        help="dataset configuration name (e.g. cropped_digits for svhn); default: the dataset's own default",
    )
    group.add_argument("--image-column", default=None, help="image column (default: img or image)")
    group.add_argument("--label-column", default=None, help="label column (default: label, labels or fine_label)")
    group.add_argument(
        "--max-eval-samples",
        type=int,
        default=None,
        help="score N rows drawn at random, the same N in every run; default: every row",
    )
    group.add_argument(
        "--workers",
        type=int,
        default=0 if evaluation else None,
        help="DataLoader worker processes per process"
        + ("" if evaluation else "; default: from the CPU count on a GPU, 0 on CPU"),
    )


def add_model_arguments(parser: argparse.ArgumentParser, evaluation: bool = False) -> None:
    """The model flags shared by ``train.py`` and ``evaluate.py``; ``evaluate`` has no default model (it scores a
    trained one)."""
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model",
        **(dict(required=True) if evaluation else dict(default="vit_tiny_impulse3")),
        help="the trained model: local checkpoint folder (a run's final/), hf-hub:<repo> or a transformers Hub id; a "
        "timm name scores fresh weights, refused without --allow-untrained"
        if evaluation
        else "timm name, local checkpoint folder, hf-hub:<repo> or a transformers Hub id",
    )
    group.add_argument(
        "--model-kwargs",
        nargs="*",
        default={},
        action=KeyValueAction,
        help="builder arguments as key=value (e.g. depth=2 patch_size=4 kernel_size=5); on timm's own names "
        "attention_init=impulse|mimetic runs that init (with its options, e.g. kernel_size=5), whose impulse takes "
        f"by default, where the model has it, {_family_defaults()} (docs/method.md); default: none, the registered "
        "network as it is",
    )
    group.add_argument("--trust-remote-code", action="store_true", help="allow a transformers checkpoint's own code")
    group.add_argument(
        "--allow-new-label-names",
        action="store_true",
        help="score or fine-tune a checkpoint on classes named otherwise than its own (a deliberate relabelling); "
        "refused by default",
    )


def _family_defaults() -> str:
    """``value_init=mimetic (rotary ViTs); attn_layer_scale 1e-06 -> 1 (timm Block) ...``: the impulse's family
    defaults and the layer scales it opens, as the init's tables write them."""
    words = {"vit": "ViTs", "rope": "rotary ViTs", "relpos": "relative-position ViTs"}
    families = [
        " ".join(f"{name}={value}" for name, value in defaults.items()) + f" ({words.get(family, family)})"
        for family, defaults in FAMILY_IMPULSE_DEFAULTS.items()
    ]
    scales = [f"attn_layer_scale {s.opens[0]:g} -> {s.opens[1]:g} (timm {s.block})" for s in LAYER_SCALES if s.opens]
    return "; ".join([*families, *scales]) + f" (attn_layer_scale={KEEP} keeps the model's own)"


def evaluation_parser() -> argparse.ArgumentParser:
    """Every flag of ``scripts/evaluate.py``."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description="Score a trained image classifier on one split of a dataset.",
        formatter_class=DefaultsHelpFormatter,
    )
    add_model_arguments(parser, evaluation=True)
    parser.add_argument(
        "--allow-untrained",
        action="store_true",
        help="score a timm name's fresh, untrained weights (a baseline); the output and the record say untrained",
    )
    add_dataset_arguments(parser, evaluation=True)
    _add_split_arguments(parser, evaluation=True)
    parser.add_argument("--batch-size", type=int, default=256, help="images per process and batch")
    parser.add_argument(
        "--mixed-precision",
        choices=("no", "fp16", "bf16"),
        default=None,
        help="autocast precision; default: an accelerate config's, else no",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="where to write the record (never a training run's own results.json); default: evaluation.json beside "
        "the model folder (a run's final/ -> the run folder); required for a model that is no local folder",
    )
    return parser


def training_parser() -> argparse.ArgumentParser:
    """Every flag of ``scripts/train.py``; the defaults are the paper's CIFAR recipe."""
    parser = FlagsGivenParser(
        allow_abbrev=False,
        description="Train a ViT (or any timm / transformers classifier) on an image-classification dataset.",
        formatter_class=DefaultsHelpFormatter,
    )
    add_model_arguments(parser)
    add_dataset_arguments(parser)
    _add_split_arguments(parser)
    _add_recipe_arguments(parser)
    _add_speed_arguments(parser)
    _add_run_arguments(parser)
    return parser


def _add_split_arguments(parser: argparse.ArgumentParser, evaluation: bool = False) -> None:
    """Which rows train, validate after every epoch and are scored at the end; ``evaluate`` takes the same split
    flags, its defaults those of the run that trained the model (the rows that run held out)."""
    splits = parser.add_argument_group("splits")
    splits.add_argument(
        "--train-split",
        default=None if evaluation else "train",
        help="split the hold-out is drawn from; default: the model's run's, else train"
        if evaluation
        else "split trained on",
    )
    splits.add_argument(
        "--eval-split",
        *(["--split"] if evaluation else []),
        default=None,
        help="split scored (default: test, else validation, else the rows the model's run held out)"
        if evaluation
        else "split scored at the end (default: test, else validation)",
    )
    splits.add_argument(
        "--val-split",
        type=float,
        default=None if evaluation else 0.1,
        help="fraction of the train split held out (stratified by class, drawn with --seed) and scored; default: "
        "the fraction the model's run held out"
        if evaluation
        else "fraction of train held out (stratified) for per-epoch validation when the dataset has no "
        "validation split; 0 validates on the evaluation split",
    )
    splits.add_argument(
        "--skip-bad-images", action="store_true", help="drop unreadable images (counted in the log) instead of stopping"
    )
    if evaluation:
        splits.add_argument("--seed", type=int, default=None, help="the hold-out's seed (default: the run's, else 0)")
        return
    splits.add_argument(
        "--max-train-samples",
        type=int,
        default=None,
        help="train on a seeded random subset of N rows; default: every row",
    )


def _add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """Batch, optimizer, schedule, augmentation and EMA: the flags that decide the result."""
    recipe = parser.add_argument_group("recipe")
    recipe.add_argument("--epochs", type=int, default=200, help="passes over the training data")
    recipe.add_argument("--batch-size", type=int, default=512, help="global batch per optimizer step")
    recipe.add_argument(
        "--grad-accum",
        type=int,
        default=None,
        help="micro-batches accumulated per optimizer step; default: the fewest whose micro-batch fits the memory",
    )
    recipe.add_argument("--opt", default="adamw", help="timm optimizer name")
    recipe.add_argument(
        "--lr",
        type=float,
        default=1e-3,
        help="peak learning rate (after the warmup), > 0: any --opt's scale (sgd and lars take 1 or more; compare, "
        "AdamW only, takes (0, 1)); a loss that grows past 10x where it started stops the run",
    )
    recipe.add_argument("--weight-decay", type=float, default=0.01, help="the optimizer's weight decay")
    recipe.add_argument("--opt-eps", type=float, default=1e-3, help="the optimizer's epsilon")
    recipe.add_argument("--warmup-epochs", type=float, default=10.0, help="linear warmup length (a fraction allowed)")
    recipe.add_argument("--warmup-lr", type=float, default=1e-6, help="learning rate the warmup starts from")
    recipe.add_argument("--min-lr", type=float, default=1e-5, help="end of the cosine schedule")
    recipe.add_argument("--label-smoothing", type=float, default=0.1, help="cross-entropy label smoothing")
    recipe.add_argument("--clip-grad", type=float, default=3.0, help="max gradient norm; 0 disables clipping")
    recipe.add_argument("--aa", default="rand-m9-mstd0.5", help="timm auto-augment policy; 'none' disables it")
    recipe.add_argument("--hflip", type=float, default=0.5, help="horizontal flip probability")
    recipe.add_argument("--scale", type=float, nargs=2, default=(0.08, 1.0), help="random-resized-crop area range")
    recipe.add_argument("--ratio", type=float, nargs=2, default=(3 / 4, 4 / 3), help="random-resized-crop aspect range")
    recipe.add_argument("--reprob", type=float, default=0.0, help="random erasing probability")
    recipe.add_argument("--mixup", type=float, default=0.0, help="mixup alpha (0 disables)")
    recipe.add_argument("--cutmix", type=float, default=0.0, help="cutmix alpha (0 disables)")
    recipe.add_argument("--model-ema", action="store_true", help="keep an EMA of the weights; validate and export it")
    recipe.add_argument("--model-ema-decay", type=float, default=0.9998, help="the EMA's decay per optimizer step")


def _add_speed_arguments(parser: argparse.ArgumentParser) -> None:
    """Precision, compilation, workers, evaluation batch and input pipeline: the defaults follow the device."""
    speed = parser.add_argument_group(
        "speed", "defaults follow the device: on a GPU bf16, compiled, workers from the CPU count; on CPU as given"
    )
    speed.add_argument(
        "--mixed-precision",
        choices=("no", "fp16", "bf16"),
        default=None,
        help="default: an accelerate config's fp16/bf16, else bf16 on a GPU that has it (fp16 otherwise), no on CPU; "
        "fp16 needs a GPU",
    )
    speed.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the model (falls back to eager with a warning); default: on for CUDA",
    )
    speed.add_argument("--eval-batch-size", type=int, default=None, help="default: twice the training micro-batch")
    speed.add_argument(
        "--input-pipeline",
        choices=INPUT_PIPELINES,
        default="auto",
        help="tensor: decode once, augment uint8 tensors; pil: timm's PIL transforms each epoch; auto: tensor if "
        "it can",
    )


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the run writes, its seed, checkpoints, resume and logging."""
    run = parser.add_argument_group("run")
    run.add_argument("--output-dir", type=Path, default=None, help="default: runs/<model>-<dataset>")
    run.add_argument("--seed", type=int, default=0, help="seeds the init, the data order, augmentation and hold-out")
    run.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints (and the last)")
    run.add_argument(
        "--checkpoint-steps",
        type=int,
        default=None,
        metavar="N",
        help="also checkpoint every N optimizer steps inside an epoch (a preempted run loses at most N steps); "
        "default: at epoch ends only",
    )
    run.add_argument(
        "--checkpoint-minutes",
        type=float,
        default=None,
        metavar="M",
        help="also checkpoint inside an epoch once M minutes have passed since the last checkpoint; default: at epoch "
        "ends only",
    )
    run.add_argument("--keep-checkpoints", type=int, default=2, help="how many of the newest checkpoints to keep")
    run.add_argument(
        "--resume",
        default=None,
        help="'latest' (the newest checkpoint; refused where there is none), 'auto' (the newest, else a fresh start: "
        "one command for a job restarted after preemption) or a checkpoint folder; the run continues with the flags "
        "its checkpoint recorded (a flag given must agree); default: a fresh run (a folder that holds checkpoints is "
        "refused)",
    )
    run.add_argument(
        "--report-to", choices=("none", "tensorboard"), default="none", help="tracker for the logged metrics"
    )
