"""Shared test settings: no network, small thread count, the embedded CIFAR-10 sample, the optional shared data,
and scripts run in this process."""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from subprocess import CompletedProcess

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

from structinit_hf.train.data import SAMPLE_DATASETS

torch.set_num_threads(1)  # test tensors are tiny: threads cost more than they give

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def cifar10_sample() -> Path:
    """The CIFAR-10 sample shipped in the package (real images in the Hub's img/label schema)."""
    return SAMPLE_DATASETS["cifar10-sample"]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (the full CIFAR-10 copy), which a user's clone does not have: such a test skips, saying
    why, except under ``CI=true``, where the folder is expected and its absence fails the test."""
    if not (SHARED_DATA / "cifar10").is_dir():
        message = f"needs the shared data folder {SHARED_DATA}, which is not here"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_DATA


def script_path(name: str) -> Path:
    """``scripts/<name>.py``, or ``<name>.py`` from the repository root for a name with a folder (``study/...``)."""
    return REPO / f"{name}.py" if "/" in name else REPO / "scripts" / f"{name}.py"


@pytest.fixture
def script_in_process(monkeypatch, capsys) -> Iterator[Callable[[str, Sequence[str]], CompletedProcess]]:
    """Run ``python <repository>/scripts/<name>.py ARGV`` in this process: the file runs as ``__main__`` with
    ``sys.argv`` set, so its imports, parser and :func:`run_script` are the ones a user meets,
    without the seconds a fresh Python spends importing torch, timm and transformers. Returns what
    ``subprocess.run(..., capture_output=True, text=True)`` would: the exit status, stdout and stderr; a traceback a
    user would see propagates here as the exception. Accelerate's per-process state starts
    empty, as in a fresh process (an earlier test's Accelerator would refuse another mixed precision), and is
    emptied again after the test, so no later test meets the script's."""
    from accelerate.state import AcceleratorState, GradientState

    def forget_accelerate_state() -> None:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()

    def run(name: str, argv: Sequence[str]) -> CompletedProcess:
        script = str(script_path(name))
        monkeypatch.setattr(sys, "argv", [script, *argv])
        forget_accelerate_state()
        capsys.readouterr()  # what the test printed before
        try:
            runpy.run_path(script, run_name="__main__")
            status = 0
        except SystemExit as stop:
            status = 0 if stop.code is None else stop.code
        captured = capsys.readouterr()
        return CompletedProcess(sys.argv, status, captured.out, captured.err)

    yield run
    forget_accelerate_state()
