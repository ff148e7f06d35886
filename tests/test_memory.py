"""The micro-batch a run trains with fits the memory it has; a run that cannot fit stops before its first step."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import timm
import torch
from tiny_runs import run, synthetic_args, synthetic_dataset, weights

from structinit_hf.train.cli.errors import UsageError
from structinit_hf.train.settings import Recipe
from structinit_hf.train.training import memory_plan as memory
from structinit_hf.train.training.memory_plan import (
    HEADROOM,
    fit_micro_batch,
    plan_fits,
    plan_memory,
    process_memory_bytes,
    saved_bytes_per_image,
)

MB = 2**20


def test_the_largest_micro_batch_that_fits_keeps_the_global_batch() -> None:
    budget = int((1000 * MB + 70 * 50 * MB) / HEADROOM)  # room for 70 images of 50 MB beside 1000 MB
    plan = fit_micro_batch(512, 1000 * MB, 50 * MB, budget)
    assert (plan.micro_batch, plan.grad_accum) == (64, 8) and plan_fits(plan)
    assert plan.micro_batch * plan.grad_accum == 512 and plan.peak_bytes == 1000 * MB + 64 * 50 * MB
    assert fit_micro_batch(512, 1000 * MB, 50 * MB, None).micro_batch == 512  # unknown memory: as asked
    fixed = fit_micro_batch(512, 1000 * MB, 50 * MB, budget, grad_accum=2)
    assert (fixed.micro_batch, fixed.grad_accum) == (256, 2) and not plan_fits(fixed)
    assert fit_micro_batch(6, 0, 50 * MB, int(60 * MB / HEADROOM), even=True).micro_batch == 2  # mixup pairs
    nothing = fit_micro_batch(512, 1000 * MB, 50 * MB, 500 * MB)
    assert nothing.micro_batch == 1 and not plan_fits(nothing)
    assert "GB available" in nothing.describe() and "MB per image" in nothing.describe()


def test_counting_saved_activations_moves_no_state() -> None:
    """Catches a memory probe that changes what training does: batch-norm statistics, the random state, the mode."""
    model = timm.create_model("resnet10t", num_classes=3).train()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    state = torch.random.get_rng_state()
    per_image = saved_bytes_per_image(model, (3, 32, 32), torch.device("cpu"))
    assert per_image > 3 * 32 * 32 * 4 and model.training
    assert torch.equal(state, torch.random.get_rng_state())
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())


def _memory_for(micro_batches: float, monkeypatch) -> None:
    """Make the machine look as if it had room for ``micro_batches`` images of 100 MB (x the step overhead)."""
    monkeypatch.setattr(memory, "saved_bytes_per_image", lambda *args, **kwargs: 100 * MB)
    per_image = round(100 * MB * memory.STEP_OVERHEAD)
    room = lambda device: int((process_memory_bytes(device) + 20 * MB + micro_batches * per_image) / HEADROOM)  # noqa: E731
    monkeypatch.setattr(memory, "available_memory_bytes", room)


def test_a_resumed_accumulation_that_does_not_split_the_batch_here_is_refused() -> None:
    """Catches a run resumed on another number of processes with the accumulation its checkpoint keeps: the
    micro-batch rounded down, so each optimizer step took fewer images than --batch-size and each epoch cut into the
    next one's shuffle order (12 images on 2 processes at accumulation 4 became micro-batches of 1: 8 a step)."""
    model = timm.create_model("vit_tiny_impulse3", depth=1, img_size=16, patch_size=4, embed_dim=48, num_classes=3)
    one_process = SimpleNamespace(num_processes=1, device=torch.device("cpu"))  # 12 images a process, as 24 on two
    kept = dict(input_size=(3, 16, 16), precision="no", local_processes=1, accumulation_from="checkpoint")
    with pytest.raises(UsageError, match=r"started with --grad-accum 5, which does not split --batch-size 12 .* 1 pro"):
        plan_memory(Recipe(batch_size=12), one_process, model, grad_accum=5, **kept)
    plan = plan_memory(Recipe(batch_size=12), one_process, model, grad_accum=4, **kept)
    assert (plan.micro_batch, plan.grad_accum) == (3, 4)


@pytest.mark.slow
def test_a_run_fits_its_micro_batch_to_the_memory_and_resumes_with_it(tmp_path, monkeypatch, capsys) -> None:
    """Catches a default batch that the kernel kills for memory: the run must split it into micro-batches that
    fit, keep the global batch (same steps, nearly the same weights), say so in the banner and results.json, and
    keep that accumulation when resumed on a machine with more memory."""
    dataset = synthetic_dataset(tmp_path / "data")
    whole = run(synthetic_args(dataset, tmp_path / "whole", "--epochs", "1"))
    assert (whole["micro_batch"], whole["grad_accum"]) == (8, 1)

    _memory_for(4.5, monkeypatch)
    fitted = run(synthetic_args(dataset, tmp_path / "fitted", "--epochs", "1"))
    assert (fitted["micro_batch"], fitted["grad_accum"], fitted["args"]["grad_accum"]) == (4, 2, 2)
    assert "micro-batch 4 x 2 accumulation = batch 8" in capsys.readouterr().out
    first, second = weights(tmp_path / "whole" / "final"), weights(tmp_path / "fitted" / "final")
    for name in first:
        torch.testing.assert_close(second[name], first[name], rtol=1e-4, atol=1e-5)
    line = json.loads((tmp_path / "fitted" / "metrics.jsonl").read_text())
    assert line["step"] == 4 and line["images_seen"] == 32

    monkeypatch.undo()  # more memory now: the resumed run keeps the accumulation it started with
    resumed = run(synthetic_args(dataset, tmp_path / "fitted", "--epochs", "1", "--resume", "auto"))
    assert (resumed["micro_batch"], resumed["grad_accum"]) == (4, 2)


@pytest.mark.slow
def test_a_run_that_cannot_fit_stops_before_its_first_step(tmp_path, monkeypatch) -> None:
    dataset = synthetic_dataset(tmp_path / "data")
    _memory_for(4.5, monkeypatch)
    out = tmp_path / "run"
    with pytest.raises(
        UsageError, match=r"--batch-size 8 does not fit in memory: as micro-batch 8 x 1 accumulation"
    ) as info:
        run(synthetic_args(dataset, out, "--grad-accum", "1"))
    assert (
        "estimated peak" in str(info.value) and "GB available" in str(info.value) and "--grad-accum" in str(info.value)
    )
    _memory_for(0.5, monkeypatch)
    with pytest.raises(UsageError, match="even the smallest micro-batch does not fit"):
        run(synthetic_args(dataset, out))
    assert not out.exists()
