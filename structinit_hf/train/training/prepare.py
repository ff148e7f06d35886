"""Everything a training run prepares before its first step, in the order that fails fastest; each step's policy
lives in its own module, this one only calls them in order.

The settings' values (:mod:`.settings_checks`), device defaults, then the run folder (:mod:`.run_folder`: the lock,
what a kill left, the resume point), the model (built and validated before any image is read when the dataset's
metadata names the classes: :mod:`.models`), the data (:mod:`.data`, every image decoded once and checked:
:mod:`.tensor_data`), the batch (:func:`.dataloaders.fit_batch`) and the memory plan (:mod:`.memory_plan`), and last
the Accelerator, built once with the accumulation that plan fixed, ``accelerator.prepare`` and the restored state.
:func:`setup_run` returns it all as one :class:`Run`. The settings are read, never changed: what the device and the
memory plan decide for flags left unset is recorded beside them (:attr:`Run.flags`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import DataLoaderConfiguration, parse_flag_from_env, set_seed
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from timm.utils import ModelEmaV3
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ...init.apply import said_changes
from ...init.common import unfuse_attention
from ..cli.errors import UsageError
from ..cli.settings_checks import check_run_args
from ..data.dataloaders import eval_dataloader, fit_batch, train_dataloader
from ..data.image_folders import dataset_files_digest
from ..data.sources import known_label_names
from ..data.splits import ImageClassificationData, load_image_classification
from ..data.tensor_data import training_datasets
from ..models.evaluation import forget_other_precision, fused_attention
from ..models.kwargs import check_model_kwargs
from ..models.loading import (
    LoadedModel,
    check_label_names,
    check_model_source,
    describe_fine_tuning,
    load_model,
    model_data_config,
)
from ..settings import ModelSettings, Recipe, Speed, TrainingSettings
from .checkpoints import RunState
from .memory_plan import DECODE_OVERHEAD, MemoryPlan, plan_memory
from .run_folder import ResumePoint, RunLock, default_output_dir, lock_run_folder, open_run_folder, start_run_state
from .step import TrainingStep
from .stopping import Checkpointing

__all__ = [
    "DeviceDefaults",
    "Run",
    "build_model",
    "device_defaults",
    "native_bf16",
    "setup_run",
    "steps_per_epoch",
    "usable_cpus",
]


@dataclass(frozen=True)
class DeviceDefaults:
    """What the speed flags resolve to on this device when left unset."""

    mixed_precision: str
    workers: int
    pin_memory: bool
    compile: bool
    fused_attention: bool = True  # torch's fused attention kernel where timm's attention modules offer it


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively: a CUDA GPU that supports it, a CPU with AVX512-BF16 or AMX."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type != "cpu":
        return False
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's (private): a missing one is "no"
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


def usable_cpus() -> int:
    """The CPU cores this process may run on (its affinity, as ``taskset`` or a container sets it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def device_defaults(
    speed: Speed, device: torch.device, local_processes: int = 1, env: dict[str, str] | None = None
) -> DeviceDefaults:
    """Resolve ``--mixed-precision``, ``--workers`` and ``--compile`` for ``device``; explicit flags win.

    On CUDA: bf16 autocast (fp16, with accelerate's gradient scaler, where bf16 is unsupported), one
    worker per CPU core of this process's share less one (at most 16), pinned memory, torch.compile.
    An accelerate config's fp16/bf16 (``ACCELERATE_MIXED_PRECISION``; its default "no" does not count)
    wins over the device default, and its dynamo backend replaces ``--compile``.  On CPU: fp32, no
    workers, no compilation, as before; fp16 is refused there (accelerate would train in fp32 and record fp16);
    bf16 there trains through timm's unfused attention (:func:`unfuse_attention`).
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
        workers = max(1, min(16, usable_cpus() // local_processes - 1)) if cuda else 0
    compile_model = cuda if speed.compile is None else speed.compile
    if env.get("ACCELERATE_DYNAMO_BACKEND", "no").lower() != "no":
        compile_model = False  # accelerate compiles the model in prepare()
    return DeviceDefaults(
        precision, workers, pin_memory=cuda, compile=compile_model, fused_attention=fused_attention(precision, device)
    )


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
    step: TrainingStep  # one micro-batch's loss and gradients, compiled or eager
    optimizer: torch.optim.Optimizer
    scheduler: CosineLRScheduler
    train_loader: Any
    val_loader: Any
    eval_loader: Any
    ema: ModelEmaV3 | None
    mixup: Mixup | None
    recipe: Recipe  # settings.recipe with the global batch that trains (fitted to a small training split)
    micro_batch: int
    input_size: tuple[int, ...]  # the model's (channels, height, width)
    state: RunState
    lock: RunLock | None  # run.lock of the output folder (held by the main process)
    batches: Iterator[Any] | None = None  # the training loader's one pass over the epochs left, once started
    checkpointing: Checkpointing | None = None  # checkpoints inside an epoch and stop signals (set by the loop)
    loss_bound: Any = None  # stops a diverging loss (set by the loop: .loop.LossBound)

    @property
    def micro_steps_per_epoch(self) -> int:
        """This process's micro-batches an epoch: each optimizer step's accumulation."""
        return steps_per_epoch(self.recipe, len(self.data.train)) * self.accelerator.gradient_accumulation_steps

    def eval_forward(self) -> nn.Module:
        """The model scored: the EMA when one is kept, else the trained model run eagerly, never through the compiled
        training graph: scoring it there compiles a second graph (no gradients, eval mode) and again for each other
        batch size, which costs a short compiled run more than all its evaluation does eagerly."""
        return self.ema.module if self.ema is not None else self.step.model


def build_model(model: ModelSettings, label_names: list[str]) -> LoadedModel:
    """``--model`` with a head for ``label_names`` (an unknown keyword is a user error naming the nearest); what its
    init changed beyond the attention (a layer scale, value/output by a family default) is one line of the run's log,
    printed by the main process."""
    with said_changes() as said:
        loaded = load_model(
            model.model,
            num_classes=len(label_names),
            label_names=label_names,
            model_kwargs=model.model_kwargs,
            trust_remote_code=model.trust_remote_code,
        )
    for line in said:
        PartialState().print(line)
    return loaded


def steps_per_epoch(recipe: Recipe, train_rows: int) -> int:
    """Optimizer steps an epoch: whole global batches of the training split (the sampler drops the rest)."""
    return train_rows // recipe.batch_size


def _schedule(recipe: Recipe, optimizer: torch.optim.Optimizer, train_rows: int, say) -> CosineLRScheduler:
    epoch_steps = steps_per_epoch(recipe, train_rows)
    total_steps = epoch_steps * recipe.epochs
    if recipe.warmup_epochs >= recipe.epochs:
        say(f"warning: --warmup-epochs {recipe.warmup_epochs:g} >= --epochs {recipe.epochs}: the lr never decays")
    timm_says = logging.getLogger(CosineLRScheduler.__module__)
    level = timm_says.level
    if total_steps == 1:  # one step in all: timm's "will have no effect" warning says nothing a run can act on
        timm_says.setLevel(logging.ERROR)
    try:
        return CosineLRScheduler(
            optimizer,
            t_initial=total_steps,
            lr_min=recipe.min_lr,
            warmup_t=min(round(recipe.warmup_epochs * epoch_steps), total_steps),
            warmup_lr_init=recipe.warmup_lr,
            t_in_epochs=False,
        )
    finally:
        timm_says.setLevel(level)


def setup_run(settings: TrainingSettings) -> Run:
    """Device defaults, run folder, model, data, optimizer and schedule, prepared, restored when resuming."""
    processes = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))  # as Accelerator will start it
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", processes.num_processes))
    check_run_args(settings, processes.num_processes)
    defaults = device_defaults(settings.speed, processes.device, local_processes)
    if defaults.mixed_precision == "bf16" and processes.device.type == "cpu" and not native_bf16(processes.device):
        processes.print(
            "note: bf16 on a CPU without native bf16 (AVX512-BF16 or AMX) is emulated, several times slower than fp32 "
            "(--mixed-precision no)"
        )
    output_dir = settings.run.output_dir
    output_dir = (
        Path(output_dir) if output_dir is not None else default_output_dir(settings.model.model, settings.data.dataset)
    )
    lock = lock_run_folder(output_dir, processes)
    try:
        return _setup_locked_run(settings, processes, defaults, output_dir, lock, local_processes)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _setup_locked_run(
    settings: TrainingSettings,
    processes: PartialState,
    defaults: DeviceDefaults,
    output_dir: Path,
    lock: RunLock | None,
    local_processes: int,
) -> Run:
    """:func:`setup_run` once the run folder is this run's."""
    resume = open_run_folder(output_dir, settings.run.resume, settings.recipe.grad_accum, processes)
    check_model_source(settings.model.model)
    check_model_kwargs(settings.model.model_kwargs, settings.model.model)

    (model, init, fine_tuned_from), data = _model_and_data(settings, processes)
    data_config = model_data_config(model)
    *images, pipeline = training_datasets(
        data,
        data_config,
        settings.recipe.augmentation(),
        pipeline=settings.speed.input_pipeline,
        workers=defaults.workers,
        skip_bad_images=settings.data.skip_bad_images,
        log=processes.print,
    )
    recipe = fit_batch(settings.recipe, len(data.train), processes.num_processes, processes.print)  # after the drop
    model = model.to(processes.device)  # as prepare() would: the memory probe runs where training will
    if not defaults.fused_attention:  # before the memory probe: the unfused path keeps its attention maps
        unfuse_attention(model)
    input_size = tuple(data_config["input_size"])
    largest = data.source_sizes[1] if data.source_sizes else (0, 0)
    decode_bytes = 0 if defaults.workers else DECODE_OVERHEAD * 3 * largest[0] * largest[1]  # workers decode apart
    plan = plan_memory(
        recipe, processes, model, input_size, defaults.mixed_precision, local_processes, resume.grad_accum,
        resume.accumulation_from, decode_bytes,
    )  # fmt: skip
    # what trains is what results.json, the trackers, the resume check and the card record
    flags = settings.flags(mixed_precision=defaults.mixed_precision, grad_accum=plan.grad_accum)

    forget_other_precision(defaults.mixed_precision)
    accelerator = Accelerator(
        gradient_accumulation_steps=plan.grad_accum,
        mixed_precision=defaults.mixed_precision,
        log_with=None if settings.run.report_to == "none" else settings.run.report_to,
        project_dir=str(output_dir),
        dataloader_config=DataLoaderConfiguration(non_blocking=defaults.pin_memory),  # copies overlap compute
    )
    loaders = _dataloaders(settings, recipe, defaults, plan.micro_batch, images)
    optimizer = create_optimizer_v2(
        model, opt=recipe.opt, lr=recipe.lr, weight_decay=recipe.weight_decay, eps=recipe.opt_eps
    )
    model, optimizer, train_loader, val_loader, eval_loader = accelerator.prepare(model, optimizer, *loaders)
    ema = ModelEmaV3(accelerator.unwrap_model(model), decay=recipe.model_ema_decay) if recipe.model_ema else None
    scheduler = _schedule(recipe, optimizer, len(data.train), accelerator.print)
    mixup, criterion = _mixup_and_criterion(recipe, data.num_classes)
    state = start_run_state(flags, accelerator, output_dir, resume, ema, model)
    _print_banner(settings, recipe, accelerator, defaults, data, plan, pipeline, resume, input_size)
    if fine_tuned_from is not None:
        accelerator.print(describe_fine_tuning(fine_tuned_from, data.num_classes))
    return Run(
        settings=settings, flags=flags, accelerator=accelerator, output_dir=output_dir, data=data, init=init,
        fine_tuned_from=fine_tuned_from, model=model,
        step=TrainingStep(model, criterion, accelerator, optimizer, compile=defaults.compile),
        optimizer=optimizer, scheduler=scheduler, train_loader=train_loader, val_loader=val_loader,
        eval_loader=eval_loader, ema=ema, mixup=mixup, recipe=recipe, micro_batch=plan.micro_batch, state=state,
        input_size=input_size,
        lock=lock,
    )  # fmt: skip


def _model_and_data(settings: TrainingSettings, processes: PartialState) -> tuple[LoadedModel, ImageClassificationData]:
    """The model and the data, the model built once: before any image is read when the dataset's metadata names the
    classes (a model that cannot be built fails fast), else for the classes the loaded data has."""
    source, seed = settings.data, settings.run.seed
    set_seed(seed)
    label_names = known_label_names(source)
    loaded = build_model(settings.model, label_names) if label_names else None
    with processes.main_process_first():
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
    if processes.is_main_process:  # the files it read, which compare checks before reusing the run
        data.files_digest = dataset_files_digest(source.dataset)
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


def _dataloaders(
    settings: TrainingSettings, recipe: Recipe, defaults: DeviceDefaults, micro_batch: int, images: list[Dataset]
) -> tuple[DataLoader, DataLoader, DataLoader]:
    """The loaders of the train, validation and evaluation ``images``: micro-batches of whole global batches, then
    the per-epoch validation and the final evaluation in order."""
    train_images, val_images, eval_images = images
    eval_batch = settings.speed.eval_batch_size or 2 * micro_batch
    pin, seed = defaults.pin_memory, settings.run.seed
    train_loader = train_dataloader(
        train_images, micro_batch, recipe.batch_size, seed, defaults.workers, pin, epochs=recipe.epochs
    )
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
    resume: ResumePoint,
    model_input_size: tuple[int, ...],
) -> None:
    """The run in one line (model, data, how the batch splits, device and speed settings), then what it trains on
    (input resolution, source sizes, images per class, the fraction held out), then its memory plan."""
    batch = recipe.batch_size
    accelerator.print(
        f"{settings.model.model} on {settings.data.dataset}: {len(data.train)} train / {len(data.validation)} val "
        f"[{data.validation_split}] / {len(data.evaluation)} eval [{data.evaluation_split}] images, "
        f"{data.num_classes} classes; {accelerator.num_processes} process(es) x micro-batch {plan.micro_batch} x "
        f"{plan.grad_accum} accumulation = batch {batch}; {len(data.train) // batch} "
        f"steps/epoch; {accelerator.device}, precision {defaults.mixed_precision}, "
        f"{'compiled' if defaults.compile else 'eager'}, {'' if defaults.fused_attention else 'unfused attention, '}"
        f"{defaults.workers} workers, {pipeline} input pipeline"
    )
    accelerator.print(data.describe_inputs(model_input_size))
    fitted = {"flag": "--grad-accum", "checkpoint": "the run's --grad-accum"}.get(resume.accumulation_from, "fitted")
    accelerator.print(f"memory per process: micro-batch {plan.micro_batch} ({fitted}): {plan.describe()}")
