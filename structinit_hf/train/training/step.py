"""One micro-batch's loss and gradients, through the compiled model when ``--compile`` resolved on."""

from __future__ import annotations

import time

import torch
from accelerate import Accelerator
from torch import nn

__all__ = ["TrainingStep"]


class TrainingStep:
    """Forward, loss and backward of one micro-batch.

    With ``compile`` the model runs through ``torch.compile``; if compiling fails on the first call, the step says so
    once and runs the eager model from then on (a real error recurs in the eager retry and is raised).  A first call
    that compiles says how long it took: on a GPU the compiler, not the data or the model, can be most of a short
    run's set-up.
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

    @property
    def network(self) -> nn.Module:
        """What a forward runs: the compiled model, or the eager one."""
        return self._compiled if self._compiled is not None else self.model

    def __call__(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
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
