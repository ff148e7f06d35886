"""Everything a training run sets up before its first step, in the order that fails fastest.

Device defaults first (precision, workers, compilation), then the run folder (leftovers of a kill
cleaned up, the resume point found and its settings compared: :mod:`.run_folder`), then the model (built
and validated before any image is read), then the data (every image decoded once and checked), and last
``accelerator.prepare`` and the restored state.  :func:`setup_run` returns it all as one :class:`Run`.
The flags' values are checked before any of it (:func:`.args.check_run_args`); the settings are read, never changed:
what the device and the memory plan decide for flags left unset is recorded beside them (:attr:`Run.flags`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import datasets
import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import DataLoaderConfiguration, gather_object, parse_flag_from_env, set_seed
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from timm.utils import ModelEmaV3
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .args import DataSettings, ModelSettings, Recipe, Speed, TrainingSettings, check_run_args
from .checkpoints import RunState
from .data import ImageClassificationData, ensure_hub_reachable, find_columns, load_image_classification
from .dataloaders import eval_dataloader, train_dataloader
from .errors import UsageError
from .loading import (
    LoadedModel,
    check_label_names,
    check_model_kwargs,
    check_model_source,
    load_model,
    model_data_config,
)
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
from .run_folder import RunLock, default_output_dir, lock_run_folder, open_run_folder, start_run_state
from .tensor_data import training_datasets

__all__ = [
    "DeviceDefaults",
    "Run",
    "build_model",
    "describe_fine_tuning",
    "device_defaults",
    "known_label_names",
    "setup_run",
]


@dataclass(frozen=True)
class DeviceDefaults:
    """What the speed flags resolve to on this device when left unset."""

    mixed_precision: str
    workers: int
    pin_memory: bool
    compile: bool


def device_defaults(
    speed: Speed, device: torch.device, local_processes: int = 1, env: dict[str, str] | None = None
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
    precision = speed.mixed_precision
    if precision is None:
        configured = env.get("ACCELERATE_MIXED_PRECISION", "no")
        if configured != "no":
            precision = configured
        elif cuda:
            precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        else:
            precision = "no"
    if precision == "fp16" and device.type == "cpu":
        source = "--mixed-precision" if speed.mixed_precision else "the accelerate config's mixed_precision"
        raise UsageError(
            f"{source} fp16: not on a CPU (accelerate trains it in fp32 there, silently); allowed on CPU: bf16 or no"
        )
    workers = speed.workers
    if workers is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        workers = max(1, min(16, cpus // local_processes - 1)) if cuda else 0
    compile_model = cuda if speed.compile is None else speed.compile
    if env.get("ACCELERATE_DYNAMO_BACKEND", "no").lower() != "no":
        compile_model = False  # accelerate compiles the model in prepare()
    return DeviceDefaults(precision, workers, pin_memory=cuda, compile=compile_model)


@dataclass
class Run:
    """One training run: its accelerator, model, data, optimizer and where it is."""

    settings: TrainingSettings
    flags: dict[str, Any]  # every flag as recorded: the precision and accumulation the run resolved included
    accelerator: Accelerator
    output_dir: Path
    data: ImageClassificationData
    init: dict[str, Any]
    fine_tuned_from: dict[str, Any] | None  # what loading a checkpoint changed; None for a model built fresh
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
    recipe: Recipe  # settings.recipe with the global batch that trains (fitted to a small training split)
    micro_batch: int
    state: RunState
    compile_pending: bool  # the compiled forward has not run yet (it may still fall back to eager)
    lock: RunLock | None  # run.lock of the output folder (held by the main process)

    def eval_forward(self) -> nn.Module:
        """The model scored: the EMA when one is kept."""
        return self.ema.module if self.ema is not None else self.forward


def known_label_names(data: DataSettings) -> list[str] | None:
    """The class names as the dataset's metadata records them (no image read), or ``None`` if it does not."""
    path = Path(data.dataset).expanduser()
    if not path.exists() and not data.dataset.startswith((".", "/", "~")):
        ensure_hub_reachable(data.dataset)  # an unreachable Hub fails at once, as loading it would
    try:
        if path.is_dir() and any((path / name).is_file() for name in ("dataset_dict.json", "state.json")):
            loaded = datasets.load_from_disk(str(path))  # memory-mapped: nothing decoded
            split = loaded[data.train_split] if isinstance(loaded, datasets.DatasetDict) else loaded
            features = split.features
        else:
            source = str(path) if path.is_dir() else data.dataset
            features = datasets.load_dataset_builder(source, name=data.dataset_config).info.features
        _, label = find_columns(features, data.image_column, data.label_column)
    except Exception:  # noqa: BLE001  no usable metadata: the labels come from the loaded dataset instead
        return None
    feature = features[label]
    return list(feature.names) if isinstance(feature, datasets.ClassLabel) else None


