"""The one entry into training, :func:`run` (settings in, a :class:`~.settings.RunRecord` out), and its epoch loop.

Trains an image classifier with Accelerate: the paper's CIFAR recipe on any ``datasets`` source.

:func:`run` reads as accelerate's ``complete_cv_example.py`` does: :func:`setup_run` (device
defaults, model, data, ``accelerator.prepare``, resume), then per epoch :func:`train_one_epoch`,
:func:`validate`, :func:`log_epoch` and :func:`~structinit_hf.train.training.checkpoints.save_training_state`, then
:func:`finish_run`.  The same code runs on one CPU, several GPUs, several machines or FSDP, whatever
``accelerate launch`` sets up.  Each epoch's randomness (shuffle order, each sample's augmentation,
mixup) is a function of ``(seed, epoch)`` and the learning rate a function of the step, so a run
resumed from an epoch checkpoint reaches the same weights as an uninterrupted one; one resumed inside an epoch
skips the batches already trained (accelerate's ``skip_first_batches``) and continues from the random state its
checkpoint restored, to the same weights too.  Checkpoints inside an epoch and stop signals:
:mod:`.stopping`.  The run folder is described in :mod:`structinit_hf.train.training.run_folder`.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from accelerate import skip_first_batches
from accelerate.utils import set_seed
from tqdm.auto import tqdm

from ...atomic import write_json
from ..cli.args import settings_from_args
from ..models.evaluation import peak_gpu_memory_mb, results_record, score
from ..models.export import save_final_model
from ..settings import RunRecord, TrainingSettings
from .checkpoints import complete_checkpoints, last_good, save_training_state, writing
from .prepare import Run, setup_run
from .run_folder import METRICS, append_metrics, with_recorded_flags
from .stopping import Checkpointing, TrainingStopped, resume_command

__all__ = [
    "DIVERGENCE_FACTOR",
    "LOG_EVERY",
    "finish_run",
    "log_epoch",
    "run",
    "run_command",
    "train_one_epoch",
    "validate",
]

LOG_EVERY = 10  # micro-batches between progress updates (and the loss checks: non-finite, diverged)


# A classifier that guesses uniformly scores ln(classes) (2.30 for 10); a run's first micro-batch, before any update,
# scores near it (a few times it at most after an unusual init). Ten times the larger of the two is a loss no healthy
# run reaches at any step: the network answers most images confidently wrong, its weights diverging (lr 10 on 10
# classes: 2.3, then 5021 by step 10). ln(classes) keeps the bound wide where a run starts low (a fine-tuned model).
DIVERGENCE_FACTOR = 10


def _progress(run: Run, total: int, desc: str) -> tqdm:
    """A progress bar counting images, so that its rate is images per second."""
    return tqdm(
        total=total,
        desc=desc,
        unit="img",
        leave=False,
        disable=not run.accelerator.is_local_main_process,
    )


def _nonfinite_error(what: str, run: Run, epoch: int) -> FloatingPointError:
    kept = last_good(run.output_dir)
    return FloatingPointError(
        f"{what} at epoch {epoch + 1} (after optimizer step {run.state.step}); training stopped and {kept}. "
        "Training is deterministic, so --resume with the same flags would repeat it (and a resume refuses other "
        "flags): start a new run in another --output-dir with a lower --lr, a longer --warmup-epochs or a smaller "
        "--clip-grad"
    )


class LossBound:
    """Stops a run whose loss grows past :data:`DIVERGENCE_FACTOR` times the larger of the loss it started from (its
    first micro-batch, before any update) and chance's ``ln(classes)``."""

    def __init__(self, num_classes: int) -> None:
        self.num_classes, self.bound = num_classes, None

    def start(self, loss: torch.Tensor) -> None:
        """Take the run's first micro-batch ``loss`` (its mean over the processes) as where it started (one wait for
        the device, once)."""
        if self.bound is None:
            self.bound = DIVERGENCE_FACTOR * max(loss.item(), math.log(max(self.num_classes, 2)))

    def check(self, run: Run, loss: float, epoch: int) -> None:
        """A ``loss`` over the bound stops training (``FloatingPointError``, the exit status of a non-finite loss)
        naming the step, the loss and the learning rate."""
        if self.bound is not None and loss > self.bound:
            lr = run.optimizer.param_groups[0]["lr"]
            raise _nonfinite_error(
                f"the training loss grew to {loss:.4g} at lr {lr:.3g}, past {self.bound:.4g} ({DIVERGENCE_FACTOR}x "
                f"the larger of its first micro-batch's and chance's ln({self.num_classes})): it diverged",
                run,
                epoch,
            )


