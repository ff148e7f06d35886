"""The output folder of a training run: its default name, its lock, the checkpoint it resumes from, its metrics.

Before a model is built or an image read, the main process takes ``run.lock``,
clears what a killed run left behind, and a resumed checkpoint's recorded settings are compared with this run's.
Once the run is prepared, :func:`start_run_state` restores the checkpoint's state and cuts the metrics back to it
(:mod:`structinit_hf.train.checkpoints` describes the folder).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelerate import Accelerator, PartialState
from accelerate.utils import broadcast_object_list
from timm.utils import ModelEmaV3
from torch import nn

from .args import TrainingSettings
from .checkpoints import (
    RunState,
    check_same_settings,
    clean_leftovers,
    load_training_state,
    read_trainer_state,
    reset_metrics,
    result_flags,
    resume_point,
)
from .errors import UsageError

__all__ = [
    "LOCK_FILE",
    "RunLock",
    "acquire_run_lock",
    "default_output_dir",
    "lock_run_folder",
    "open_run_folder",
    "start_run_state",
]


def default_output_dir(model: str, dataset: str) -> Path:
    """``runs/<model>-<dataset>``: the folder a run without ``--output-dir`` writes."""
    model_name = Path(model.removeprefix("hf-hub:")).name or "model"
    dataset_name = Path(dataset).name or "dataset"
    return Path("runs") / f"{model_name}-{dataset_name}"


def lock_run_folder(output_dir: Path, processes: PartialState) -> RunLock | None:
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


def open_run_folder(
    settings: TrainingSettings, accelerator: Accelerator, output_dir: Path, mixed_precision: str
) -> tuple[Path | None, int | None, str | None]:
    """Clear what a killed run left in ``output_dir`` and find the checkpoint ``--resume`` names, refusing one whose
    settings differ from this run's (trained at ``mixed_precision``).

    A resumed run keeps the ``--grad-accum`` it was started with. Returns the checkpoint (``None``: a fresh start),
    the gradient accumulation to train with (``None``: left to fit the memory) and where it comes from: ``"flag"``,
    ``"checkpoint"``, or ``None``.
    """
    grad_accum = settings.recipe.grad_accum
    accumulation_from = "flag" if grad_accum is not None else None
    if accelerator.is_main_process:
        clean_leftovers(output_dir)
    accelerator.wait_for_everyone()
    checkpoint = resume_point(output_dir, settings.run.resume)
    started = _started_accumulation(checkpoint)
    if grad_accum is None and started is not None:
        grad_accum, accumulation_from = started, "checkpoint"
    if checkpoint is not None:
        flags = settings.flags(mixed_precision=mixed_precision, grad_accum=grad_accum)
        check_same_settings(checkpoint, result_flags(flags))
    return checkpoint, grad_accum, accumulation_from


def start_run_state(
    flags: dict[str, Any],
    accelerator: Accelerator,
    output_dir: Path,
    checkpoint: Path | None,
    ema: ModelEmaV3 | None,
    model: nn.Module,
) -> RunState:
    """Where the run starts: the checkpoint's state restored (a fresh one without), the folder's metrics cut back to
    it, and the trackers started."""
    state = RunState()
    if checkpoint is not None:
        state = load_training_state(accelerator, checkpoint, ema, model)
        accelerator.print(f"resumed from {checkpoint} (epoch {state.epoch}, step {state.step})")
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        reset_metrics(output_dir, state.epoch)
    accelerator.init_trackers(
        output_dir.name,
        config={k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in flags.items()},
    )
    return state


LOCK_FILE = "run.lock"


@dataclass
class RunLock:
    """A held ``run.lock``: release it when the run ends (the kernel does if the process dies first)."""

    path: Path
    fd: int | None
    created_folder: bool = False  # the run made the output folder: a run that wrote nothing leaves none

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still locked: no other run holds this file yet
        finally:
            os.close(self.fd)  # closing drops the flock
            self.fd = None
        if self.created_folder:
            try:
                self.path.parent.rmdir()  # only if empty
            except OSError:
                pass


def _holder(path: Path) -> str:
    """``pid 1234 (started 2026-11-23 20:41:07 UTC on host, `python scripts/train.py ...`)`` from the lock file."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return "another process (its lock file is being written)"
    command = " ".join(record.get("command", []))
    if len(command) > 160:
        command = command[:157] + "..."
    return f"pid {record.get('pid')} (started {record.get('started')} on {record.get('host')}, `{command}`)"


def acquire_run_lock(output_dir: Path) -> RunLock:
    """Take ``output_dir/run.lock`` for this process, or raise :class:`UsageError` naming the live run holding it."""
    output_dir = Path(output_dir)
    created = not output_dir.exists()
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(
                f"{output_dir} is in use by a live training run, {_holder(path)}; wait for it to finish or stop it "
                f"(kill <pid>), then rerun with --resume latest, or pass another --output-dir"
            ) from None
        try:
            same_file = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same_file = False  # the previous holder removed it between our open and our lock
        if same_file:
            break
        os.close(fd)
    record = {
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "host": socket.gethostname(),
        "command": [Path(sys.executable).name, *sys.argv],
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    return RunLock(path, fd, created)