def build_model(model: ModelSettings, label_names: list[str]) -> LoadedModel:
    """``--model`` with a head for ``label_names`` (an unknown keyword is a user error naming the nearest)."""
    return load_model(
        model.model,
        num_classes=len(label_names),
        label_names=label_names,
        model_kwargs=model.model_kwargs,
        trust_remote_code=model.trust_remote_code,
    )


def fit_batch(recipe: Recipe, train_rows: int, num_processes: int, say) -> Recipe:
    """``recipe`` with the global batch that trains: ``--batch-size``, or, where the training split holds fewer rows,
    the largest batch it fills (whole micro-batches on every process, even ones under mixup/cutmix); said in one
    line. The learning rate is not scaled: this recipe sets it per run, not per image. A split too small for even
    one batch is refused in one line that names the smallest it can take."""
    if train_rows >= recipe.batch_size:
        return recipe
    unit = num_processes * (recipe.grad_accum or 1) * (2 if recipe.mixup or recipe.cutmix else 1)
    fitted = train_rows // unit * unit
    if fitted < 1:
        raise UsageError(
            f"{train_rows} training image(s): too few to train on; the smallest training split is {unit} images "
            f"(one batch on {num_processes} process(es)), after the --val-split hold-out"
        )
    say(
        f"batch: the training split has {train_rows} images, fewer than --batch-size {recipe.batch_size}; training "
        f"with batch {fitted} ({train_rows // fitted} step(s) an epoch), the lr unchanged"
    )
    return replace(recipe, batch_size=fitted)


def _schedule(recipe: Recipe, optimizer: torch.optim.Optimizer, train_rows: int, say) -> CosineLRScheduler:
    steps_per_epoch = train_rows // recipe.batch_size
    total_steps = steps_per_epoch * recipe.epochs
    if recipe.warmup_epochs >= recipe.epochs:
        say(f"warning: --warmup-epochs {recipe.warmup_epochs:g} >= --epochs {recipe.epochs}: the lr never decays")
    return CosineLRScheduler(
        optimizer,
        t_initial=total_steps,
        lr_min=recipe.min_lr,
        warmup_t=min(round(recipe.warmup_epochs * steps_per_epoch), total_steps),
        warmup_lr_init=recipe.warmup_lr,
        t_in_epochs=False,
    )


def _plan_memory(
    recipe: Recipe,
    accelerator: Accelerator,
    model: nn.Module,
    input_size: tuple[int, ...],
    local_processes: int,
    grad_accum: int | None,
    accumulation_from: str | None,
) -> MemoryPlan:
    """The micro-batch of each process: the largest whose estimated peak fits the memory this process may use
    (the machine's available memory shared among its processes), unless ``grad_accum`` (the flag's, or the resumed
    run's) fixes it; refuse, in one line and before the first step, a run that cannot fit."""
    device = accelerator.device
    per_process = recipe.batch_size // accelerator.num_processes
    available = available_memory_bytes(device)
    if available is not None and device.type != "cuda":
        available //= local_processes
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    states = 3 + (1 if recipe.model_ema else 0)  # gradients, two AdamW moments, the EMA copy
    base = process_memory_bytes(device) + states * parameter_bytes
    per_image = round(saved_bytes_per_image(model, input_size, device, accelerator.autocast) * STEP_OVERHEAD)
    even = bool(recipe.mixup or recipe.cutmix)
    plan = fit_micro_batch(per_process, base, per_image, available, grad_accum, even)
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
            f"--batch-size {recipe.batch_size} does not fit in memory: as micro-batch {plan.micro_batch} x "
            f"{plan.grad_accum} accumulation x {accelerator.num_processes} process(es) it has an {plan.describe()} "
            f"(a run plans on {HEADROOM:.0%} of it); {advice}"
        )
    return plan