def _mean_loss(run: Run, loss_sum: torch.Tensor, micro_steps: int, epoch: int) -> float:
    """The mean training loss so far over every process: one collective and one wait for the device (call it on
    every process).  A non-finite loss on any process spreads through the mean and stops training on all."""
    value = (run.accelerator.reduce(loss_sum, reduction="mean") / max(micro_steps, 1)).item()
    if not math.isfinite(value):
        raise _nonfinite_error(f"the training loss became {value}", run, epoch)
    return value


def _save(run: Run) -> Path:
    """Checkpoint where the run is now (keeping the newest ``--keep-checkpoints``)."""
    path = save_training_state(
        run.accelerator, run.output_dir, run.state, run.flags, run.ema, run.settings.run.keep_checkpoints
    )
    if run.checkpointing is not None:
        run.checkpointing.saved(run.state.step)
    return path


def _stop(run: Run, where: str) -> TrainingStopped:
    """Checkpoint the steps trained since the newest checkpoint (if any) and say so: what :func:`run` raises."""
    saved = run.checkpointing.saved_step != run.state.step
    checkpoint = _save(run) if saved else next(reversed(complete_checkpoints(run.output_dir)), None)
    return run.checkpointing.stopped(where, checkpoint, saved)


def train_one_epoch(run: Run, epoch: int) -> dict[str, float]:
    """One pass over the training data (the rest of it, resumed inside the epoch); returns the mean loss, images
    trained and seconds taken."""
    accelerator, recipe, state = run.accelerator, run.recipe, run.state
    start = time.perf_counter()
    epoch_steps, accumulation = run.micro_steps_per_epoch, accelerator.gradient_accumulation_steps
    done = state.epoch_step * accumulation  # micro-batches of this epoch trained before a resume
    if not done:  # else the random state the checkpoint restored continues
        set_seed(run.settings.run.seed + epoch, device_specific=True)  # this epoch's mixup and drop-path
    if run.batches is None:  # one pass of the loader over this epoch and every later one (their shuffle orders and
        run.train_loader.set_epoch(epoch)  # per-sample augmentation seeds): its workers run ahead into the next epoch
        loader = skip_first_batches(run.train_loader, done) if done else run.train_loader
        if len(loader) != epoch_steps * (run.recipe.epochs - epoch) - done:  # else epochs would cut into each other
            raise RuntimeError(
                f"the training loader holds {len(loader)} micro-batches for epochs {epoch + 1} to "
                f"{run.recipe.epochs}, not {epoch_steps} an epoch: micro-batch x accumulation x processes is not "
                "the global batch"
            )
        run.batches = iter(loader)
    run.scheduler.step_update(state.step)
    run.model.train()
    loss_sum = torch.full((), state.epoch_loss_sum, device=accelerator.device)
    micro_steps, images = done, done * run.micro_batch * accelerator.num_processes
    progress = _progress(run, epoch_steps * run.micro_batch * accelerator.num_processes, f"epoch {epoch + 1}")
    progress.update(images)
    waited = [0.0]  # seconds this epoch spent waiting for the next batch (the input pipeline, inline without workers)
    logged = [state.epoch_loss_sum, done]  # the loss summed up to the last check, and the micro-batches it sums
    try:  # the bar closes whatever ends the epoch (a signal among them): the next line starts clean
        for inputs, labels in _waited_for(itertools.islice(run.batches, epoch_steps - done), waited):
            with accelerator.accumulate(run.model):
                targets = labels
                if run.mixup is not None:
                    inputs, targets = run.mixup(inputs, labels)
                loss = run.step(inputs, targets)
                if accelerator.sync_gradients and recipe.clip_grad > 0:
                    accelerator.clip_grad_norm_(run.model.parameters(), recipe.clip_grad)
                run.optimizer.step()
                run.optimizer.zero_grad()
            if accelerator.sync_gradients:
                state.step += 1
                run.scheduler.step_update(state.step)
                if run.ema is not None:
                    run.ema.update(accelerator.unwrap_model(run.model), step=state.step)
            loss_sum += loss.detach()
            if micro_steps == done and run.loss_bound is not None:
                run.loss_bound.start(accelerator.reduce(loss.detach(), reduction="mean"))  # every process's bound
            micro_steps += 1
            images += inputs.shape[0] * accelerator.num_processes
            progress.update(inputs.shape[0] * accelerator.num_processes)
            if micro_steps % LOG_EVERY == 0 or micro_steps == epoch_steps:  # at least once an epoch
                running = _mean_loss(run, loss_sum, micro_steps, epoch)
                recent = (running * micro_steps - logged[0]) / (micro_steps - logged[1])  # since the last check
                logged[:] = running * micro_steps, micro_steps
                if run.loss_bound is not None:
                    run.loss_bound.check(run, recent, epoch)
                progress.set_postfix(loss=f"{running:.4f}", lr=f"{run.optimizer.param_groups[0]['lr']:.2e}")
            if accelerator.sync_gradients and run.checkpointing is not None:
                save, stop = run.checkpointing.after_step(accelerator, state.step, micro_steps == epoch_steps)
                if save:
                    state.epoch_step = micro_steps // accumulation
                    state.epoch_loss_sum = accelerator.reduce(loss_sum, reduction="mean").item()
                    state.epoch_seconds += time.perf_counter() - start
                    start = time.perf_counter()
                if stop:
                    raise _stop(run, f"in epoch {epoch + 1} after step {state.step}")
                if save:
                    _save(run)
    finally:
        progress.close()
    if epoch + 1 == run.recipe.epochs:
        next(run.batches, None)  # the pass ends: accelerate's end-of-loader bookkeeping
    seconds = state.epoch_seconds + time.perf_counter() - start
    train_loss = _mean_loss(run, loss_sum, micro_steps, epoch)
    weights = sum(p.detach().float().abs().sum() for p in accelerator.unwrap_model(run.model).parameters())
    if not math.isfinite(accelerator.reduce(weights, reduction="sum").item()):
        raise _nonfinite_error("the weights became non-finite", run, epoch)
    return {"train_loss": train_loss, "images": images, "seconds": seconds, "data_wait_s": waited[0]}


