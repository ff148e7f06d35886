"""The small-data benchmark: the paper's Table 2 and Figure 3 comparison, reproducible with one command.

Every arm trains the same architecture with one shared recipe through :func:`structinit_hf.train.run` (one spawned
process per run: :mod:`study.small_data_runs`); only the attention init differs, and
ConViT-Tiny at the same size is the architectural peer. Runs with the same seed see the same data in
the same order whatever the arm (``train.py`` derives the split, the shuffle and the augmentation from
``--seed`` alone). A run is finished when its ``results.json`` exists, so an interrupted benchmark
resumes where it stopped: finished runs are kept, a run cut short resumes from its last epoch checkpoint.

Modules: :mod:`structinit_hf.benchmark.arms` (arms), :mod:`study.profiles` (profiles), :mod:`study.small_data_runs`
(training the runs), :mod:`structinit_hf.benchmark.summary` (tables, curves), :mod:`study.release` (release cards);
this one ties them together and is ``study/benchmark_small_data.py``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

from structinit_hf.benchmark.arms import ALL_ARMS, FAMILY_ARMS, STUDIES, Arm, select_arms, study_arm_names
from structinit_hf.benchmark.profiles import BenchmarkDataset, Profile, with_epochs
from structinit_hf.benchmark.runs import RUN_LOG, RUN_RESULTS, is_finished, run_dir_for, run_settings
from structinit_hf.benchmark.summary import aggregate_runs, write_outputs
from structinit_hf.train import UsageError
from structinit_hf.train._internal import ATTENTION_IMAGE
from study.profiles import PROFILES
from study.release import draw_run_attention, write_release_cards
from study.small_data_runs import BENCHMARK_CLOCK, _wall_clock, check_finished_runs, kept_wall_clock, train_one

__all__ = ["benchmark_parser", "main", "run_benchmark"]


def run_benchmark(
    profile: Profile,
    *,
    dataset: str | None = None,
    arms: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    runs_dir: Path,
    out_dir: Path,
    jobs: int | None = None,
    command: str = "",
    study: str = "main",
    train: bool = True,
) -> dict[str, Any]:
    """Train every unfinished (arm, seed) run of ``profile``, then write the tables and plots to ``out_dir``.
    ``train=False`` trains nothing: the record is written from finished runs only (such as runs brought back from
    a lent GPU), and a run that is not there is an error.

    Runs go seed by seed (all arms of seed 0 first), ``jobs`` at a time with ``usable_cpus() // jobs``
    threads each. A failed run does not stop the others; the failures are raised together at the end
    with the paths of their logs. Returns the aggregated record written to ``out_dir/results.json``.
    """
    dataset_key, spec = _dataset_spec(profile, dataset)
    chosen = select_arms(arms)
    foreign = [arm.name for arm in chosen if arm.family != profile.family]
    if foreign:
        raise ValueError(
            f"arm(s) {', '.join(foreign)} train another architecture than profile {profile.name!r} "
            f"({profile.family}); its arms: {', '.join(FAMILY_ARMS[profile.family])}"
        )
    seeds = list(profile.seeds if seeds is None else seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one, got {seeds}")
    jobs = profile.jobs if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    runs = [(arm, seed, run_dir_for(runs_dir, arm, seed)) for seed in seeds for arm in chosen]
    check_finished_runs((run_settings(profile, arm, seed, spec, path), path) for arm, seed, path in runs)
    pending = [(arm, seed, path) for arm, seed, path in runs if not is_finished(path)]
    if pending and not train:
        raise UsageError(
            f"--report-only: {len(pending)} of {len(runs)} runs are not finished in {runs_dir} "
            f"({', '.join(path.name for _, _, path in pending)}); leave out --report-only to train them"
        )
    print(f"{len(runs) - len(pending)} of {len(runs)} runs already finished in {runs_dir}; training {len(pending)}")

    clock_file = Path(runs_dir) / (BENCHMARK_CLOCK if study == "main" else f"wall_clock-{study}.json")
    if train:
        with _wall_clock(clock_file) as clock:
            failures = _train_runs(profile, spec, pending, jobs)
        if failures:
            raise ChildProcessError(f"{len(failures)} run(s) failed: {'; '.join(failures)}. Rerun to retry them.")
        wall_clock_s = clock["total"]
    else:
        wall_clock_s = kept_wall_clock(clock_file)
    record = aggregate_runs(
        {arm.name: [path for a, _, path in runs if a is arm] for arm in chosen},
        profile=profile,
        dataset_key=dataset_key,
        command=command,
        wall_clock_s=wall_clock_s,
        jobs=jobs,
        study=study,
    )
    record["report_only"] = not train
    for arm in record["arms"].values():
        if not (Path(arm["best_run"]) / ATTENTION_IMAGE).is_file():
            draw_run_attention(Path(arm["best_run"]))
    write_outputs(record, out_dir)
    return record


def _dataset_spec(profile: Profile, dataset: str | None) -> tuple[str, BenchmarkDataset]:
    """The key and spec of ``dataset`` in ``profile`` (default: its first); a local folder must exist."""
    dataset_key = dataset if dataset is not None else next(iter(profile.datasets))
    if dataset_key not in profile.datasets:
        raise ValueError(
            f"profile {profile.name!r} has no dataset {dataset_key!r}; expected one of {', '.join(profile.datasets)}"
        )
    spec = profile.datasets[dataset_key]
    if (spec.local or spec.dataset.startswith((".", "/", "~"))) and not Path(spec.dataset).expanduser().is_dir():
        raise ValueError(f"dataset folder {spec.dataset!r} does not exist; pass its location with --data-path")
    return dataset_key, spec


def _train_runs(profile: Profile, spec: BenchmarkDataset, pending: list[tuple[Arm, int, Path]], jobs: int) -> list[str]:
    """Train the ``pending`` runs, ``jobs`` at a time with ``usable_cpus() // jobs`` threads each, saying as each ends
    how it did; returns the failed ones, each with the path of its log."""
    from structinit_hf.train._internal import usable_cpus  # accelerate and torch: not loaded for the parser

    threads = max(1, usable_cpus() // jobs)
    failures = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {
            pool.submit(train_one, run_settings(profile, arm, seed, spec, path), threads): (arm, seed, path)
            for arm, seed, path in pending
        }
        for done, future in enumerate(as_completed(futures), start=1):
            (arm, seed, path), (code, elapsed) = futures[future], future.result()
            if code:
                failures.append(f"{arm.name} seed {seed} (exit code {code}; log {path / RUN_LOG})")
                print(f"[{done}/{len(pending)}] {arm.name} seed {seed}: FAILED, see {path / RUN_LOG}", flush=True)
                continue
            top1 = json.loads((path / RUN_RESULTS).read_text())["top1"]
            print(f"[{done}/{len(pending)}] {arm.name} seed {seed}: top-1 {top1:.2f}% ({elapsed:.0f} s)", flush=True)
    return failures


def benchmark_parser() -> argparse.ArgumentParser:
    """The flags of ``study/benchmark_small_data.py``."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description="Train every attention init (and ConViT) with one recipe on small data; write the "
        "paper-style table, curves and raw results. Rerun the same command to resume.",
    )
    parser.add_argument("--profile", choices=tuple(PROFILES), default="cpu", help="cpu (default) or paper")
    _add_dataset_arguments(parser)
    parser.add_argument(
        "--study",
        choices=STUDIES,
        default="main",
        help="main (default): the six arms of the paper's table; ablation: impulse 3x3 with one setting changed "
        "at a time, beside the default and mimetic runs",
    )
    parser.add_argument(
        "--arms",
        nargs="+",
        default=None,
        choices=tuple(ALL_ARMS),
        help="default: every arm of the study (a Swin, Mixer or stock-model profile: every arm of its family, swin-*, "
        "mixer-* or model-*)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default: the profile's")
    parser.add_argument("--jobs", type=int, default=None, help="runs at a time (default: the profile's)")
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="train this many epochs instead of the profile's (a check sized to the time at hand); the record "
        "keeps the count in its recipe",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: write the record from the finished runs in --runs-dir (e.g. runs brought back from a "
        "lent GPU), and refuse if one is missing",
    )
    _add_output_arguments(parser)
    return parser


