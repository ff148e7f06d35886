"""Everything a training run sets up before its first step, in the order that fails fastest.

Device defaults first (precision, workers, compilation), then the run folder (leftovers of a kill
cleaned up, the resume point found and its settings compared), then the model (built and validated
before any image is read), then the data (every image decoded once and checked), and last
``accelerator.prepare`` and the restored state.  :func:`setup_run` returns it all as one :class:`Run`.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import timm.optim
import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import (
    DataLoaderConfiguration,
    broadcast_object_list,
    gather_object,
    parse_flag_from_env,
    set_seed,
)
from timm.data import Mixup
from timm.data.auto_augment import augment_and_mix_transform, auto_augment_transform, rand_augment_transform
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from timm.utils import ModelEmaV3
from torch import nn

from .checkpoints import (
    RunState,
    check_same_settings,
    clean_leftovers,
    load_training_state,
    read_trainer_state,
    reset_metrics,
    resume_point,
    run_settings,
)
from .cli import UsageError, did_you_mean
from .data import (
    ImageClassificationData,
    ensure_hub_reachable,
    eval_dataloader,
    find_columns,
    load_image_classification,
    train_dataloader,
)
from .loading import check_model_kwargs, check_model_source, load_model, model_data_config
from .memory import (
    HEADROOM,
    STEP_OVERHEAD,
    MemoryPlan,
    available_memory_bytes,
    fit_micro_batch,
    plan_fits,
    process_memory_bytes,
    saved_bytes_per_image,
)
from .run_lock import RunLock, acquire_run_lock
from .tensor_data import training_datasets

__all__ = ["DeviceDefaults", "Run", "build_model", "device_defaults", "known_label_names", "setup_run"]


@dataclass(frozen=True)
class DeviceDefaults:
    """What the speed flags resolve to on this device when left unset."""

    mixed_precision: str
    workers: int
    pin_memory: bool
    compile: bool


def device_defaults(
    args: argparse.Namespace, device: torch.device, local_processes: int = 1, env: dict[str, str] | None = None
) -> DeviceDefaults:
    """Resolve ``--mixed-precision``, ``--workers`` and ``--compile`` for ``device``; explicit flags win.

    On CUDA: bf16 autocast (fp16, with accelerate's gradient scaler, where bf16 is unsupported), one
    worker per CPU core of this process's share less one (at most 16), pinned memory, torch.compile.
    An accelerate config's fp16/bf16 (``ACCELERATE_MIXED_PRECISION``; its default "no" does not count)
    wins over the device default, and its dynamo backend replaces ``--compile``.  On CPU: fp32, no
    workers, no compilation, as before; fp16 is refused there (accelerate would train in fp32 and record fp16).
    """
    env = os.environ if env is None else env
    cuda = device.type == "cuda"
    precision = args.mixed_precision
    if precision is None:
        configured = env.get("ACCELERATE_MIXED_PRECISION", "no")
        if configured != "no":
            precision = configured
        elif cuda:
            precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        else:
            precision = "no"
    if precision == "fp16" and device.type == "cpu":
        source = "--mixed-precision" if args.mixed_precision else "the accelerate config's mixed_precision"
        raise UsageError(
            f"{source} fp16: not on a CPU (accelerate trains it in fp32 there, silently); allowed on CPU: bf16 or no"
        )
    workers = args.workers
    if workers is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        workers = max(1, min(16, cpus // local_processes - 1)) if cuda else 0
    compile_model = cuda if args.compile is None else args.compile
    if env.get("ACCELERATE_DYNAMO_BACKEND", "no").lower() != "no":
        compile_model = False  # accelerate compiles the model in prepare()
    return DeviceDefaults(precision, workers, pin_memory=cuda, compile=compile_model)


@dataclass
class Run:
    """One training run: its accelerator, model, data, optimizer and where it is."""

    args: argparse.Namespace
    accelerator: Accelerator
    output_dir: Path
    settings: dict[str, Any]
    data: ImageClassificationData
    init: dict[str, Any]
    model: nn.Module
    forward: nn.Module  # the model, or its torch.compile'd version
    optimizer: torch.optim.Optimizer
    scheduler: CosineLRScheduler
    train_loader: Any
    val_loader: Any
    eval_loader: Any
    ema: ModelEmaV3 | None
    mixup: Mixup | None
    criterion: nn.Module
    micro_batch: int
    state: RunState
    compile_pending: bool  # the compiled forward has not run yet (it may still fall back to eager)
    lock: RunLock | None  # run.lock of the output folder (held by the main process)

    def eval_forward(self) -> nn.Module:
        """The model scored: the EMA when one is kept."""
        return self.ema.module if self.ema is not None else self.forward


def _out_of_range(flag: str, value: Any, allowed: str) -> UsageError:
    return UsageError(f"--{flag} {value}: out of range; allowed: {allowed}")


def _check_args(args: argparse.Namespace, num_processes: int) -> None:
    """Refuse, in one line naming the flag, its value and what is allowed, any recipe value that cannot work."""
    positive = (
        "epochs", "batch_size", "grad_accum", "checkpoint_every", "keep_checkpoints", "eval_batch_size",
        "max_train_samples", "max_eval_samples",
    )  # fmt: skip
    for name in positive:
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise _out_of_range(name.replace("_", "-"), getattr(args, name), "an integer >= 1")
    ranges = (  # flag, value, allowed, check
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


def _default_output_dir(args: argparse.Namespace) -> Path:
    model = Path(args.model.removeprefix("hf-hub:")).name or "model"
    dataset = Path(args.dataset).name or "dataset"
    return Path("runs") / f"{model}-{dataset}"


def known_label_names(args: argparse.Namespace) -> list[str] | None:
    """The class names as the dataset's metadata records them (no image read), or ``None`` if it does not."""
    path = Path(args.dataset).expanduser()
    if not path.exists() and not args.dataset.startswith((".", "/", "~")):
        ensure_hub_reachable(args.dataset)  # an unreachable Hub fails at once, as loading it would
    try:
        if path.is_dir() and any((path / name).is_file() for name in ("dataset_dict.json", "state.json")):
            loaded = datasets.load_from_disk(str(path))  # memory-mapped: nothing decoded
            split = loaded[args.train_split] if isinstance(loaded, datasets.DatasetDict) else loaded
            features = split.features
        else:
            source = str(path) if path.is_dir() else args.dataset
            features = datasets.load_dataset_builder(source, name=args.dataset_config).info.features
        _, label = find_columns(features, args.image_column, args.label_column)
    except Exception:  # noqa: BLE001  no usable metadata: the labels come from the loaded dataset instead
        return None
    feature = features[label]
    return list(feature.names) if isinstance(feature, datasets.ClassLabel) else None


def build_model(args: argparse.Namespace, label_names: list[str]) -> tuple[nn.Module, dict[str, Any]]:
    """``args.model`` with a head for ``label_names`` (an unknown keyword is a user error naming the nearest)."""
    return load_model(
        args.model,
        num_classes=len(label_names),
        label_names=label_names,
        model_kwargs=args.model_kwargs,
        trust_remote_code=args.trust_remote_code,
    )


def _load_data(args: argparse.Namespace, accelerator: Accelerator) -> ImageClassificationData:
    with accelerator.main_process_first():
        return load_image_classification(
            args.dataset,
            args.dataset_config,
            train_split=args.train_split,
            eval_split=args.eval_split,
            val_split=args.val_split,
            image_column=args.image_column,
            label_column=args.label_column,
            max_train_samples=args.max_train_samples,
            max_eval_samples=args.max_eval_samples,
            seed=args.seed,
        )


def _schedule(args: argparse.Namespace, optimizer: torch.optim.Optimizer, train_rows: int, say) -> CosineLRScheduler:
    steps_per_epoch = train_rows // args.batch_size
    total_steps = steps_per_epoch * args.epochs
    if args.warmup_epochs >= args.epochs:
        say(f"warning: --warmup-epochs {args.warmup_epochs:g} >= --epochs {args.epochs}: the lr never decays")
    return CosineLRScheduler(
        optimizer,
        t_initial=total_steps,
        lr_min=args.min_lr,
        warmup_t=min(round(args.warmup_epochs * steps_per_epoch), total_steps),
        warmup_lr_init=args.warmup_lr,
        t_in_epochs=False,
    )


def _lock_run_folder(output_dir: Path, processes: PartialState) -> RunLock | None:
    """The main process takes ``run.lock``; every process learns whether the folder was free (one refusal each)."""
    lock, refusal = None, None
    if processes.is_main_process:
        try:
            lock = acquire_run_lock(output_dir)
        except UsageError as error:
            refusal = str(error)
    if processes.num_processes > 1:
        shared = [refusal]
        broadcast_object_list(shared)
        refusal = shared[0]
    if refusal is not None:
        raise UsageError(refusal)
    return lock


def _started_accumulation(checkpoint: Path | None) -> int | None:
    """The gradient accumulation a resumed run was started with (it decides the result to the last bit)."""
    if checkpoint is None:
        return None
    return read_trainer_state(checkpoint).get("settings", {}).get("grad_accum")


def _plan_memory(
    args: argparse.Namespace,
    accelerator: Accelerator,
    model: nn.Module,
    input_size: tuple[int, ...],
    local_processes: int,
    accumulation_from: str | None,
) -> MemoryPlan:
    """The micro-batch of each process: the largest whose estimated peak fits the memory this process may use
    (the machine's available memory shared among its processes), unless ``args.grad_accum`` fixes it; refuse, in
    one line and before the first step, a run that cannot fit."""
    device = accelerator.device
    per_process = args.batch_size // accelerator.num_processes
    available = available_memory_bytes(device)
    if available is not None and device.type != "cuda":
        available //= local_processes
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    states = 3 + (1 if args.model_ema else 0)  # gradients, two AdamW moments, the EMA copy
    base = process_memory_bytes(device) + states * parameter_bytes
    per_image = round(saved_bytes_per_image(model, input_size, device, accelerator.autocast) * STEP_OVERHEAD)
    even = bool(args.mixup or args.cutmix)
    plan = fit_micro_batch(per_process, base, per_image, available, args.grad_accum, even)
    if accelerator.num_processes > 1:  # every process must step together: the largest accumulation any needs
        accumulation = max(gather_object([plan.grad_accum]))
        plan = fit_micro_batch(per_process, base, per_image, available, accumulation, even)
    fits = plan_fits(plan)
    if accelerator.num_processes > 1:
        fits = all(gather_object([fits]))
    if not fits:
        advice = {
            "flag": "pass a larger --grad-accum (or leave it out to fit the micro-batch), a smaller --batch-size, "
            "or free memory",
            "checkpoint": f"the run was started with --grad-accum {plan.grad_accum}; free memory to resume it",
        }.get(accumulation_from, "even the smallest micro-batch does not fit: free memory or train a smaller model")
        raise UsageError(
            f"--batch-size {args.batch_size} does not fit in memory: as micro-batch {plan.micro_batch} x "
            f"{plan.grad_accum} accumulation x {accelerator.num_processes} process(es) it has an {plan.describe()} "
            f"(a run plans on {HEADROOM:.0%} of it); {advice}"
        )
    return plan


def setup_run(args: argparse.Namespace) -> Run:
    """Device defaults, run folder, model, data, optimizer and schedule, prepared, restored when resuming."""
    processes = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))  # as Accelerator will start it
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", processes.num_processes))
    _check_args(args, processes.num_processes)
    defaults = device_defaults(args, processes.device, local_processes)
    output_dir = Path(args.output_dir) if args.output_dir is not None else _default_output_dir(args)
    lock = _lock_run_folder(output_dir, processes)
    try:
        return _setup_locked_run(args, defaults, output_dir, lock, local_processes)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _setup_locked_run(
    args: argparse.Namespace, defaults: DeviceDefaults, output_dir: Path, lock: RunLock | None, local_processes: int
) -> Run:
    accumulation_from = "flag" if args.grad_accum is not None else None
    accelerator = Accelerator(
        gradient_accumulation_steps=args.grad_accum or 1,  # fitted to the memory below when not given
        mixed_precision=defaults.mixed_precision,
        log_with=None if args.report_to == "none" else args.report_to,
        project_dir=str(output_dir),
        dataloader_config=DataLoaderConfiguration(non_blocking=defaults.pin_memory),  # copies overlap compute
    )
    if accelerator.is_main_process:
        clean_leftovers(output_dir)
    accelerator.wait_for_everyone()
    checkpoint = resume_point(output_dir, args.resume)
    if args.grad_accum is None and _started_accumulation(checkpoint) is not None:
        args.grad_accum, accumulation_from = _started_accumulation(checkpoint), "checkpoint"
    args.mixed_precision = defaults.mixed_precision  # what trains is what results.json and the card record
    if checkpoint is not None:
        check_same_settings(checkpoint, run_settings(args, defaults.mixed_precision))
    check_model_source(args.model)
    check_model_kwargs(args.model_kwargs)

    set_seed(args.seed)
    label_names = known_label_names(args)
    model, init = build_model(args, label_names) if label_names else (None, {})
    data = _load_data(args, accelerator)
    if data.label_names != label_names:  # the metadata had no class names (or others): build for the data's
        set_seed(args.seed)
        model, init = build_model(args, data.label_names)
    augmentation = dict(
        auto_augment=None if args.aa == "none" else args.aa,
        hflip=args.hflip,
        scale=tuple(args.scale),
        ratio=tuple(args.ratio),
        re_prob=args.reprob,
    )
    train_images, val_images, eval_images, pipeline = training_datasets(
        data,
        model_data_config(model),
        augmentation,
        pipeline=args.input_pipeline,
        workers=defaults.workers,
        skip_bad_images=args.skip_bad_images,
        log=accelerator.print,
    )
    model = model.to(accelerator.device)  # as prepare() would: the memory probe runs where training will
    input_size = tuple(model_data_config(model)["input_size"])
    plan = _plan_memory(args, accelerator, model, input_size, local_processes, accumulation_from)
    micro_batch = plan.micro_batch
    args.grad_accum = accelerator.gradient_accumulation_steps = plan.grad_accum
    settings = run_settings(args, defaults.mixed_precision)
    eval_batch = args.eval_batch_size or 2 * micro_batch
    pin = defaults.pin_memory
    train_loader = train_dataloader(train_images, micro_batch, args.batch_size, args.seed, defaults.workers, pin)
    eval_workers = min(defaults.workers, 4)  # no augmentation: a few workers keep up with a no-grad forward
    val_loader = eval_dataloader(val_images, eval_batch, eval_workers, pin, persistent=True)
    eval_loader = eval_dataloader(eval_images, eval_batch, eval_workers, pin)

    optimizer = create_optimizer_v2(model, opt=args.opt, lr=args.lr, weight_decay=args.weight_decay, eps=args.opt_eps)
    model, optimizer, train_loader, val_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, val_loader, eval_loader
    )
    ema = ModelEmaV3(accelerator.unwrap_model(model), decay=args.model_ema_decay) if args.model_ema else None
    scheduler = _schedule(args, optimizer, len(data.train), accelerator.print)
    mixup = None
    if args.mixup or args.cutmix:
        mixup = Mixup(
            mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, label_smoothing=args.label_smoothing,
            num_classes=data.num_classes,
        )  # fmt: skip
    criterion = SoftTargetCrossEntropy() if mixup else nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)

    state = RunState()
    if checkpoint is not None:
        state = load_training_state(accelerator, checkpoint, ema, model)
        accelerator.print(f"resumed from {checkpoint} (epoch {state.epoch}, step {state.step})")
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        reset_metrics(output_dir, state.epoch)
    accelerator.init_trackers(
        output_dir.name,
        config={k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in vars(args).items()},
    )
    accelerator.print(
        f"{args.model} on {args.dataset}: {len(data.train)} train / {len(data.validation)} val "
        f"[{data.validation_split}] / {len(data.evaluation)} eval [{data.evaluation_split}] images, "
        f"{data.num_classes} classes; {accelerator.num_processes} process(es) x micro-batch {micro_batch} x "
        f"{args.grad_accum} accumulation = batch {args.batch_size}; {len(data.train) // args.batch_size} "
        f"steps/epoch; {accelerator.device}, precision {defaults.mixed_precision}, "
        f"{'compiled' if defaults.compile else 'eager'}, {defaults.workers} workers, {pipeline} input pipeline"
    )
    fitted = {"flag": "--grad-accum", "checkpoint": "the run's --grad-accum"}.get(accumulation_from, "fitted")
    accelerator.print(f"memory per process: micro-batch {micro_batch} ({fitted}): {plan.describe()}")
    return Run(
        args=args, accelerator=accelerator, output_dir=output_dir, settings=settings, data=data, init=init,
        model=model, forward=torch.compile(model) if defaults.compile else model, optimizer=optimizer,
        scheduler=scheduler, train_loader=train_loader, val_loader=val_loader, eval_loader=eval_loader, ema=ema,
        mixup=mixup, criterion=criterion, micro_batch=micro_batch, state=state, compile_pending=defaults.compile,
        lock=lock,
    )  # fmt: skip