def _waited_for(batches: Iterator[Any], waited: list[float]) -> Iterator[Any]:
    """``batches``, adding the seconds each took to arrive to ``waited[0]`` (timm's train.py logs it as data time)."""
    while True:
        start = time.perf_counter()
        batch = next(batches, None)
        waited[0] += time.perf_counter() - start
        if batch is None:
            return
        yield batch


def validate(run: Run, loader: Any, desc: str) -> dict[str, float | int]:
    """Top-1 / top-5 of the evaluated model (the EMA when kept) over ``loader``, without gradients, at the
    run's precision and evaluation batch size; adds ``images_per_sec`` and ``seconds``."""
    start = time.perf_counter()
    progress = _progress(run, len(loader.dataset), desc)

    def counted():
        for images, labels in loader:
            progress.update(images.shape[0] * run.accelerator.num_processes)
            yield images, labels

    metrics = score(run.eval_forward(), counted(), run.accelerator)
    progress.close()
    seconds = time.perf_counter() - start
    return {**metrics, "images_per_sec": metrics["num_samples"] / seconds, "seconds": seconds}


def log_epoch(run: Run, trained: dict[str, float], val: dict[str, float | int]) -> dict[str, Any]:
    """Advance the run state by one epoch; write its ``metrics.jsonl`` line, tracker entry and summary."""
    state = run.state
    state.epoch, state.images_seen = state.epoch + 1, state.images_seen + trained["images"]
    state.epoch_step, state.epoch_loss_sum, state.epoch_seconds = 0, 0.0, 0.0
    state.wall_time_s += trained["seconds"] + val["seconds"]
    record = {
        "epoch": state.epoch,
        "step": state.step,
        "train_loss": trained["train_loss"],
        "val_top1": val["top1"],
        "val_top5": val["top5"],
        "lr": run.optimizer.param_groups[0]["lr"],
        "images_per_sec": trained["images"] / trained["seconds"],
        "val_images_per_sec": val["images_per_sec"],
        "train_s": round(trained["seconds"], 3),  # the epoch's training, of which data_wait_s waited for batches
        "data_wait_s": round(trained["data_wait_s"], 3),
        "val_s": round(val["seconds"], 3),
        "images_seen": state.images_seen,
        "wall_time_s": round(state.wall_time_s, 3),
        "peak_gpu_memory_mb": peak_gpu_memory_mb(run.accelerator.device),
    }
    if run.accelerator.is_main_process:
        with writing(run.output_dir / METRICS, run.output_dir):
            append_metrics(run.output_dir, record)
    run.accelerator.log({k: v for k, v in record.items() if k != "epoch" and v is not None}, step=state.epoch)
    run.accelerator.print(
        f"epoch {state.epoch}/{run.recipe.epochs}  train loss {record['train_loss']:.4f}  "
        f"val top-1 {val['top1']:.2f}%  top-5 {val['top5']:.2f}%  lr {record['lr']:.2e}  "
        f"{record['images_per_sec']:.1f} img/s train, {record['val_images_per_sec']:.1f} img/s val  "
        f"({trained['seconds']:.1f} s)"
    )
    return record


