"""Training the small-data benchmark's runs: each (arm, seed) in a process of its own calling
:func:`structinit_hf.train.run`, resumable; a finished run is reused only if it is the run the benchmark trains now."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from structinit_hf.atomic import write_json
from structinit_hf.benchmark.runs import RUN_LOG, RUN_RESULTS, RUN_TIMING, changed_flags, is_finished
from structinit_hf.init.options import IMPULSE_KWARGS, ImpulseOptions, family_options, init_settings
from structinit_hf.train import TrainingSettings, UsageError, run
from structinit_hf.train._internal import find_checkpoint, read_trainer_state
from study import compile_cache

BENCHMARK_CLOCK = "wall_clock.json"  # per study: wall_clock-ablation.json for the ablation


def _init_is_current(recorded: dict[str, Any], model_kwargs: dict[str, Any]) -> bool:
    """Whether a finished impulse run's recorded init settings are what its arm builds now: a package default
    moved since (say ``patch_embed_scale``) changes an arm without changing its arguments. Settings added to
    the package after the run (absent from its record) are taken to have kept the old behaviour."""
    if recorded.get("attention_init") != "impulse":
        return True
    family = recorded.get("family", "vit")
    if family != "vit":  # a Swin or Mixer: its options have no presets
        given = {key: value for key, value in model_kwargs.items() if key in family_options(family)}
        expected = init_settings("impulse", {"kernel_size": recorded.get("kernel_size"), **given}, family)
        return all(expected.get(key) == value for key, value in recorded.items() if key != "shifts")
    given = {key: value for key, value in model_kwargs.items() if key in IMPULSE_KWARGS}
    expected = asdict(ImpulseOptions(**{"kernel_size": recorded.get("kernel_size"), **given}))
    drawn = ("attention_init", "shifts")  # the shifts follow from the options (seed, kernel, order)
    return all(expected.get(key) == value for key, value in recorded.items() if key not in drawn)


def check_finished_runs(planned: Iterable[tuple[TrainingSettings, Path]]) -> None:
    """Refuse to reuse a finished run that is not the run the benchmark would train now: other settings (an arm or the
    recipe edited since) or other init settings (a package default moved). It would be scored under the wrong name.
    Takes ``(settings, run folder)`` per run; nothing is deleted."""
    stale = []
    for settings, run_dir in planned:
        if not is_finished(run_dir):
            continue
        changed = changed_flags(run_dir, settings)
        if changed:
            stale.append(f"{run_dir} (other settings: {changed})")
        elif not _init_is_current(
            json.loads((run_dir / RUN_RESULTS).read_text()).get("init", {}), settings.model.model_kwargs
        ):
            stale.append(f"{run_dir} (init settings other than today's defaults, see its {RUN_RESULTS})")
    if stale:
        raise ValueError(
            f"finished run(s) {', '.join(stale)} are not the runs this benchmark trains; move them away or pass "
            "another --runs-dir"
        )


def resumed_seconds(run_dir: Path) -> float:
    """The time cut-short attempts of a run spent on the epochs it keeps: the training clock of the checkpoint that
    ``--resume auto`` continues from (0.0 for a fresh start). A run's time is this plus its last attempt's."""
    checkpoint = find_checkpoint(run_dir, "auto")
    try:
        return float(read_trainer_state(checkpoint)["wall_time_s"]) if checkpoint else 0.0
    except (UsageError, KeyError):  # train.py names what is wrong with the checkpoint when it resumes
        return 0.0


def _train_in_this_process(settings: TrainingSettings, log: Path, threads: int, spawned_at: float) -> None:
    """The body of a run's own process: its output into ``log``, ``threads`` torch threads, then :func:`run`
    (``spawned_at``: the parent's clock when it started this process, for the line that times the start)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    descriptor = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    sys.stdout.flush(), sys.stderr.flush()
    os.dup2(descriptor, 1), os.dup2(descriptor, 2)  # what torch, tqdm and a traceback print goes to the log too
    import torch

    torch.set_num_threads(threads)
    print(f"process start: {time.time() - spawned_at:.1f} s (a fresh interpreter importing the libraries)", flush=True)
    cache = os.environ.get(compile_cache.ENV)
    if cache and compile_cache.load_compile_cache(Path(cache)):
        print(f"compile cache: loaded {compile_cache.cache_file(Path(cache))}", flush=True)
        cache = None  # nothing new to save
    saved = []

    def save_once(record: dict[str, Any]) -> None:  # after epoch 1: its steps compiled what training runs
        if cache and not saved:
            saved.append(compile_cache.save_compile_cache(Path(cache)))
            if saved[0] is not None:
                print(f"compile cache: saved {saved[0]}", flush=True)

    run(settings, on_epoch=save_once)


def train_one(settings: TrainingSettings, threads: int) -> tuple[int, float]:
    """Train one run in a process of its own (its own memory, its own thread count; multiprocessing's spawn, so a
    fresh interpreter), calling :func:`structinit_hf.train.run`; log to ``<run folder>/train.log``.

    The settings resume (``resume="auto"``): a run cut short continues from its newest complete checkpoint, or
    starts clean when there is none (whatever a kill left behind), so the benchmark keeps no recovery logic of its
    own. The time recorded in ``RUN_TIMING`` is the whole run's: the earlier attempts' (:func:`resumed_seconds`) and
    this. Returns the process's exit code and the seconds it took.
    """
    run_dir = Path(settings.run.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    earlier = resumed_seconds(run_dir)
    start = time.perf_counter()
    with (run_dir / RUN_LOG).open("a") as log:
        log.write(f"$ structinit_hf.train.run({json.dumps(settings.flags())})\n")
    process = multiprocessing.get_context("spawn").Process(
        target=_train_in_this_process, args=(settings, run_dir / RUN_LOG, threads, time.time())
    )
    process.start()
    process.join()
    code = process.exitcode
    elapsed = time.perf_counter() - start
    if code == 0:
        timing = {
            "flags": settings.flags(),
            "threads": threads,
            "elapsed_s": round(earlier + elapsed, 1),
            "earlier_s": earlier,
        }
        write_json(run_dir / RUN_TIMING, timing)
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # final/ holds the model; resuming is over
    return code, elapsed


def kept_wall_clock(path: Path) -> float | None:
    """The benchmark's wall clock kept in ``path`` (every command that trained its runs, together), if any."""
    return json.loads(path.read_text())["wall_clock_s"] if path.is_file() else None


@contextmanager
def _wall_clock(path: Path) -> Iterator[dict[str, float]]:
    """Add the time spent inside to the total kept in ``path``, even when interrupted (resumes add up)."""
    clock = {"total": kept_wall_clock(path) or 0.0}
    start = time.perf_counter()
    try:
        yield clock
    finally:
        clock["total"] += time.perf_counter() - start
        write_json(path, {"wall_clock_s": round(clock["total"], 1)})
