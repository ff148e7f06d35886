"""How much memory a training step needs, and the micro-batch that fits in what the machine has.

A step's peak is what the process holds before it (weights, data, libraries) plus the optimizer state plus,
per image of the micro-batch, the activations autograd saves for the backward pass and the gradients the
backward pass makes from them.  :func:`saved_bytes_per_image` counts the saved activations with
``torch.autograd.graph.saved_tensors_hooks`` on a forward of two images (no step is taken, the random state is
left as it was); :data:`STEP_OVERHEAD` scales that count to the measured peak
(``python scripts/benchmark_memory.py``).  :func:`fit_micro_batch` then picks the largest micro-batch that
fits, keeping the global batch through gradient accumulation.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

__all__ = [
    "GB",
    "HEADROOM",
    "MemoryPlan",
    "STEP_OVERHEAD",
    "available_memory_bytes",
    "fit_micro_batch",
    "plan_fits",
    "process_memory_bytes",
    "saved_bytes_per_image",
]

# measured peak growth of a training step per image / saved activations per image, rounded up
# (ViT-Tiny, 32 px, patch 2, depth 12, fp32 on CPU; scripts/benchmark_memory.py)
STEP_OVERHEAD = 1.5


HEADROOM = 0.7  # of the available memory a run plans on: the allocator's fragmentation, other processes growing


GB = 1e9


def _meminfo_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _cgroup_room() -> int | None:
    """Bytes the process's cgroup (v2) still allows, or ``None`` without a limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
    except OSError:
        return None
    return None if limit == "max" else max(int(limit) - int(used), 0)


def available_memory_bytes(device: torch.device) -> int | None:
    """Memory a new allocation can still get on ``device``: free GPU memory, else the kernel's ``MemAvailable``
    (bounded by a cgroup limit).  ``None`` where the platform does not say."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    available = _meminfo_kb("MemAvailable")
    room = _cgroup_room()
    candidates = [value for value in (available * 1024 if available is not None else None, room) if value is not None]
    return min(candidates) if candidates else None


def process_memory_bytes(device: torch.device) -> int:
    """What this process holds now: its resident set on CPU, torch's allocations on a GPU."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    try:
        for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def saved_bytes_per_image(
    model: nn.Module, input_size: tuple[int, ...], device: torch.device, autocast: Callable | None = None
) -> int:
    """Bytes autograd keeps for the backward pass per image: counted on a forward of two images.

    The model runs in eval mode under a forked random state, so no batch-norm statistic, dropout draw or
    generator moves; the graph is dropped without a backward pass.
    """
    images = 2
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    was_training = model.training
    model.eval()
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            inputs = torch.zeros((images, *input_size), device=device)
            parameters = {id(p) for p in model.parameters()}
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
                with autocast() if autocast is not None else torch.autocast(device.type, enabled=False):
                    output = model(inputs)
            del output
        weights = {p.untyped_storage().data_ptr() for p in model.parameters() if id(p) in parameters}
    finally:
        model.train(was_training)
    return sum(size for pointer, size in seen.items() if pointer not in weights) // images


@dataclass(frozen=True)
class MemoryPlan:
    """The micro-batch a process trains with, and the estimate it was chosen on."""

    micro_batch: int
    grad_accum: int
    peak_bytes: int  # estimated peak of the process at this micro-batch
    base_bytes: int  # held before the first step: libraries, data, weights, optimizer state
    per_image_bytes: int  # added per image of the micro-batch
    available_bytes: int | None  # what the process may use (None: unknown, nothing is fitted)

    def peak_at(self, micro_batch: int) -> int:
        return self.base_bytes + micro_batch * self.per_image_bytes

    def describe(self) -> str:
        room = "unknown" if self.available_bytes is None else f"{self.available_bytes / GB:.1f} GB"
        return (
            f"estimated peak {self.peak_bytes / GB:.2f} GB ({self.base_bytes / GB:.2f} GB before the first step + "
            f"{self.per_image_bytes / 2**20:.1f} MB per image), {room} available"
        )


def fit_micro_batch(
    per_process_batch: int,
    base_bytes: int,
    per_image_bytes: int,
    available_bytes: int | None,
    grad_accum: int | None = None,
    even: bool = False,
) -> MemoryPlan:
    """The smallest accumulation (largest micro-batch) whose estimated peak fits ``available_bytes``.

    ``grad_accum`` fixes the accumulation instead (the plan may then not fit: the caller checks ``fits``);
    ``even`` keeps micro-batches even (mixup pairs images).  Without ``available_bytes`` the whole batch is one
    micro-batch.  When nothing fits, the plan is the smallest micro-batch allowed.
    """
    if grad_accum is not None:
        choices = [grad_accum]
    else:
        choices = [a for a in range(1, per_process_batch + 1) if per_process_batch % a == 0]
        choices = [a for a in choices if not even or (per_process_batch // a) % 2 == 0] or [1]
    budget = None if available_bytes is None else int(available_bytes * HEADROOM)
    plan = None
    for accumulation in choices:
        micro = per_process_batch // accumulation
        peak = base_bytes + micro * per_image_bytes
        plan = MemoryPlan(micro, accumulation, peak, base_bytes, per_image_bytes, available_bytes)
        if budget is None or peak <= budget:
            return plan
    return plan


def plan_fits(plan: MemoryPlan) -> bool:
    """Whether ``plan``'s estimated peak is within the share of the available memory a run may plan on."""
    return plan.available_bytes is None or plan.peak_bytes <= plan.available_bytes * HEADROOM
