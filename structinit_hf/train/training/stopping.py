"""When training writes a checkpoint inside an epoch, and how it stops on a signal.

A run checkpoints at epoch ends (``--checkpoint-every``) and, with ``--checkpoint-steps`` / ``--checkpoint-minutes``,
inside an epoch too. SIGTERM, SIGINT and SIGUSR1 (a scheduler's preemption, ``timeout``, Ctrl-C, a notebook's
interrupt) are noted, not obeyed at once: the step in flight finishes, a checkpoint is written and
:class:`TrainingStopped` ends the run (the commands print its one line and exit :data:`STOPPED_EXIT_STATUS`). A second
signal, more than :data:`SAME_REQUEST_S` after the first, stops at once (``KeyboardInterrupt``); within it, it is the
same request (``accelerate launch``'s launcher passes on the Ctrl-C its processes also received). With several
processes every optimizer step ends in one all-reduce of the flags, so all stop, or checkpoint, after the same step.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the commands import this module before they know the 'train' extra is installed
    from accelerate import Accelerator

__all__ = [
    "SAME_REQUEST_S",
    "STOPPED_EXIT_STATUS",
    "STOP_SIGNALS",
    "Checkpointing",
    "TrainingStopped",
    "resume_command",
]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


STOPPED_EXIT_STATUS = 75  # sysexits' EX_TEMPFAIL: stopped at a checkpoint on a signal; the same command continues


SAME_REQUEST_S = 1.0  # signals this close to the first are one request to stop


class TrainingStopped(KeyboardInterrupt):
    """Training stopped on a signal after its last step (a ``KeyboardInterrupt``, so nothing catching ``Exception``
    swallows it); ``str()`` is the one line a command prints: the signal, what was saved, the command that resumes."""

    def __init__(self, signal_name: str, where: str, checkpoint: Path | None, saved: bool, resume: str) -> None:
        super().__init__(signal_name)
        self.signal_name, self.where, self.checkpoint, self.saved, self.resume = (
            signal_name, where, checkpoint, saved, resume
        )  # fmt: skip

    def __str__(self) -> str:
        if self.saved:
            kept = f"saved {self.checkpoint}"
        elif self.checkpoint is not None:
            kept = f"nothing trained since {self.checkpoint}"
        else:
            kept = "nothing trained yet, so nothing to save"
        return f"stopped by {self.signal_name} {self.where}: {kept}; resume with: {self.resume}"


class Checkpointing:
    """The signals a run has received and its step / minute checkpoint clock; a context manager that installs the
    signal handlers (in the main thread only: elsewhere Python takes none) and puts the previous ones back."""

    def __init__(self, steps: int | None, minutes: float | None, saved_step: int = 0) -> None:
        self.steps, self.seconds = steps, None if minutes is None else minutes * 60
        self.saved_step = saved_step  # the optimizer step of the newest checkpoint (resumed from or written)
        self.signal: int | None = None
        self._first_at = 0.0
        self._last_saved = time.monotonic()
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Checkpointing:
        if threading.current_thread() is threading.main_thread():
            self._previous = {number: signal.signal(number, self._note) for number in STOP_SIGNALS}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    def _note(self, number: int, frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal, self._first_at = number, time.monotonic()
        elif time.monotonic() - self._first_at > SAME_REQUEST_S:
            raise KeyboardInterrupt(f"a second {signal.Signals(number).name}")

    def _agreed(self, accelerator: Accelerator, *flags: bool) -> list[bool]:
        """``flags`` or-ed over every process: one all-reduce, and none with one process."""
        if accelerator.num_processes == 1:
            return list(flags)
        import torch

        summed = accelerator.reduce(torch.tensor([float(f) for f in flags], device=accelerator.device), "sum")
        return [bool(value > 0) for value in summed.tolist()]

    def after_step(self, accelerator: Accelerator, step: int, last_of_epoch: bool) -> tuple[bool, bool]:
        """After optimizer step ``step``: (write a checkpoint, stop). The epoch's last step leaves the periodic
        checkpoint to the epoch's end."""
        due = not last_of_epoch and (
            (self.steps is not None and step % self.steps == 0)
            or (self.seconds is not None and time.monotonic() - self._last_saved >= self.seconds)
        )
        due, stop = self._agreed(accelerator, due, self.signal is not None)
        return due or (stop and step != self.saved_step), stop

    def stop_requested(self, accelerator: Accelerator) -> bool:
        """Whether any process received a stop signal (between epochs, where no step is in flight)."""
        return self._agreed(accelerator, self.signal is not None)[0]

    def saved(self, step: int) -> None:
        """A checkpoint of step ``step`` is written: the minute clock starts again."""
        self.saved_step, self._last_saved = step, time.monotonic()

    def stopped(self, where: str, checkpoint: Path | None, saved: bool) -> TrainingStopped:
        name = signal.Signals(self.signal).name if self.signal is not None else "a signal on another process"
        return TrainingStopped(name, where, checkpoint, saved, resume="the same run with --resume latest")


def resume_command(checkpoint: Path | None, argv: list[str] | None = None) -> str:
    """The command line that continues this run: the program (from ``argv``, default: this process's) with the run's
    ``--output-dir`` and ``--resume latest`` once it has a ``checkpoint`` (which recorded the other flags); before the
    first checkpoint, ``argv`` itself with ``--resume latest``."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).name
    if script.endswith(".py") and script != "__main__.py":  # python scripts/train.py ...
        program, rest = ["python", argv[0]], argv[1:]
    else:  # structinit-hf train ..., python -m structinit_hf train ... (accelerate launch -m structinit_hf train ...)
        launcher = ["python", "-m", "structinit_hf"] if script == "__main__.py" else [script]
        program, rest = [*launcher, *argv[1:2]], argv[2:]
    if checkpoint is not None:  # <output-dir>/checkpoints/<name>
        words = ["--output-dir", str(Path(checkpoint).parents[1])]
    else:
        words, skip = [], False
        for word in rest:
            if skip or word.startswith("--resume="):
                skip = False
                continue
            if word == "--resume":
                skip = True
                continue
            words.append(word)
    command = shlex.join([*program, *words, "--resume", "latest"])
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and program[0] == "python":  # the launcher's flags are not ours
        return "accelerate launch <your launch flags> " + command.removeprefix("python ")
    return command
