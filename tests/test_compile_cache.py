"""The compile cache a lent GPU's runs carry between loans (study/compile_cache.py), on the CPU's compiler."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

COMPILE_ONE_STEP = """
import json, sys
from pathlib import Path
import torch
from torch._dynamo.utils import counters
from study import compile_cache
folder = Path(sys.argv[1])
loaded = compile_cache.load_compile_cache(folder)
model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3)))
model(torch.randn(4, 8)).sum().backward()
saved = None if loaded else compile_cache.save_compile_cache(folder)
print(json.dumps({"loaded": loaded, "saved": str(saved) if saved else None, **counters["inductor"]}))
"""


def _compile_in_a_fresh_process(folder: Path, inductor_cache: Path) -> dict:
    """One compiled training step in a new Python with its own (empty) inductor cache, as on a bare machine."""
    env = {"TORCHINDUCTOR_CACHE_DIR": str(inductor_cache), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", COMPILE_ONE_STEP, str(folder)], capture_output=True, text=True, timeout=900,
        env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_what_one_machine_compiled_is_a_cache_hit_on_a_bare_one(tmp_path) -> None:
    """Catches a loan's compile cache that is not written, not read, or read without effect: the first process
    compiles and saves the file for its torch and device; a second one with an empty inductor cache loads it and its
    compile finds every graph there (no miss)."""
    from study.compile_cache import cache_file

    first = _compile_in_a_fresh_process(tmp_path / "carried", tmp_path / "inductor-1")
    assert not first["loaded"] and first["fxgraph_cache_miss"] >= 1
    assert first["saved"] == str(cache_file(tmp_path / "carried")) and Path(first["saved"]).stat().st_size > 0
    second = _compile_in_a_fresh_process(tmp_path / "carried", tmp_path / "inductor-2")
    assert second["loaded"] and second["saved"] is None
    assert second["fxgraph_cache_hit"] == first["fxgraph_cache_miss"] and "fxgraph_cache_miss" not in second


def test_a_cache_of_another_torch_or_device_is_not_loaded(tmp_path, monkeypatch) -> None:
    """Catches a cache file read on a machine it was not made for: the name carries torch's version and the device,
    and only this machine's name is loaded."""
    import torch

    from study.compile_cache import cache_file, load_compile_cache

    here = cache_file(tmp_path)
    assert torch.__version__ in here.name and here.suffix == ".bin" and "/" not in here.name
    other = tmp_path / here.name.replace(torch.__version__, "0.0.0")
    other.write_bytes(b"not for this machine")
    assert not load_compile_cache(tmp_path)  # the other torch's file is left alone
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert cache_file(tmp_path) == other


def test_a_benchmark_run_loads_the_carried_cache_or_saves_its_own_after_its_first_epoch(tmp_path, monkeypatch) -> None:
    """Catches a loan's run that never reads the carried cache, saves over a cache it loaded, or saves only at its end
    (a run cut by the loan's budget would bring nothing back): with the folder set and no file for this machine, the
    run saves once, after its first epoch; with one, it loads it and saves nothing."""
    import time

    from study import compile_cache, small_data_runs

    events, log, carried = tmp_path / "events", tmp_path / "train.log", tmp_path / "carried"

    def note(line: str) -> None:
        with events.open("a") as file:
            file.write(line + "\n")

    def fake_run(settings, on_epoch=None) -> None:
        for epoch in (1, 2):
            note(f"epoch {epoch}")
            on_epoch({"epoch": epoch})

    def fake_save(folder: Path) -> Path:
        note("saved")
        compile_cache.cache_file(folder).parent.mkdir(parents=True, exist_ok=True)
        compile_cache.cache_file(folder).write_bytes(b"compiled")
        return compile_cache.cache_file(folder)

    def in_the_run_process(log: Path, spawned_at: float) -> None:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # the process's own, as a spawned run has them
        small_data_runs._train_in_this_process(None, log, 1, spawned_at)

    monkeypatch.setattr(small_data_runs, "run", fake_run)
    monkeypatch.setattr(compile_cache, "save_compile_cache", fake_save)
    monkeypatch.setattr(compile_cache, "load_compile_cache", lambda folder: compile_cache.cache_file(folder).is_file())
    monkeypatch.setenv(compile_cache.ENV, str(carried))
    for _ in range(2):  # a bare machine, then one the first run's file was carried to
        child = multiprocessing.get_context("fork").Process(target=in_the_run_process, args=(log, time.time()))
        child.start()
        child.join()
        assert child.exitcode == 0
    assert events.read_text().split("\n") == ["epoch 1", "saved", "epoch 2", "epoch 1", "epoch 2", ""]
    assert log.read_text().count("compile cache: saved") == 1 and log.read_text().count("compile cache: loaded") == 1
