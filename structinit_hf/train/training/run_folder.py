"""A training run's folder: its default name, its lock, what a kill left, the point it resumes from, its metrics.

A run folder holds ``checkpoints/epoch_XXXX/`` (:mod:`.checkpoints`), ``metrics.jsonl`` (one line per epoch),
``final/`` (:mod:`.export`) and ``results.json``. Before a model is built or an image read, the main process takes
``run.lock`` (:func:`lock_run_folder`) and :func:`open_run_folder` clears what a killed run left behind and finds the
checkpoint ``--resume`` names, read once into a :class:`ResumePoint`. Once the model is prepared,
:func:`start_run_state` refuses other result flags than the run was started with (:meth:`ResumePoint.check_same_flags`),
restores the checkpoint and cuts ``metrics.jsonl`` back to it, so the same command works before and after a kill at
any instant and no epoch is logged twice (with ``--resume auto``). ``--output-dir X --resume latest`` alone resumes:
:func:`with_recorded_flags` takes every result flag the command line leaves out from the checkpoint.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelerate import Accelerator, PartialState
from accelerate.utils import broadcast_object_list
from timm.utils import ModelEmaV3
from torch import nn

from ...atomic import recover_folder, write_text
from ..cli.errors import UsageError
from ..settings import TrainingSettings
from .checkpoints import RunState, complete_checkpoints, find_checkpoint, load_training_state, read_trainer_state

__all__ = [
    "LOCK_FILE",
    "METRICS",
    "RESULT_NEUTRAL_FLAGS",
    "ResumePoint",
    "RunLock",
    "acquire_run_lock",
    "append_metrics",
    "clean_leftovers",
    "default_output_dir",
    "lock_run_folder",
    "open_run_folder",
    "result_flags",
    "start_run_state",
    "with_recorded_flags",
]

LOCK_FILE = "run.lock"


# The run.lock descriptors this process holds. A forked child (a loader worker) inherits them, and with them the flock:
# a run killed with SIGKILL would keep its folder locked until its orphaned workers noticed, seconds later. Each child
# closes its copies at once, so the lock lives exactly as long as the run's own process.
_HELD_LOCKS: set[int] = set()


def _close_inherited_locks() -> None:
    for fd in _HELD_LOCKS:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD_LOCKS.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


METRICS = "metrics.jsonl"


# flags that cannot change the trained weights or the scores: a resumed run may change them freely
RESULT_NEUTRAL_FLAGS = frozenset(
    {
        "workers", "report_to", "resume", "output_dir", "checkpoint_every", "checkpoint_steps", "checkpoint_minutes",
        "keep_checkpoints", "compile",
        "eval_batch_size", "trust_remote_code", "allow_new_label_names",
    }
)  # fmt: skip


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


@dataclass(frozen=True)
class ResumePoint:
    """Where a run starts: the checkpoint it continues from (``None``: a fresh start) with its ``trainer_state.json``
    read once, and the gradient accumulation it trains with (``None``: fitted to the memory) and where that comes
    from: ``"flag"`` (``--grad-accum``), ``"checkpoint"`` (the run was started with it) or ``None``."""

    checkpoint: Path | None = None
    trainer_state: dict[str, Any] = field(default_factory=dict)
    grad_accum: int | None = None
    accumulation_from: str | None = None

    def check_same_flags(self, flags: dict[str, Any]) -> None:
        """Refuse to resume with result flags other than those the run was started with (``flags`` is the run's whole
        record, :meth:`~structinit_hf.train.settings.TrainingSettings.flags`)."""
        started = self.trainer_state.get("settings")  # the run's flags (older runs: the result flags only)
        if self.checkpoint is None or started is None:  # a fresh start, or a checkpoint from before they were recorded
            return
        started, now = result_flags(started), result_flags(flags)
        changed = sorted(key for key in started.keys() | now.keys() if started.get(key) != now.get(key))
        if changed:
            differences = ", ".join(f"{_flag(key, started.get(key))} (now {_words(now.get(key))})" for key in changed)
            raise UsageError(
                f"cannot resume {self.checkpoint}: the run was started with {differences}; resume with the flags it "
                "was started with, or pass another --output-dir to start a new run with these"
            )


def with_recorded_flags(settings: TrainingSettings, given: Collection[str]) -> TrainingSettings:
    """``settings`` with the flags that the checkpoint ``--resume`` names recorded, for every flag not in ``given``
    (the ``dest`` of each flag the command line gave; those deciding the result are checked against the record as
    the run starts). Unchanged for a fresh start. Never taken: ``--output-dir`` and ``--resume`` (they found the
    checkpoint) and ``--grad-accum`` (:func:`open_run_folder` keeps the run's, as its memory plan fitted it)."""
    if settings.run.resume is None:
        return settings
    output_dir = settings.run.output_dir or default_output_dir(settings.model.model, settings.data.dataset)
    checkpoint = find_checkpoint(output_dir, settings.run.resume)
    recorded = read_trainer_state(checkpoint).get("settings") or {} if checkpoint is not None else {}
    kept = {*given, "output_dir", "resume", "grad_accum"}
    flags = TrainingSettings.flag_names()
    return settings.with_flags(**{key: value for key, value in recorded.items() if key in flags and key not in kept})


def open_run_folder(
    output_dir: Path, resume: str | None, grad_accum: int | None, processes: PartialState
) -> ResumePoint:
    """Clear what a killed run left in ``output_dir`` and find the checkpoint ``--resume`` names.

    A resumed run keeps the ``--grad-accum`` it was started with (it decides the result to the last bit) unless the
    flag is given, in which case the flags check refuses a different one."""
    if processes.is_main_process:
        clean_leftovers(output_dir)
    processes.wait_for_everyone()
    checkpoint = _resume_checkpoint(output_dir, resume)
    if checkpoint is None:
        return ResumePoint(grad_accum=grad_accum, accumulation_from="flag" if grad_accum is not None else None)
    trainer_state = read_trainer_state(checkpoint)
    started = trainer_state.get("settings", {}).get("grad_accum")
    if grad_accum is not None:
        return ResumePoint(checkpoint, trainer_state, grad_accum, "flag")
    return ResumePoint(checkpoint, trainer_state, started, "checkpoint" if started is not None else None)


def start_run_state(
    flags: dict[str, Any],
    accelerator: Accelerator,
    output_dir: Path,
    resume: ResumePoint,
    ema: ModelEmaV3 | None,
    model: nn.Module,
) -> RunState:
    """Where the run starts: the resumed run's ``flags`` checked against those it was started with, the checkpoint's
    state restored (a fresh one without), the folder's metrics cut back to it, and the trackers started."""
    resume.check_same_flags(flags)
    state = RunState()
    if resume.checkpoint is not None:
        state = load_training_state(accelerator, resume.checkpoint, resume.trainer_state, ema, model)
        accelerator.print(f"resumed from {resume.checkpoint} (epoch {state.epoch}, step {state.step})")
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        reset_metrics(output_dir, state.epoch)
    accelerator.init_trackers(
        output_dir.name,
        config={k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in flags.items()},
    )
    return state


def clean_leftovers(output_dir: Path) -> None:
    """Undo what a kill left in a run folder: half-written checkpoints, half-done folder swaps and deletions.

    Call it on the main process only, before anything reads the folder.
    """
    output_dir = Path(output_dir)
    checkpoints = output_dir / "checkpoints"
    for leftover in sorted(checkpoints.glob(".*")):
        name = leftover.name
        if name.endswith(".old"):  # a swap cut between its renames: put the previous version back
            recover_folder(checkpoints / name[1 : -len(".old")])
        elif leftover.exists():
            shutil.rmtree(leftover)
    recover_folder(output_dir / "final")
    for pattern in (".final.partial-*", ".results.json.*", f".{METRICS}.*", ".write-probe-*"):  # a failed or killed
        for leftover in output_dir.glob(pattern):  # write of final/, results.json, the metrics or a disk probe
            if leftover.is_dir():
                shutil.rmtree(leftover)
            else:
                leftover.unlink()


def _resume_checkpoint(output_dir: Path, resume: str | None) -> Path | None:
    """The checkpoint a run continues from, or ``None`` to start clean.

    Without ``--resume`` a folder that already holds a complete checkpoint is refused (its run would be
    overwritten); ``--resume auto`` on a folder with none starts clean, so the same command works
    before and after a kill at any instant (``--resume latest`` there is refused: nothing to resume).  A finished
    run whose checkpoints were deleted (its ``results.json`` stays; no kill leaves that) is refused either way rather
    than trained again.
    """
    output_dir = Path(output_dir)
    if resume is None and complete_checkpoints(output_dir):
        raise UsageError(
            f'{output_dir} already holds checkpoints; pass --resume latest (resume="latest") or another '
            "--output-dir (output_dir)"
        )
    checkpoint = find_checkpoint(output_dir, resume) if resume is not None else None
    if checkpoint is None and (output_dir / "results.json").is_file():
        raise UsageError(
            f"{output_dir} holds a finished run (results.json) and no checkpoint to resume from; pass another "
            "--output-dir, or move the old run away to train it again"
        )
    return checkpoint


def reset_metrics(output_dir: Path, last_epoch: int) -> None:
    """Cut ``metrics.jsonl`` back to the epochs up to ``last_epoch`` (0: remove it), each logged once."""
    _truncate_metrics(Path(output_dir) / METRICS, last_epoch)


def _truncate_metrics(path: Path, last_epoch: int) -> None:
    """Keep the lines of epochs up to ``last_epoch``, each once; a line cut short by a kill is dropped."""
    if not path.is_file():
        return
    kept: dict[int, str] = {}
    for line in path.read_text().splitlines():
        try:
            epoch = json.loads(line)["epoch"]
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
        if epoch <= last_epoch:
            kept[epoch] = line
    if kept:
        write_text(path, "".join(kept[epoch] + "\n" for epoch in sorted(kept)))
    else:
        path.unlink()


def append_metrics(output_dir: Path, record: dict[str, Any]) -> None:
    """Add one epoch's line to ``metrics.jsonl``."""
    with (Path(output_dir) / METRICS).open("a") as handle:
        handle.write(json.dumps(record) + "\n")


def result_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """Those of the recorded ``flags`` (:meth:`~..settings.TrainingSettings.flags`) that decide a run's
    result: what a resumed run must keep."""
    return {key: value for key, value in flags.items() if key not in RESULT_NEUTRAL_FLAGS}


def _words(value: Any) -> str:
    """A flag's value as the command line spells it: ``depth=1 img_size=16``, ``0.08 1.0``."""
    if isinstance(value, dict):
        return " ".join(f"{key}={item}" for key, item in value.items()) or "(none)"
    if isinstance(value, list | tuple):
        return " ".join(str(item) for item in value)
    return str(value)


def _flag(name: str, value: Any) -> str:
    return f"--{name.replace('_', '-')} {_words(value)}"


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
            _HELD_LOCKS.discard(self.fd)
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
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a user error every process hears (lock_run_folder shares it)
        reason = error.strerror or str(error)
        raise UsageError(f"--output-dir {output_dir}: cannot create the run folder ({reason}); pass another") from None
    path = output_dir / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(
                f"{output_dir} is in use by a live training run, {_holder(path)}; wait for it to finish or stop it "
                f'(kill <pid>), then rerun with --resume latest (resume="latest"), or pass another --output-dir'
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
    _HELD_LOCKS.add(fd)
    return RunLock(path, fd, created)
