"""How much memory a training step needs, and the micro-batch that fits in what the machine has.

A step's peak is what the process holds before it (weights, data, libraries) plus the optimizer state plus,
per image of the micro-batch, the activations autograd saves for the backward pass and the gradients the
backward pass makes from them.  :func:`saved_bytes_per_image` counts the saved activations with
``torch.autograd.graph.saved_tensors_hooks`` on a forward of two images (no step is taken, the random state is
left as it was); :data:`STEP_OVERHEAD` scales that count to the measured peak
(the repository's step-memory measurement).  :func:`fit_micro_batch` then picks the largest micro-batch that
fits, keeping the global batch through gradient accumulation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from torch import nn

from ..cli.errors import UsageError
from ..settings import Recipe

__all__ = [
    "DECODE_OVERHEAD",
    "GB",
    "HEADROOM",
    "MemoryPlan",
    "STEP_OVERHEAD",
    "available_memory_bytes",
    "fit_micro_batch",
    "plan_fits",
    "plan_memory",
    "process_memory_bytes",
    "saved_bytes_per_image",
]

# measured peak growth of a training step per image / saved activations per image, rounded up
# (ViT-Tiny, 32 px, patch 2, depth 12, fp32 on CPU)
STEP_OVERHEAD = 1.5


DECODE_OVERHEAD = 4  # peak bytes of decoding one image / its RGB pixels: the file's decode, upright copy, resize


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
    model: nn.Module, input_size: tuple[int, ...], device: torch.device, precision: str = "no"
) -> int:
    """Bytes autograd keeps for the backward pass per image: counted on a forward of two images, under the autocast
    of the run's ``--mixed-precision`` (``no``, ``fp16`` or ``bf16``), as accelerate will train it.

    The model runs in eval mode under a forked random state, so no batch-norm statistic, dropout draw or
    generator moves; the graph is dropped without a backward pass.
    """
    images = 2
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
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
                with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
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


def plan_memory(
    recipe: Recipe,
    processes: PartialState,
    model: nn.Module,
    input_size: tuple[int, ...],
    precision: str,
    local_processes: int,
    grad_accum: int | None,
    accumulation_from: str | None,
    decode_bytes: int = 0,
) -> MemoryPlan:
    """The micro-batch of each process: the largest whose estimated peak fits the memory this process may use
    (the machine's available memory shared among its processes), unless ``grad_accum`` (the flag's, or the resumed
    run's: ``accumulation_from``) fixes it. ``decode_bytes`` is what decoding the largest source image takes in this
    process (nothing when DataLoader workers decode). Refuse, in one line and before the first step, a run that
    cannot fit."""
    device = processes.device
    per_process = recipe.batch_size // processes.num_processes
    available = available_memory_bytes(device)
    if available is not None and device.type != "cuda":
        available //= local_processes
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    states = 3 + (1 if recipe.model_ema else 0)  # gradients, two AdamW moments, the EMA copy
    base = process_memory_bytes(device) + states * parameter_bytes + decode_bytes
    per_image = round(saved_bytes_per_image(model, input_size, device, precision) * STEP_OVERHEAD)
    even = bool(recipe.mixup or recipe.cutmix)
    plan = fit_micro_batch(per_process, base, per_image, available, grad_accum, even)
    if processes.num_processes > 1:  # every process must step together: the largest accumulation any needs
        accumulation = max(gather_object([plan.grad_accum]))
        plan = fit_micro_batch(per_process, base, per_image, available, accumulation, even)
    if plan.micro_batch * plan.grad_accum * processes.num_processes != recipe.batch_size:  # only a checkpoint's
        # accumulation on another number of processes (the flag's is checked with the other flags)
        raise UsageError(
            f"--resume: the run was started with --grad-accum {plan.grad_accum}, which does not split --batch-size "
            f"{recipe.batch_size} into equal micro-batches on {processes.num_processes} process(es); resume it on "
            "as many processes as it started on"
        )
    fits = plan_fits(plan)
    if processes.num_processes > 1:
        fits = all(gather_object([fits]))
    if not fits:
        advice = {
            "flag": "pass a larger --grad-accum (or leave it out to fit the micro-batch), a smaller --batch-size, "
            "or free memory",
            "checkpoint": f"the run was started with --grad-accum {plan.grad_accum}; free memory to resume it",
        }.get(accumulation_from, "even the smallest micro-batch does not fit: free memory or train a smaller model")
        raise UsageError(
            f"--batch-size {recipe.batch_size} does not fit in memory: as micro-batch {plan.micro_batch} x "
            f"{plan.grad_accum} accumulation x {processes.num_processes} process(es) it has an {plan.describe()} "
            f"(a run plans on {HEADROOM:.0%} of it); {advice}"
        )
    return plan