def setup_run(settings: TrainingSettings) -> Run:
    """Device defaults, run folder, model, data, optimizer and schedule, prepared, restored when resuming."""
    processes = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))  # as Accelerator will start it
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", processes.num_processes))
    check_run_args(settings, processes.num_processes)
    defaults = device_defaults(settings.speed, processes.device, local_processes)
    output_dir = settings.run.output_dir
    output_dir = (
        Path(output_dir) if output_dir is not None else default_output_dir(settings.model.model, settings.data.dataset)
    )
    lock = lock_run_folder(output_dir, processes)
    try:
        return _setup_locked_run(settings, defaults, output_dir, lock, local_processes)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _setup_locked_run(
    settings: TrainingSettings, defaults: DeviceDefaults, output_dir: Path, lock: RunLock | None, local_processes: int
) -> Run:
    """:func:`setup_run` once the run folder is this run's."""
    recipe, speed = settings.recipe, settings.speed
    accelerator = Accelerator(
        gradient_accumulation_steps=recipe.grad_accum or 1,  # fitted to the memory below when not given
        mixed_precision=defaults.mixed_precision,
        log_with=None if settings.run.report_to == "none" else settings.run.report_to,
        project_dir=str(output_dir),
        dataloader_config=DataLoaderConfiguration(non_blocking=defaults.pin_memory),  # copies overlap compute
    )
    checkpoint, grad_accum, accumulation_from = open_run_folder(
        settings, accelerator, output_dir, defaults.mixed_precision
    )
    check_model_source(settings.model.model)
    check_model_kwargs(settings.model.model_kwargs, settings.model.model)

    (model, init, fine_tuned_from), data = _model_and_data(settings, accelerator)
    recipe = fit_batch(recipe, len(data.train), accelerator.num_processes, accelerator.print)
    *images, pipeline = training_datasets(
        data,
        model_data_config(model),
        recipe.augmentation(),
        pipeline=speed.input_pipeline,
        workers=defaults.workers,
        skip_bad_images=settings.data.skip_bad_images,
        log=accelerator.print,
    )
    model = model.to(accelerator.device)  # as prepare() would: the memory probe runs where training will
    input_size = tuple(model_data_config(model)["input_size"])
    plan = _plan_memory(recipe, accelerator, model, input_size, local_processes, grad_accum, accumulation_from)
    accelerator.gradient_accumulation_steps = plan.grad_accum
    # what trains is what results.json, the trackers, the resume check and the card record
    flags = settings.flags(mixed_precision=defaults.mixed_precision, grad_accum=plan.grad_accum)
    loaders = _dataloaders(settings, recipe, defaults, plan.micro_batch, images)

    optimizer = create_optimizer_v2(
        model, opt=recipe.opt, lr=recipe.lr, weight_decay=recipe.weight_decay, eps=recipe.opt_eps
    )
    model, optimizer, train_loader, val_loader, eval_loader = accelerator.prepare(model, optimizer, *loaders)
    ema = ModelEmaV3(accelerator.unwrap_model(model), decay=recipe.model_ema_decay) if recipe.model_ema else None
    scheduler = _schedule(recipe, optimizer, len(data.train), accelerator.print)
    mixup, criterion = _mixup_and_criterion(recipe, data.num_classes)
    state = start_run_state(flags, accelerator, output_dir, checkpoint, ema, model)
    _print_banner(settings, recipe, accelerator, defaults, data, plan, pipeline, accumulation_from)
    if fine_tuned_from is not None:
        accelerator.print(describe_fine_tuning(fine_tuned_from, data.num_classes))
    return Run(
        settings=settings, flags=flags, accelerator=accelerator, output_dir=output_dir, data=data, init=init,
        fine_tuned_from=fine_tuned_from, model=model, forward=torch.compile(model) if defaults.compile else model,
        optimizer=optimizer, scheduler=scheduler, train_loader=train_loader, val_loader=val_loader,
        eval_loader=eval_loader, ema=ema, mixup=mixup, criterion=criterion, recipe=recipe, micro_batch=plan.micro_batch,
        state=state,
        compile_pending=defaults.compile, lock=lock,
    )  # fmt: skip


def _model_and_data(
    settings: TrainingSettings, accelerator: Accelerator
) -> tuple[LoadedModel, ImageClassificationData]:
    """The model and the data, the model built once: before any image is read when the dataset's metadata names the
    classes (a model that cannot be built fails fast), else for the classes the loaded data has."""
    source, seed = settings.data, settings.run.seed
    set_seed(seed)
    label_names = known_label_names(source)
    loaded = build_model(settings.model, label_names) if label_names else None
    with accelerator.main_process_first():
        data = load_image_classification(
            source.dataset,
            source.dataset_config,
            train_split=source.train_split,
            eval_split=source.eval_split,
            val_split=source.val_split,
            image_column=source.image_column,
            label_column=source.label_column,
            max_train_samples=source.max_train_samples,
            max_eval_samples=source.max_eval_samples,
            seed=seed,
        )
    if loaded is None:
        set_seed(seed)
        loaded = build_model(settings.model, data.label_names)
    elif data.label_names != label_names:
        raise UsageError(
            f"--dataset {source.dataset}: its metadata names the classes {label_names} but its "
            f"{source.train_split!r} split holds {data.label_names}; fix the dataset's features"
        )
    model, _, fine_tuned_from = loaded
    if fine_tuned_from is not None and fine_tuned_from.get("head") != "re-initialized":  # a kept head: its names
        check_label_names(model, source.dataset, data.label_names, settings.model.allow_new_label_names)
    return loaded, data


