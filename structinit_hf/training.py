"""Train an image classifier with Accelerate: the paper's CIFAR recipe on any ``datasets`` source.

One readable :func:`train` in the shape of accelerate's ``complete_cv_example.py``: the same code
runs on one CPU, several GPUs, several machines or FSDP, whatever ``accelerate launch`` sets up.
Each epoch's randomness (shuffle order, augmentation, mixup) is a function of ``(seed, epoch)`` and
the learning rate a function of the step, so a run resumed from an epoch checkpoint reaches the
same weights as an uninterrupted one.

A run folder holds ``checkpoints/epoch_XXXX/`` (``save_state`` + ``trainer_state.json``),
``metrics.jsonl`` (one line per epoch), ``final/`` (the trained model in timm's and transformers'
formats, with ``results.json``) and ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.models import save_for_hf
from timm.models.vision_transformer import VisionTransformer
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from timm.utils import ModelEmaV3
from torch import nn
from tqdm.auto import tqdm

from .atomic import replace_folder, write_json
from .data import TransformedImages, build_transform, eval_dataloader, load_image_classification, train_dataloader
from .evaluation import (
    ClassifierLogits,
    add_dataset_arguments,
    add_model_arguments,
    evaluate,
    load_model,
    model_data_config,
    results_record,
)
from .export import save_checkpoint
from .hf.configuration_structinit_vit import TIMM_VARIANTS

__all__ = ["RunState", "find_checkpoint", "save_final_model", "save_timm_folder", "train", "training_parser"]

CHECKPOINT_PREFIX = "epoch_"
TRAINER_STATE = "trainer_state.json"
EMA_WEIGHTS = "ema.safetensors"
LOG_EVERY = 10  # micro-batches between progress updates (and non-finite loss checks)


@dataclass
class RunState:
    """Where a run is: completed epochs, optimizer steps, training images seen and time spent."""

    epoch: int = 0
    step: int = 0
    images_seen: int = 0
    wall_time_s: float = 0.0


def training_parser() -> argparse.ArgumentParser:
    """Every flag of ``scripts/train.py``; the defaults are the paper's CIFAR recipe."""
    parser = argparse.ArgumentParser(
        description="Train a ViT (or any timm / transformers classifier) on an image-classification dataset.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_model_arguments(parser)
    add_dataset_arguments(parser)
    data = parser.add_argument_group("splits")
    data.add_argument("--train-split", default="train")
    data.add_argument("--eval-split", default=None, help="split scored at the end (default: test, else validation)")
    data.add_argument(
        "--val-split",
        type=float,
        default=0.1,
        help="fraction of train held out (stratified) for per-epoch validation when the dataset has no "
        "validation split; 0 validates on the evaluation split",
    )
    data.add_argument("--max-train-samples", type=int, default=None, help="train on a seeded random subset")

    recipe = parser.add_argument_group("recipe")
    recipe.add_argument("--epochs", type=int, default=200)
    recipe.add_argument("--batch-size", type=int, default=512, help="global batch per optimizer step")
    recipe.add_argument("--grad-accum", type=int, default=1, help="micro-batches accumulated per optimizer step")
    recipe.add_argument("--opt", default="adamw", help="timm optimizer name")
    recipe.add_argument("--lr", type=float, default=1e-3)
    recipe.add_argument("--weight-decay", type=float, default=0.01)
    recipe.add_argument("--opt-eps", type=float, default=1e-3)
    recipe.add_argument("--warmup-epochs", type=float, default=10.0)
    recipe.add_argument("--warmup-lr", type=float, default=1e-6)
    recipe.add_argument("--min-lr", type=float, default=1e-5, help="end of the cosine schedule")
    recipe.add_argument("--label-smoothing", type=float, default=0.1)
    recipe.add_argument("--clip-grad", type=float, default=3.0, help="max gradient norm; 0 disables clipping")
    recipe.add_argument("--aa", default="rand-m9-mstd0.5", help="timm auto-augment policy; 'none' disables it")
    recipe.add_argument("--hflip", type=float, default=0.5, help="horizontal flip probability")
    recipe.add_argument("--scale", type=float, nargs=2, default=(0.08, 1.0), help="random-resized-crop area range")
    recipe.add_argument("--ratio", type=float, nargs=2, default=(3 / 4, 4 / 3), help="random-resized-crop aspect range")
    recipe.add_argument("--reprob", type=float, default=0.0, help="random erasing probability")
    recipe.add_argument("--mixup", type=float, default=0.0, help="mixup alpha (0 disables)")
    recipe.add_argument("--cutmix", type=float, default=0.0, help="cutmix alpha (0 disables)")
    recipe.add_argument("--model-ema", action="store_true", help="keep an EMA of the weights; validate and export it")
    recipe.add_argument("--model-ema-decay", type=float, default=0.9998)
    recipe.add_argument(
        "--mixed-precision", choices=("no", "fp16", "bf16"), default=None, help="default: the accelerate config"
    )

    run = parser.add_argument_group("run")
    run.add_argument("--output-dir", type=Path, default=None, help="default: runs/<model>-<dataset>")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints (and the last)")
    run.add_argument("--keep-checkpoints", type=int, default=2, help="how many of the newest checkpoints to keep")
    run.add_argument("--resume", default=None, help="'latest' or a checkpoint folder")
    run.add_argument("--report-to", choices=("none", "tensorboard"), default="none")
    return parser


def _check_args(args: argparse.Namespace, num_processes: int) -> int:
    """Validate the recipe; return the micro-batch size of one process."""
    positive = ("epochs", "batch_size", "grad_accum", "checkpoint_every", "keep_checkpoints")
    for name in positive:
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.batch_size % (num_processes * args.grad_accum):
        raise ValueError(
            f"--batch-size {args.batch_size} is not divisible by {num_processes} processes x --grad-accum "
            f"{args.grad_accum}; the global batch must split into equal micro-batches"
        )
    micro_batch = args.batch_size // (num_processes * args.grad_accum)
    if (args.mixup or args.cutmix) and micro_batch % 2:
        raise ValueError(f"mixup/cutmix need an even micro-batch, got {micro_batch}")
    return micro_batch


def _default_output_dir(args: argparse.Namespace) -> Path:
    model = Path(args.model.removeprefix("hf-hub:")).name or "model"
    dataset = Path(args.dataset).name or "dataset"
    return Path("runs") / f"{model}-{dataset}"


def find_checkpoint(output_dir: Path, resume: str) -> Path:
    """The checkpoint ``--resume`` names: the newest complete one for ``latest``, else the given folder."""
    if resume == "latest":
        complete = sorted(
            path
            for path in (output_dir / "checkpoints").glob(f"{CHECKPOINT_PREFIX}[0-9]*")
            if (path / TRAINER_STATE).is_file()
        )
        if not complete:
            raise ValueError(f"--resume latest: no checkpoint in {output_dir / 'checkpoints'}")
        return complete[-1]
    path = Path(resume).expanduser()
    if not (path / TRAINER_STATE).is_file():
        raise ValueError(f"--resume {resume!r} is not a checkpoint folder (no {TRAINER_STATE}); pass 'latest' or one")
    return path


def _save_training_state(
    accelerator: Accelerator, output_dir: Path, state: RunState, ema: ModelEmaV3 | None, keep: int
) -> Path:
    """Write ``checkpoints/epoch_XXXX`` atomically (a temporary folder, then a rename); keep the newest ``keep``."""
    checkpoints = output_dir / "checkpoints"
    target = checkpoints / f"{CHECKPOINT_PREFIX}{state.epoch:04d}"
    temporary = checkpoints / f".{target.name}.tmp"
    if accelerator.is_main_process:
        for leftover in checkpoints.glob(".*"):  # what a kill left of an earlier save or removal
            shutil.rmtree(leftover)
        temporary.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(temporary))
    if accelerator.is_main_process:
        if ema is not None:
            safetensors.torch.save_model(ema.module, str(temporary / EMA_WEIGHTS))
        (temporary / TRAINER_STATE).write_text(json.dumps(asdict(state), indent=2) + "\n")
        _swap_in(temporary, target)
        for old in sorted(checkpoints.glob(f"{CHECKPOINT_PREFIX}[0-9]*"))[:-keep]:
            doomed = old.rename(old.with_name(f".{old.name}.old"))  # never a half-deleted epoch_XXXX
            shutil.rmtree(doomed)
    accelerator.wait_for_everyone()
    return target


