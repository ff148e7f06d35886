"""One micro-batch's loss and gradients, through the compiled model when ``--compile`` resolved on."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from torch import nn

__all__ = ["TrainingStep", "seconds_since_process_start"]


def seconds_since_process_start() -> float | None:
    """Seconds since this process started, from the kernel's record of it (Linux); ``None`` where there is none."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()  # after the name: state is field 3
        return time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime: 22
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class TrainingStep:
    """Forward, loss and backward of one micro-batch.

    With ``compile`` the model runs through ``torch.compile``; if compiling fails on the first call, the step says so
    once and runs the eager model from then on (a real error recurs in the eager retry and is raised).  The first
    call says how long after the process started it began (what a run pays before it trains: imports, data, model,
    loaders, its first batch), and, when it compiles, how long it took.
    """

    def __init__(
        self,
        model: nn.Module,
        criterion: nn.Module,
        accelerator: Accelerator,
        optimizer: torch.optim.Optimizer,
        compile: bool,
    ) -> None:
        self.model, self.criterion, self.accelerator, self.optimizer = model, criterion, accelerator, optimizer
        self._compiled = torch.compile(model) if compile else None
        self._untried = compile  # the compiled model has not run yet: its first call may fall back
        self._first = True

    @property
    def network(self) -> nn.Module:
        """What a forward runs: the compiled model, or the eager one."""
        return self._compiled if self._compiled is not None else self.model

    def __call__(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self._first:
            self._first = False
            age = seconds_since_process_start()
            if age is not None:
                self.accelerator.print(f"first step: began {age:.1f} s after the process started")
        if self._untried:
            self._untried = False
            started = time.perf_counter()
            try:
                loss = self._loss_and_backward(inputs, targets)
            except Exception as error:  # noqa: BLE001  any compiler failure; a real error recurs in the eager retry
                first_line = (str(error).strip().splitlines() or [""])[0][:200]
                self.accelerator.print(
                    f"warning: torch.compile failed ({type(error).__name__}: {first_line}); training without "
                    "compilation"
                )
                self._compiled = None
                self.optimizer.zero_grad()
            else:
                self.accelerator.print(f"torch.compile: the first step took {time.perf_counter() - started:.1f} s")
                return loss
        return self._loss_and_backward(inputs, targets)

    def _loss_and_backward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = self.criterion(self.network(inputs), targets)
        self.accelerator.backward(loss)
        return loss
