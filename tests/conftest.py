"""Shared test settings: no network, one thread per process, the longest tests first, the embedded CIFAR-10 sample,
the optional shared data, and scripts run in this process.

The suite runs in two pytest-xdist workers (``addopts`` in pyproject.toml). This file is also loaded by xdist's
controller, which runs no test: it imports nothing heavy (torch and the package load in the workers)."""

from __future__ import annotations

import gc
import os
import runpy
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from subprocess import CompletedProcess

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# one torch thread in every process (set before torch loads), the fresh Pythons a test starts included: test tensors
# are tiny, and two workers share the cores. compare sets its own 2 threads: a thread that waits on a busy core
# sleeps instead of spinning (OpenMP's default), which made those tests 4 times slower beside the other worker
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

# started first, so that the other worker runs the rest of the suite beside them (pytest-xdist's worksteal)
LONGEST_FIRST = ("test_timm_suite.py", "test_transformers_suite.py")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.name not in LONGEST_FIRST)  # stable: the rest keep their order


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, timm, transformers: millions of objects) lives until the end: the garbage
    collector stops walking it, which took seconds of every full collection, pytest's own at the end included."""
    gc.freeze()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Freeze again before the process exits: Python's last collection at exit walks every object the tests left
    (about a second of each worker's exit, which the run waits for)."""
    gc.freeze()


@pytest.fixture(scope="session")
def cifar10_sample() -> Path:
    """The CIFAR-10 sample shipped in the package (real images in the Hub's img/label schema)."""
    from structinit_hf.train.settings import SAMPLE_DATASETS

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
