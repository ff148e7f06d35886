"""Before the first step: device defaults, compile fallback, user errors as one line, unreadable images."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from tiny_runs import run, synthetic_args, synthetic_dataset, weights

from structinit_hf.train.cli.args import settings_from_args, training_parser
from structinit_hf.train.training.loop import run_command


def speed(argv: list[str]):
    """The speed settings of a training command line."""
    return settings_from_args(training_parser().parse_args(argv)).speed


def test_user_errors_end_as_one_line_with_status_2(tmp_path, capsys, script_in_process) -> None:
    """Catches a misspelt model keyword that surfaces as timm's TypeError (no suggestion), a model checked only
    after the images are read (the corrupt image would be reported instead), a traceback without --debug, and a
    corrupt image found mid-epoch (after metrics or checkpoints were written) instead of before the first step."""
    from structinit_hf.train.cli.commands import run_script

    dataset = synthetic_dataset(tmp_path / "data", bad_row=3)
    argv = synthetic_args(dataset, tmp_path / "run")
    argv[argv.index("embed_dim=48")] = "kernal_size=5"
    capsys.readouterr()
    assert run_script(training_parser(), run_command, argv) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error
    assert "'kernal_size'" in error and "did you mean 'kernel_size'" in error
    with pytest.raises(ValueError, match="kernal_size"):
        run_script(training_parser(), run_command, [*argv, "--debug"])

    done = script_in_process("train", synthetic_args(dataset, tmp_path / "run"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "row 3 of the train split" in done.stderr and "broken.png" in done.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow
def test_skip_bad_images_trains_without_them_and_says_how_many(tmp_path, capsys) -> None:
    """Catches --skip-bad-images keeping the unreadable row (the epoch would crash or count it) or dropping it
    silently."""
    dataset = synthetic_dataset(tmp_path / "data", bad_row=3)
    record = run(synthetic_args(dataset, tmp_path / "run", "--epochs", "1", "--skip-bad-images"))
    assert "skipped 1 unreadable image(s) of the train split" in capsys.readouterr().out
    assert record["images_seen"] == 24  # 31 readable rows: three whole batches of 8


def test_device_defaults_follow_the_device_and_explicit_settings_win(monkeypatch) -> None:
    """Catches GPU defaults leaking onto CPU (results would change), a CUDA run left at fp32 / no workers / eager,
    fp16 not chosen where bf16 is unsupported, and a flag or accelerate config overridden by the defaults."""
    from structinit_hf.train.training.prepare import DeviceDefaults, device_defaults

    args = speed([])
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert device_defaults(args, cpu, env={}) == DeviceDefaults("no", 0, pin_memory=False, compile=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert device_defaults(args, cuda, env={}) == DeviceDefaults("bf16", 15, pin_memory=True, compile=True)
    assert device_defaults(args, cuda, local_processes=4, env={}).workers == 3
    assert device_defaults(args, cuda, env={"ACCELERATE_MIXED_PRECISION": "fp16"}).mixed_precision == "fp16"
    assert device_defaults(args, cuda, env={"ACCELERATE_MIXED_PRECISION": "no"}).mixed_precision == "bf16"
    assert not device_defaults(args, cuda, env={"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR"}).compile
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert device_defaults(args, cuda, env={}).mixed_precision == "fp16"
    explicit = speed(["--mixed-precision", "no", "--workers", "2", "--no-compile"])
    assert device_defaults(explicit, cuda, env={"ACCELERATE_MIXED_PRECISION": "bf16"}) == DeviceDefaults(
        "no", 2, pin_memory=True, compile=False
    )
    assert device_defaults(speed(["--compile"]), cpu, env={}).compile
    fp16 = speed(["--mixed-precision", "fp16"])  # accelerate would train fp32 and say fp16
    with pytest.raises(ValueError, match="--mixed-precision fp16: not on a CPU .* allowed on CPU: bf16 or no"):
        device_defaults(fp16, cpu, env={})
    with pytest.raises(ValueError, match="the accelerate config's mixed_precision fp16: not on a CPU"):
        device_defaults(args, cpu, env={"ACCELERATE_MIXED_PRECISION": "fp16"})
    assert device_defaults(speed(["--mixed-precision", "bf16"]), cpu, env={}).mixed_precision == "bf16"


def test_bf16_on_a_cpu_trains_through_timms_unfused_attention() -> None:
    """Catches a CPU bf16 run left on torch's fused attention kernel, whose backward is about 5x slower in bf16 than in
    fp32 on a CPU (docs/benchmarks.md, "The CPU step"), and the unfused path leaking into fp32 or CUDA runs."""
    import timm

    from structinit_hf.init.common import unfuse_attention
    from structinit_hf.train.training.prepare import device_defaults, native_bf16

    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert not device_defaults(speed(["--mixed-precision", "bf16"]), cpu, env={}).fused_attention
    assert device_defaults(speed([]), cpu, env={}).fused_attention
    assert device_defaults(speed(["--mixed-precision", "bf16"]), cuda, env={}).fused_attention
    model = timm.create_model("vit_tiny_patch16_224", img_size=16, patch_size=4, depth=2, embed_dim=24, num_heads=2)
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        fused = model(images)
        assert unfuse_attention(model) == 2 and not any(block.attn.fused_attn for block in model.blocks)
        torch.testing.assert_close(model(images), fused)  # the same function, computed another way
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():  # Linux: the probe agrees with what the CPU says of itself
        flags = next((line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), "").split()
        assert native_bf16(cpu) == bool({"avx512_bf16", "amx_tile"} & set(flags))
    assert not native_bf16(torch.device("meta"))


@pytest.mark.slow
def test_a_failing_compile_warns_once_and_trains_eagerly(tmp_path, monkeypatch, capsys) -> None:
    """Catches a compiler failure that kills the run, warns more than once, or leaves a half step behind (the
    weights would then differ from an eager run's)."""
    dataset = synthetic_dataset(tmp_path / "data")
    run(synthetic_args(dataset, tmp_path / "eager", "--epochs", "1", "--no-compile"))
    compiled = []

    def failing_compile(model):
        def forward(*args, **kwargs):
            raise RuntimeError("inductor: no working C++ compiler\nmore detail")

        compiled.append(model)
        return forward

    monkeypatch.setattr(torch, "compile", failing_compile)
    capsys.readouterr()
    run(synthetic_args(dataset, tmp_path / "fallback", "--epochs", "1", "--compile"))
    out = capsys.readouterr().out
    assert len(compiled) == 1 and out.count("warning: torch.compile failed") == 1
    assert "the first step took" not in out  # nothing compiled: no compile time
    assert "RuntimeError: inductor: no working C++ compiler); training without compilation" in out
    eager, fallback = weights(tmp_path / "eager" / "final"), weights(tmp_path / "fallback" / "final")
    for name in eager:
        assert torch.equal(eager[name], fallback[name]), name


def test_evaluation_runs_the_eager_model_when_training_compiles(tmp_path, monkeypatch) -> None:
    """Catches validation and the test scored through the compiled training model: torch.compile then builds a
    second graph (no gradients, eval mode) and again for the test's other batch size, 28-40 s and 16-22 s of a lent
    GPU's run. A stand-in compile counts what goes through it: the training steps only."""
    dataset = synthetic_dataset(tmp_path / "data")
    calls = []

    class Counted(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, inputs: torch.Tensor) -> torch.Tensor:
            calls.append((inputs.shape[0], torch.is_grad_enabled(), self.model.training))
            return self.model(inputs)

    monkeypatch.setattr(torch, "compile", Counted)
    record = run(synthetic_args(dataset, tmp_path / "run", "--epochs", "1", "--compile"))
    assert calls == [(8, True, True)] * 4  # 32 images in batches of 8: four steps, and nothing scored through it
    assert record["num_samples"] == 8  # the test split was scored (eagerly)


def test_a_compiling_first_step_says_how_long_it_took(monkeypatch, capsys) -> None:
    """Catches a loan that cannot tell compiling from the rest of the set-up: the first compiled step's time is
    printed once, and not again on later steps; an eager step prints nothing."""
    import time
    from types import SimpleNamespace

    from structinit_hf.train.training.step import TrainingStep

    accelerator = SimpleNamespace(print=print, backward=lambda loss: loss.backward())  # no global Accelerator state

    def slow_first_call(model):
        calls = []

        def forward(inputs):
            if not calls:
                time.sleep(0.3)  # what compiling costs the first call
            calls.append(inputs)
            return model(inputs)

        return forward

    monkeypatch.setattr(torch, "compile", slow_first_call)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, targets = torch.randn(2, 4), torch.tensor([0, 2])
    for compile in (True, False):
        step = TrainingStep(model, torch.nn.CrossEntropyLoss(), accelerator, optimizer, compile=compile)
        capsys.readouterr()
        for _ in range(3):
            step(inputs, targets)
        lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("torch.compile:")]
        if not compile:
            assert lines == []
            continue
        assert len(lines) == 1, lines
        took = float(lines[0].removeprefix("torch.compile: the first step took ").removesuffix(" s"))
        assert 0.3 <= took < 30