def finish_run(run: Run) -> dict[str, Any]:
    """Score the evaluation split, save ``final/`` and ``results.json``; return the results record."""
    accelerator, data, state = run.accelerator, run.data, run.state
    final = validate(run, run.eval_loader, data.evaluation_split)
    record = results_record(
        run.flags,
        init=run.init,
        split=data.evaluation_split,
        label_names=data.label_names,
        metrics=final,
        epochs=state.epoch,
        images_seen=state.images_seen,
        wall_time_s=state.wall_time_s,
    )
    record["peak_gpu_memory_mb"] = peak_gpu_memory_mb(run.accelerator.device)
    record["global_batch"] = run.recipe.batch_size  # --batch-size, or fitted to a smaller training split
    record["micro_batch"], record["grad_accum"] = run.micro_batch, run.accelerator.gradient_accumulation_steps
    record["mixed_precision"] = run.accelerator.mixed_precision  # what trained (fp16 is refused on a CPU)
    record["fine_tuned_from"] = run.fine_tuned_from
    record["train_images"] = len(data.train)
    record["input_size"] = list(run.input_size)  # what the model saw: channels, height, width
    record["source_sizes"] = [list(size) for size in data.source_sizes] if data.source_sizes else None
    record["images_per_class"] = data.images_per_class()
    record["held_out_fraction"] = data.held_out_fraction
    record["dataset_digest"] = data.files_digest  # compare reuses the run only on these files
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        trained = run.ema.module if run.ema is not None else accelerator.unwrap_model(run.model)
        final_dir = run.output_dir / "final"
        with writing(final_dir, run.output_dir):
            save_final_model(trained, final_dir, data.label_names, init=run.init, fine_tuned_from=run.fine_tuned_from)
        for path in (final_dir / "results.json", run.output_dir / "results.json"):
            with writing(path, run.output_dir):
                write_json(path, record)
    accelerator.print(
        f"{data.evaluation_split}: top-1 {final['top1']:.2f}%  top-5 {final['top5']:.2f}%  "
        f"({final['num_samples']} images); model and results in {run.output_dir / 'final'}"
    )
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return record


def run(settings: TrainingSettings, on_epoch: Callable[[dict[str, Any]], None] | None = None) -> RunRecord:
    """Train the model on the dataset that ``settings`` name; write the run folder and return its record.

    The one entry into training: ``structinit-hf train``, ``compare``, the study's benchmarks and a notebook all call
    it. ``on_epoch`` is called with each epoch's ``metrics.jsonl`` record (a caller's progress display)."""
    started = time.perf_counter()
    with Checkpointing(settings.run.checkpoint_steps, settings.run.checkpoint_minutes) as checkpointing:
        training = setup_run(settings)  # a signal during it is obeyed before the first step
        training.accelerator.print(f"set-up: {time.perf_counter() - started:.1f} s (data, model, init, loaders)")
        checkpointing.saved_step = training.state.step  # where the run starts: nothing new to save yet
        training.checkpointing = checkpointing
        training.loss_bound = LossBound(len(training.data.label_names))
        try:
            return _train(training, on_epoch)
        except TrainingStopped:
            raise
        except KeyboardInterrupt:
            kept = complete_checkpoints(training.output_dir)
            raise KeyboardInterrupt(
                f"training stopped in epoch {training.state.epoch + 1}; "
                + (f"the last checkpoint is {kept[-1]}: " if kept else "no checkpoint yet: ")
                + "rerun the same command with --resume latest to continue"
            ) from None
        finally:
            if training.lock is not None:
                training.lock.release()


def _train(training: Run, on_epoch: Callable[[dict[str, Any]], None] | None) -> RunRecord:
    """:func:`run`'s epochs, a checkpoint after every ``--checkpoint-every``-th and the last, and the final model;
    stopped at the first step boundary after a signal."""
    epochs, every = training.recipe.epochs, training.settings.run.checkpoint_every
    for epoch in range(training.state.epoch, epochs):
        if training.checkpointing.stop_requested(training.accelerator):
            raise _stop(training, f"in epoch {epoch + 1} at step {training.state.step}")
        trained = train_one_epoch(training, epoch)
        val = validate(training, training.val_loader, training.data.validation_split)
        record = log_epoch(training, trained, val)
        if on_epoch is not None:
            on_epoch(record)
        if training.state.epoch % every == 0 or training.state.epoch == epochs:
            _save(training)
    return RunRecord(training.output_dir, finish_run(training))


def run_command(args: argparse.Namespace) -> RunRecord:
    """``structinit-hf train`` (``scripts/train.py``): :func:`run` on the settings of the parsed command line, a resumed
    run's flags not given taken from its checkpoint; stopped by a signal, it names the command line that resumes."""
    settings = with_recorded_flags(settings_from_args(args), args.flags_given)
    try:
        return run(settings)
    except TrainingStopped as stopped:
        stopped.resume = resume_command(stopped.checkpoint)
        raise