def describe_fine_tuning(fine_tuned_from: dict[str, Any], num_classes: int) -> str:
    """The log line of a run that starts from loaded weights: what was loaded, and what happened to the head."""
    head = {
        "kept": f"classifier kept ({num_classes} classes)",
        "re-initialized": f"classifier re-initialized for {num_classes} classes (the checkpoint had "
        f"{fine_tuned_from.get('checkpoint_classes')})",
    }.get(fine_tuned_from.get("head"), f"classifier for {num_classes} classes")
    resampled = "; ".join(fine_tuned_from.get("resampled") or [])
    return f"fine-tuning {fine_tuned_from['model']}: weights loaded, no attention init runs; {head}" + (
        f"; {resampled}" if resampled else ""
    )


def _dataloaders(
    settings: TrainingSettings, recipe: Recipe, defaults: DeviceDefaults, micro_batch: int, images: list[Dataset]
) -> tuple[DataLoader, DataLoader, DataLoader]:
    """The loaders of the train, validation and evaluation ``images``: micro-batches of whole global batches, then
    the per-epoch validation and the final evaluation in order."""
    train_images, val_images, eval_images = images
    eval_batch = settings.speed.eval_batch_size or 2 * micro_batch
    pin, seed = defaults.pin_memory, settings.run.seed
    train_loader = train_dataloader(train_images, micro_batch, recipe.batch_size, seed, defaults.workers, pin)
    eval_workers = min(defaults.workers, 4)  # no augmentation: a few workers keep up with a no-grad forward
    val_loader = eval_dataloader(val_images, eval_batch, eval_workers, pin, persistent=True)
    eval_loader = eval_dataloader(eval_images, eval_batch, eval_workers, pin)
    return train_loader, val_loader, eval_loader


def _mixup_and_criterion(recipe: Recipe, num_classes: int) -> tuple[Mixup | None, nn.Module]:
    """Mixup/cutmix and their soft-target loss when either is on, else cross-entropy with label smoothing."""
    mixup = None
    if recipe.mixup or recipe.cutmix:
        mixup = Mixup(
            mixup_alpha=recipe.mixup, cutmix_alpha=recipe.cutmix, label_smoothing=recipe.label_smoothing,
            num_classes=num_classes,
        )  # fmt: skip
    criterion = SoftTargetCrossEntropy() if mixup else nn.CrossEntropyLoss(label_smoothing=recipe.label_smoothing)
    return mixup, criterion


def _print_banner(
    settings: TrainingSettings,
    recipe: Recipe,
    accelerator: Accelerator,
    defaults: DeviceDefaults,
    data: ImageClassificationData,
    plan: MemoryPlan,
    pipeline: str,
    accumulation_from: str | None,
) -> None:
    """The run in one line (model, data, how the batch splits, device and speed settings), then its memory plan."""
    batch = recipe.batch_size
    accelerator.print(
        f"{settings.model.model} on {settings.data.dataset}: {len(data.train)} train / {len(data.validation)} val "
        f"[{data.validation_split}] / {len(data.evaluation)} eval [{data.evaluation_split}] images, "
        f"{data.num_classes} classes; {accelerator.num_processes} process(es) x micro-batch {plan.micro_batch} x "
        f"{plan.grad_accum} accumulation = batch {batch}; {len(data.train) // batch} "
        f"steps/epoch; {accelerator.device}, precision {defaults.mixed_precision}, "
        f"{'compiled' if defaults.compile else 'eager'}, {defaults.workers} workers, {pipeline} input pipeline"
    )
    fitted = {"flag": "--grad-accum", "checkpoint": "the run's --grad-accum"}.get(accumulation_from, "fitted")
    accelerator.print(f"memory per process: micro-batch {plan.micro_batch} ({fitted}): {plan.describe()}")