def test_the_first_step_says_how_long_after_the_process_started_it_began() -> None:
    """Catches a loan that cannot check its set-up target (seconds from the process's start to its first training
    step): the first step, compiled or not, prints that time once; a process that slept 1.5 s before it says >= 1.5."""
    import subprocess
    import sys
    import time

    program = """
import time
time.sleep(1.5)
from types import SimpleNamespace
import torch
from structinit_hf.train.training.step import TrainingStep
model = torch.nn.Linear(4, 3)
accelerator = SimpleNamespace(print=print, backward=lambda loss: loss.backward())
step = TrainingStep(model, torch.nn.CrossEntropyLoss(), accelerator, torch.optim.SGD(model.parameters()), compile=False)
for _ in range(3):
    step(torch.randn(2, 4), torch.tensor([0, 2]))
"""
    started = time.time()
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("first step:")]
    assert len(lines) == 1, done.stdout
    began = float(lines[0].removeprefix("first step: began ").removesuffix(" s after the process started"))
    assert 1.5 <= began <= time.time() - started


def test_runs_of_other_precisions_follow_each_other_in_one_process(tmp_path) -> None:
    """Catches accelerate's per-process state refusing the second run ("AcceleratorState has already been
    initialized"): a notebook's fp32 ``train`` then a ``compare`` in bf16 (its default on a CPU with native bf16)."""
    dataset = synthetic_dataset(tmp_path / "data")
    for index, precision in enumerate(("no", "bf16", "no")):
        argv = synthetic_args(dataset, tmp_path / f"run{index}", "--epochs", "1", "--mixed-precision", precision)
        assert run(argv)["mixed_precision"] == precision  # what the Accelerator trained with