def _load_training_state(accelerator: Accelerator, checkpoint: Path, ema: ModelEmaV3 | None) -> RunState:
    accelerator.load_state(str(checkpoint))
    if ema is not None:
        if not (checkpoint / EMA_WEIGHTS).is_file():
            raise ValueError(f"--model-ema is on but {checkpoint} holds no EMA weights ({EMA_WEIGHTS})")
        safetensors.torch.load_model(ema.module, str(checkpoint / EMA_WEIGHTS), device=str(accelerator.device))
    return RunState(**json.loads((checkpoint / TRAINER_STATE).read_text()))


def _append_metrics(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as handle:
        handle.write(json.dumps(record) + "\n")


def _truncate_metrics(path: Path, last_epoch: int) -> None:
    """Drop the lines of epochs after ``last_epoch`` (a run killed after logging but before checkpointing)."""
    if path.is_file():
        lines = [line for line in path.read_text().splitlines() if line and json.loads(line)["epoch"] <= last_epoch]
        path.write_text("".join(line + "\n" for line in lines))


def _swap_in(new: Path, target: Path) -> None:
    """Rename the complete folder ``new`` to ``target``; an existing ``target`` is deleted only afterwards."""
    stale = target.with_name(f".{target.name}.old")
    shutil.rmtree(stale, ignore_errors=True)
    if target.exists():
        target.rename(stale)
    new.rename(target)
    shutil.rmtree(stale, ignore_errors=True)


def save_final_model(model: nn.Module, out_dir: Path, label_names: list[str]) -> Path:
    """Write the trained model to ``out_dir`` so that timm and transformers both load it.

    A registered structinit ViT goes through :func:`structinit_hf.export.save_checkpoint` (timm's
    format under a stock timm name, plus transformers' config and image processor); another timm model
    is saved in timm's format, which transformers loads through its ``TimmWrapper``; a transformers
    model is saved with ``save_pretrained``.
    """
    if isinstance(model, ClassifierLogits):
        return replace_folder(out_dir, model.model.save_pretrained)
    if isinstance(model, VisionTransformer) and model.pretrained_cfg.get("architecture") in TIMM_VARIANTS:
        return save_checkpoint(model, out_dir, label_names=label_names)
    return replace_folder(out_dir, lambda folder: save_timm_folder(model, folder, label_names))


def save_timm_folder(model: nn.Module, folder: Path, label_names: list[str]) -> None:
    """timm's ``save_for_hf`` (``config.json`` + ``model.safetensors``), loadable by transformers' TimmWrapper too.

    The wrapper passes ``num_classes`` itself, so it must not also sit in ``model_args``.
    """
    save_for_hf(model, folder, model_config={"label_names": label_names}, safe_serialization=True)
    config_file = Path(folder) / "config.json"
    config = json.loads(config_file.read_text())
    config.get("model_args", {}).pop("num_classes", None)
    config_file.write_text(json.dumps(config, indent=2) + "\n")


def _nonfinite_error(what: str, state: RunState, epoch: int, output_dir: Path) -> FloatingPointError:
    checkpoints = sorted((output_dir / "checkpoints").glob(f"{CHECKPOINT_PREFIX}[0-9]*"))
    kept = f"the last good checkpoint is {checkpoints[-1]}" if checkpoints else "no checkpoint was written yet"
    return FloatingPointError(
        f"{what} at epoch {epoch + 1} (after optimizer step {state.step}); training stopped and {kept}. "
        "Resume from it with --resume and a lower --lr, a longer --warmup-epochs or a smaller --clip-grad."
    )


def _all_finite(accelerator: Accelerator, value: torch.Tensor) -> bool:
    """True on every process unless some process saw a non-finite value (a collective: call it everywhere)."""
    bad = (~torch.isfinite(value)).any().to(torch.float32).reshape(1)
    return accelerator.reduce(bad, reduction="sum").item() == 0


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Train ``args.model`` on ``args.dataset``; write the run folder and return the results record."""
    output_dir = Path(args.output_dir) if args.output_dir is not None else _default_output_dir(args)
    accelerator = Accelerator(
        gradient_accumulation_steps=args.grad_accum,
        mixed_precision=args.mixed_precision,
        log_with=None if args.report_to == "none" else args.report_to,
        project_dir=str(output_dir),
    )
    micro_batch = _check_args(args, accelerator.num_processes)
    if args.resume is None and (output_dir / "checkpoints").is_dir() and any((output_dir / "checkpoints").iterdir()):
        raise ValueError(f"{output_dir} already holds checkpoints; pass --resume latest or another --output-dir")
    set_seed(args.seed)

    with accelerator.main_process_first():
        data = load_image_classification(
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
    model, init = load_model(
        args.model,
        num_classes=data.num_classes,
        label_names=data.label_names,
        model_kwargs=args.model_kwargs,
        trust_remote_code=args.trust_remote_code,
    )
    data_config = model_data_config(model)
    augmentation = dict(
        auto_augment=None if args.aa == "none" else args.aa,
        hflip=args.hflip,
        scale=tuple(args.scale),
        ratio=tuple(args.ratio),
        re_prob=args.reprob,
    )

    def images(split, is_training: bool) -> TransformedImages:
        transform = build_transform(data_config, is_training, **(augmentation if is_training else {}))
        return TransformedImages(split, data.image_column, data.label_column, transform)

    eval_batch = micro_batch * args.grad_accum
    train_loader = train_dataloader(images(data.train, True), micro_batch, args.batch_size, args.seed, args.workers)
    val_loader = eval_dataloader(images(data.validation, False), eval_batch, args.workers)
    eval_loader = eval_dataloader(images(data.evaluation, False), eval_batch, args.workers)

    optimizer = create_optimizer_v2(model, opt=args.opt, lr=args.lr, weight_decay=args.weight_decay, eps=args.opt_eps)
    model, optimizer, train_loader, val_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, val_loader, eval_loader
    )
    ema = ModelEmaV3(accelerator.unwrap_model(model), decay=args.model_ema_decay) if args.model_ema else None
    steps_per_epoch = len(data.train) // args.batch_size
    total_steps = steps_per_epoch * args.epochs
    warmup_steps = min(round(args.warmup_epochs * steps_per_epoch), total_steps)
    if args.warmup_epochs >= args.epochs:
        accelerator.print(
            f"warning: --warmup-epochs {args.warmup_epochs:g} >= --epochs {args.epochs}: the lr never decays"
        )
    scheduler = CosineLRScheduler(
        optimizer,
        t_initial=total_steps,
        lr_min=args.min_lr,
        warmup_t=warmup_steps,
        warmup_lr_init=args.warmup_lr,
        t_in_epochs=False,
    )
    mixup = None
    if args.mixup or args.cutmix:
        mixup = Mixup(
            mixup_alpha=args.mixup,
            cutmix_alpha=args.cutmix,
            label_smoothing=args.label_smoothing,
            num_classes=data.num_classes,
        )
    criterion = SoftTargetCrossEntropy() if mixup else nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)

    metrics_file = output_dir / "metrics.jsonl"
    state = RunState()
    if args.resume is not None:
        checkpoint = find_checkpoint(output_dir, args.resume)
        state = _load_training_state(accelerator, checkpoint, ema)
        if accelerator.is_main_process:
            _truncate_metrics(metrics_file, state.epoch)
        accelerator.print(f"resumed from {checkpoint} (epoch {state.epoch}, step {state.step})")
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
    accelerator.init_trackers(
        output_dir.name,
        config={k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in vars(args).items()},
    )
    accelerator.print(
        f"{args.model} on {args.dataset}: {len(data.train)} train / {len(data.validation)} val "
        f"[{data.validation_split}] / {len(data.evaluation)} eval [{data.evaluation_split}] images, "
        f"{data.num_classes} classes; {accelerator.num_processes} process(es) x micro-batch {micro_batch} x "
        f"{args.grad_accum} accumulation = batch {args.batch_size}; {steps_per_epoch} steps/epoch"
    )

    eval_model = ema.module if ema is not None else model
    for epoch in range(state.epoch, args.epochs):
        epoch_start = time.perf_counter()
        set_seed(args.seed + epoch, device_specific=True)  # this epoch's augmentation, mixup and drop-path
        train_loader.set_epoch(epoch)  # and its shuffle order
        scheduler.step_update(state.step)
        model.train()
        loss_sum = torch.zeros((), device=accelerator.device)
        micro_steps = epoch_images = 0
        progress = tqdm(
            train_loader,
            desc=f"epoch {epoch + 1}/{args.epochs}",
            disable=not accelerator.is_local_main_process,
            leave=False,
        )
        for inputs, labels in progress:
            with accelerator.accumulate(model):
                targets = labels
                if mixup is not None:
                    inputs, targets = mixup(inputs, labels)
                loss = criterion(model(inputs), targets)
                accelerator.backward(loss)
                if accelerator.sync_gradients and args.clip_grad > 0:
                    accelerator.clip_grad_norm_(model.parameters(), args.clip_grad)
                optimizer.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                state.step += 1
                scheduler.step_update(state.step)
                if ema is not None:
                    ema.update(accelerator.unwrap_model(model), step=state.step)
            loss_sum += loss.detach()
            micro_steps += 1
            epoch_images += inputs.shape[0] * accelerator.num_processes
            if micro_steps % LOG_EVERY == 0:
                running = accelerator.reduce(loss_sum, reduction="mean") / micro_steps
                if not _all_finite(accelerator, running):
                    raise _nonfinite_error(f"the training loss became {running.item()}", state, epoch, output_dir)
                elapsed = time.perf_counter() - epoch_start
                progress.set_postfix(
                    loss=f"{running.item():.4f}",
                    lr=f"{optimizer.param_groups[0]['lr']:.2e}",
                    img_s=f"{epoch_images / elapsed:.1f}",
                )
        train_time = time.perf_counter() - epoch_start
        train_loss = accelerator.reduce(loss_sum, reduction="mean") / max(micro_steps, 1)
        if not _all_finite(accelerator, train_loss):
            raise _nonfinite_error(f"the training loss became {train_loss.item()}", state, epoch, output_dir)
        weights = torch.stack([p.detach().float().abs().sum() for p in accelerator.unwrap_model(model).parameters()])
        if not _all_finite(accelerator, weights):
            raise _nonfinite_error("the weights became non-finite", state, epoch, output_dir)
        val = evaluate(eval_model, val_loader, accelerator)
        state.epoch, state.images_seen = epoch + 1, state.images_seen + epoch_images
        state.wall_time_s += time.perf_counter() - epoch_start
        record = {
            "epoch": state.epoch,
            "step": state.step,
            "train_loss": train_loss.item(),
            "val_top1": val["top1"],
            "val_top5": val["top5"],
            "lr": optimizer.param_groups[0]["lr"],
            "images_per_sec": epoch_images / train_time,
            "images_seen": state.images_seen,
            "wall_time_s": round(state.wall_time_s, 3),
        }
        if accelerator.is_main_process:
            _append_metrics(metrics_file, record)
        accelerator.log({k: v for k, v in record.items() if k != "epoch"}, step=state.epoch)
        accelerator.print(
            f"epoch {state.epoch}/{args.epochs}  train loss {record['train_loss']:.4f}  "
            f"val top-1 {val['top1']:.2f}%  top-5 {val['top5']:.2f}%  lr {record['lr']:.2e}  "
            f"{record['images_per_sec']:.1f} img/s  ({train_time:.1f} s)"
        )
        if state.epoch % args.checkpoint_every == 0 or state.epoch == args.epochs:
            _save_training_state(accelerator, output_dir, state, ema, args.keep_checkpoints)

    final = evaluate(eval_model, eval_loader, accelerator)
    record = results_record(
        args,
        init=init,
        split=data.evaluation_split,
        label_names=data.label_names,
        metrics=final,
        epochs=state.epoch,
        images_seen=state.images_seen,
        wall_time_s=state.wall_time_s,
    )
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        trained = ema.module if ema is not None else accelerator.unwrap_model(model)
        final_dir = save_final_model(trained, output_dir / "final", data.label_names)
        write_json(final_dir / "results.json", record)
        write_json(output_dir / "results.json", record)
    accelerator.print(
        f"{data.evaluation_split}: top-1 {final['top1']:.2f}%  top-5 {final['top5']:.2f}%  "
        f"({final['num_samples']} images); model and results in {output_dir / 'final'}"
    )
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return record
