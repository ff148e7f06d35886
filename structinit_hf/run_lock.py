"""A run folder belongs to one live run: ``run.lock`` names it, and the kernel's ``flock`` says whether it lives.

The training process (the one that writes checkpoints, not an ``accelerate launch`` in front of it) takes an
exclusive ``flock`` on ``<output-dir>/run.lock`` and writes its pid, start time and command line into it.  The
kernel drops the lock when that process ends in any way (exit, ``kill -9``, power loss), so a lock file left by a
dead run never blocks a resume, and a training child that outlived a killed ``accelerate launch`` still holds
it: a second run into the folder is refused with that child's pid instead of racing it.
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

from .cli import UsageError

__all__ = ["LOCK_FILE", "RunLock", "acquire_run_lock"]

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