def _add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """Which of the profile's datasets to train on, and where it lives."""
    parser.add_argument(
        "--dataset",
        default=None,
        help="a dataset key of the profile (cpu: cifar10-small; paper: cifar10, cifar100, svhn); "
        "default: the profile's first",
    )
    parser.add_argument(
        "--data-root",
        default=None,
        help="the folder holding a local profile's dataset folders (cpu, cpu-proxy*: cifar10-small, cifar10), "
        "e.g. data",
    )
    parser.add_argument(
        "--data-path",
        default=None,
        help="where the chosen dataset lives (a local folder or Hub id), if not the profile's",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the run folders, the staged release repos and the results go."""
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=None,
        help="where the run folders go (default: runs/small_data-<profile>-<dataset>)",
    )
    parser.add_argument(
        "--release-cards",
        type=Path,
        default=None,
        help="also stage each arm's best run for the Hub (into <runs-dir>/release/) and keep its rendered model "
        "card in this folder, e.g. model_cards",
    )
    parser.add_argument(
        "--release-namespace", default="structinit-hf", help="Hub namespace of the staged repos (default: %(default)s)"
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="where results.md/json and curves.png go (default: study/records/small_data for the "
        "cpu profile, study/records/small_data/<profile>-<dataset> otherwise)",
    )


def _default_arms(profile: Profile, study: str) -> list[str]:
    """The arms a profile trains when ``--arms`` is left out: the study's for a ViT profile, else its family's."""
    return study_arm_names(study) if profile.family == "vit" else list(FAMILY_ARMS[profile.family])


def main(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Run the benchmark the parsed ``args`` describe."""
    profile = PROFILES[args.profile]
    if args.epochs is not None:
        profile = with_epochs(profile, args.epochs)
    dataset = args.dataset if args.dataset is not None else next(iter(profile.datasets))
    if dataset not in profile.datasets:
        raise ValueError(f"--dataset {dataset!r} is not in profile {profile.name!r}: {', '.join(profile.datasets)}")
    spec = profile.datasets[dataset]
    location = args.data_path
    if location is None and spec.local:
        if args.data_root is None:
            raise UsageError(
                f"profile {profile.name!r} reads {dataset!r} from a local folder: pass --data-root DIR (the folder "
                f"holding {spec.dataset}/, e.g. data) or --data-path"
            )
        location = os.path.join(args.data_root, spec.dataset)
    if location is not None:
        profile = replace(profile, datasets={**profile.datasets, dataset: replace(spec, dataset=location)})
    default_out = Path("study/records/small_data")
    if profile.name != "cpu":
        default_out = default_out / f"{profile.name}-{dataset}"
    if args.study == "ablation":
        default_out = default_out / "ablation"
    runs_dir = args.runs_dir or Path("runs") / f"small_data-{profile.name}-{dataset}"
    record = run_benchmark(
        profile,
        dataset=dataset,
        arms=args.arms if args.arms is not None else _default_arms(profile, args.study),
        seeds=args.seeds,
        runs_dir=runs_dir,
        out_dir=args.out_dir or default_out,
        jobs=args.jobs,
        command=command,
        study=args.study,
        train=not args.report_only,
    )
    if args.release_cards is not None:
        cards = write_release_cards(record, args.release_cards, runs_dir / "release", args.release_namespace)
        print(f"staged {len(cards)} repo folder(s) in {runs_dir / 'release'}; cards in {args.release_cards}")
    return record
