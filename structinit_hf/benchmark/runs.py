"""Training the benchmark's runs: one ``scripts/train.py`` subprocess per (arm, seed), resumable.

A run is finished when its ``results.json`` exists; a finished run is reused only if it is the run the
benchmark would train now (same arguments, same init settings), and a run cut short resumes from its
newest complete checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..init.options import IMPULSE_KWARGS, ImpulseOptions, family_options, init_settings
from ..train.checkpoints import find_checkpoint, read_trainer_state
from ..train.errors import UsageError
from .arms import Arm
from .profiles import BenchmarkDataset, Profile, arm_model_kwargs

RUN_RESULTS = "results.json"


RUN_LOG = "train.log"


RUN_TIMING = "benchmark_run.json"


BENCHMARK_CLOCK = "wall_clock.json"  # per study: wall_clock-ablation.json for the ablation


RUN_SPECIFIC_ARGS = ("model", "model_kwargs", "seed", "output_dir", "resume", "dataset", "dataset_config")


# scripts/train.py, run as ``python -c`` so the benchmark needs no checkout of the scripts folder
TRAIN_ENTRY = (
    "from structinit_hf.train.args import training_parser; from structinit_hf.train.loop import train; "
    "train(training_parser().parse_args())"
)


NEGATABLE_FLAGS = ("compile",)  # train.py's on/off flags whose default depends on the device


def flag_values(name: str, value: Any) -> list[str]:
    flag = f"--{name.replace('_', '-')}"
    if isinstance(value, bool):  # False: the flag's --no- form where it has one (--no-compile), else nothing
        return [flag] if value else ([f"--no-{name.replace('_', '-')}"] if name in NEGATABLE_FLAGS else [])
    if isinstance(value, list | tuple):
        return [flag, *map(str, value)]
    return [flag, str(value)]


def train_argv(profile: Profile, arm: Arm, seed: int, dataset: BenchmarkDataset, run_dir: Path) -> list[str]:
    """The ``scripts/train.py`` arguments of one (arm, seed) run."""
    argv = ["--model", arm.model, "--model-kwargs"]
    argv += [f"{key}={value}" for key, value in arm_model_kwargs(arm, profile).items()]
    argv += ["--dataset", dataset.dataset]
    if dataset.config is not None:
        argv += ["--dataset-config", dataset.config]
    for name, value in profile.recipe.items():
        argv += flag_values(name, value)
    return argv + ["--seed", str(seed), "--output-dir", str(run_dir)]


def run_dir_for(runs_dir: Path, arm: Arm, seed: int) -> Path:
    return Path(runs_dir) / f"{arm.name}-seed{seed}"


def is_finished(run_dir: Path) -> bool:
    return (run_dir / RUN_RESULTS).is_file()


def _without_resume(argv: Sequence[str]) -> list[str]:
    argv = list(argv)
    return argv[:-2] if argv[-2:] == ["--resume", "latest"] else argv


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


def check_finished_runs(planned: Iterable[tuple[list[str], Path, dict[str, Any]]]) -> None:
    """Refuse to reuse a finished run that is not the run the benchmark would train now: other arguments (an arm
    or the recipe edited since) or other init settings (a package default moved). It would be scored under the
    wrong name. Takes ``(train argv, run folder, model kwargs)`` per run; nothing is deleted."""
    stale = []
    for argv, run_dir, model_kwargs in planned:
        if not is_finished(run_dir):
            continue
        timing = run_dir / RUN_TIMING
        if timing.is_file() and _without_resume(json.loads(timing.read_text())["argv"]) != _without_resume(argv):
            stale.append(f"{run_dir} (other arguments, see its {RUN_TIMING})")
        elif not _init_is_current(json.loads((run_dir / RUN_RESULTS).read_text()).get("init", {}), model_kwargs):
            stale.append(f"{run_dir} (init settings other than today's defaults, see its {RUN_RESULTS})")
    if stale:
        raise ValueError(
            f"finished run(s) {', '.join(stale)} are not the runs this benchmark trains; move them away or pass "
            "another --runs-dir"
        )


def resumed_seconds(run_dir: Path) -> float:
    """The time cut-short attempts of a run spent on the epochs it keeps: the training clock of the checkpoint that
    ``--resume latest`` continues from (0.0 for a fresh start). A run's time is this plus its last attempt's."""
    checkpoint = find_checkpoint(run_dir, "latest")
    try:
        return float(read_trainer_state(checkpoint)["wall_time_s"]) if checkpoint else 0.0
    except (UsageError, KeyError):  # train.py names what is wrong with the checkpoint when it resumes
        return 0.0


def _train_one(argv: list[str], run_dir: Path, threads: int) -> tuple[int, float]:
    """Train one run in a subprocess (its own memory, its own thread count); log to ``run_dir/train.log``.

    Always ``--resume latest``: train.py continues a run cut short from its newest complete checkpoint, or starts
    clean when there is none (whatever a kill left behind), so the benchmark keeps no recovery logic of its own.
    The time recorded in ``RUN_TIMING`` is the whole run's: the earlier attempts' (:func:`resumed_seconds`) and this.
    """
    argv = [*argv, "--resume", "latest"]
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    earlier = resumed_seconds(run_dir)
    start = time.perf_counter()
    with (run_dir / RUN_LOG).open("a") as log:
        log.write(f"$ python scripts/train.py {' '.join(argv)}\n")
        log.flush()
        code = subprocess.run(
            [sys.executable, "-c", TRAIN_ENTRY, *argv], stdout=log, stderr=subprocess.STDOUT, env=env
        ).returncode
    elapsed = time.perf_counter() - start
    if code == 0:
        timing = {"argv": argv, "threads": threads, "elapsed_s": round(earlier + elapsed, 1), "earlier_s": earlier}
        write_json(run_dir / RUN_TIMING, timing)
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # final/ holds the model; resuming is over
    return code, elapsed


@contextmanager
def _wall_clock(path: Path) -> Iterator[dict[str, float]]:
    """Add the time spent inside to the total kept in ``path``, even when interrupted (resumes add up)."""
    clock = {"total": json.loads(path.read_text())["wall_clock_s"] if path.is_file() else 0.0}
    start = time.perf_counter()
    try:
        yield clock
    finally:
        clock["total"] += time.perf_counter() - start
        write_json(path, {"wall_clock_s": round(clock["total"], 1)})
