"""The small-data benchmark: the paper's Table 2 and Figure 3 comparison, reproducible with one command.

Every arm trains the same architecture with one shared recipe through ``scripts/train.py``'s code
(:func:`structinit_hf.training.train`, one subprocess per run); only the attention init differs, and
ConViT-Tiny at the same size is the architectural peer. Runs with the same seed see the same data in
the same order whatever the arm (``train.py`` derives the split, the shuffle and the augmentation from
``--seed`` alone). A run is finished when its ``results.json`` exists, so an interrupted benchmark
resumes where it stopped: finished runs are kept, a run cut short resumes from its last epoch checkpoint.

Profiles:

* ``cpu``: the 4,660 / 932 real CIFAR-10 images of ``../shared/data/cifar10-small``, ViT-Tiny width
  (dim 192, 3 heads) at 32 px with patch 4 (8 x 8 tokens), 6 blocks, 8 epochs, batch 64, 1 warm-up
  epoch, two runs at a time with one thread each. Sizing, timed with ``scripts/train.py`` on the
  shared 2-core CPU while other jobs ran: ~53 training images/s per single-thread run (40 assumed to
  be safe; ConViT ~20 % slower), ~10 s start-up and ~25 s of evaluation per run. At 40 images/s the
  6 arms x 2 seeds take about 90 minutes (12 runs, two in parallel); at the measured rate about 70.
* ``paper``: the paper's setting (ViT-Tiny, patch 2, 12 blocks, 200 epochs, batch 512 and the rest of
  ``train.py``'s default recipe) on CIFAR-10, CIFAR-100 or SVHN from the Hub: for GPUs, not run here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from .atomic import replace_folder, write_json, write_text
from .evaluation import load_model
from .hub import ATTENTION_IMAGE, CARD_FILE, stage_repo_folder
from .init import ImpulseOptions
from .plots import load_images, plot_attention_figure, save_figure
from .timm_models import IMPULSE_KWARGS
from .training import TRAINER_STATE

__all__ = [
    "ABLATION_ARMS",
    "ABLATION_REFERENCES",
    "ARMS",
    "PAPER_TABLE2",
    "PROFILES",
    "Arm",
    "BenchmarkDataset",
    "Profile",
    "aggregate_runs",
    "benchmark_parser",
    "draw_run_attention",
    "plot_curves",
    "render_results_markdown",
    "run_benchmark",
    "run_dir_for",
    "select_arms",
    "release_repo_id",
    "train_argv",
    "write_outputs",
    "write_release_cards",
]


@dataclass(frozen=True)
class Arm:
    """One column of the comparison: a registered model name, its extra kwargs and the paper's row."""

    name: str
    description: str
    model: str
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    paper_row: str | None = None  # key of PAPER_TABLE2, None where the paper reports no figure


# timm 1.0.31's weight_init='reset' calls each module's own reset_parameters() and nothing else: nn.Linear
# and the patch-embedding Conv2d get PyTorch's Kaiming-uniform default (weights and biases uniform in
# +-1/sqrt(fan_in)), LayerNorm ones/zeros; the sin-cos position embedding is then written by the builder.
ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm("default", "timm default (trunc normal, std 0.02)", "vit_tiny_patch2_32", {}, "default"),
        Arm("kaiming", "PyTorch default (Kaiming uniform)", "vit_tiny_patch2_32", {"weight_init": "reset"}, "kaiming"),
        Arm("mimetic", "mimetic", "vit_tiny_mimetic", {}, "mimetic"),
        Arm("impulse3", "impulse 3x3", "vit_tiny_impulse3", {}, "impulse3"),
        Arm("impulse5", "impulse 5x5", "vit_tiny_impulse5", {}, "impulse5"),
        Arm("v1", "impulse 3x3, the authors' v1 (Adam, arXiv 2404.01139)", "vit_tiny_impulse3", {"preset": "v1"}),
        Arm("v2", "impulse 3x3, the authors' v2 (NeurIPS 2025)", "vit_tiny_impulse3", {"preset": "v2"}),
        Arm("convit", "ConViT-Tiny (GPSA, architectural peer)", "convit_tiny_patch2_32", {}, None),
    )
}

# The impulse settings first released (chosen from init-time fidelity alone), spelled out so the ablation's
# runs stay the same runs when the package defaults move (``value_init``, added after them, was "default").
FIRST_IMPULSE_DEFAULTS: dict[str, Any] = {
    "pseudo_input": "sincos",
    "sharpness": 0.7,
    "solver": "svd",
    "per_layer": False,
    "suppress_content": True,
    "patch_embed_scale": 0.5,
}

# The ablation (``--study ablation``): impulse 3x3 with one setting changed at a time from the first defaults,
# plus the paper's own solve; the main study's ``default``, ``mimetic`` and ``impulse3`` (today's defaults) runs
# are its references.
ABLATION_ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm(
            "impulse3-v0",
            "impulse 3x3, first defaults (svd, sharpness 0.7, content suppressed, patch x0.5)",
            "vit_tiny_impulse3",
            dict(FIRST_IMPULSE_DEFAULTS),
        ),
        Arm(
            "impulse3-paper",
            "impulse 3x3, the paper's solve (adam, content not suppressed, patch x1)",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "solver": "adam", "suppress_content": False, "patch_embed_scale": 1.0},
        ),
        Arm(
            "impulse3-scale1",
            "v0 with patch_embed_scale 1",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "patch_embed_scale": 1.0},
        ),
        Arm(
            "impulse3-soft", "v0 with sharpness 0.3", "vit_tiny_impulse3", {**FIRST_IMPULSE_DEFAULTS, "sharpness": 0.3}
        ),
        Arm(
            "impulse3-content",
            "v0 with suppress_content off",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "suppress_content": False},
        ),
        Arm(
            "impulse3-perlayer",
            "v0 with a fresh solve per block",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "per_layer": True},
        ),
        Arm(
            "impulse3-noisy",
            "v0 solved on sin-cos plus Gaussian noise",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "pseudo_input": "sincos+gaussian"},
        ),
        Arm(
            "impulse3-mimeticvo",
            "v0 with mimetic value/output projections",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "value_init": "mimetic"},
        ),
    )
}
# The patch-2 diagnosis (issue 11): today's impulse defaults with one of v2's choices each, on the cpu-proxy profile.
DIAGNOSIS_ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm(
            "impulse3-qkfro7",
            "impulse 3x3, Q/K at Frobenius norm 7 per head (v2's scale)",
            "vit_tiny_impulse3",
            {"qk_frobenius": 7.0},
        ),
        Arm("impulse3-pos18", "impulse 3x3, position code x18 (v2's)", "vit_tiny_impulse3", {"position_scale": 18.0}),
        Arm(
            "impulse3-mimeticvo",
            "impulse 3x3, mimetic value/output (v2's)",
            "vit_tiny_impulse3",
            {"value_init": "mimetic"},
        ),
        Arm("impulse3-free", "impulse 3x3, content not suppressed", "vit_tiny_impulse3", {"suppress_content": False}),
    )
}
ABLATION_REFERENCES = ("default", "mimetic", "impulse3")
ALL_ARMS: dict[str, Arm] = {**ARMS, **ABLATION_ARMS, **DIAGNOSIS_ARMS}  # every arm --arms accepts
STUDIES = ("main", "ablation")

# The paper's Table 2 (top-1 %, ViT-Tiny, 200 epochs), for reference beside our own numbers.
PAPER_TABLE2: dict[str, dict[str, float]] = {
    "kaiming": {"cifar10": 86.36, "cifar100": 63.50, "svhn": 94.51},
    "default": {"cifar10": 88.63, "cifar100": 66.50, "svhn": 93.20},
    "mimetic": {"cifar10": 91.16, "cifar100": 70.40, "svhn": 97.53},
    "impulse3": {"cifar10": 91.62, "cifar100": 68.81, "svhn": 97.21},
    "impulse5": {"cifar10": 90.67, "cifar100": 70.46, "svhn": 97.23},
}


@dataclass(frozen=True)
class BenchmarkDataset:
    """A dataset a profile trains on: ``train.py``'s ``--dataset`` / ``--dataset-config`` and the paper's column."""

    dataset: str
    config: str | None = None
    paper_column: str | None = None  # key into PAPER_TABLE2 rows
    hub_id: str | None = None  # the Hub dataset a local copy comes from (push_to_hub's --dataset-id)


@dataclass(frozen=True)
class Profile:
    """Everything shared by the arms of one benchmark: data, architecture overrides, recipe and seeds."""

    name: str
    datasets: dict[str, BenchmarkDataset]
    architecture: dict[str, Any]  # --model-kwargs shared by every arm (img_size, patch_size, depth ...)
    recipe: dict[str, Any]  # train.py flags (dest names) shared by every arm
    seeds: tuple[int, ...]
    table_epochs: tuple[int, ...]  # epochs shown in the table besides the final score
    jobs: int  # runs trained at the same time
    notes: str = ""  # why the profile is sized as it is: printed in results.md


PROFILES: dict[str, Profile] = {
    "cpu": Profile(
        name="cpu",
        datasets={
            "cifar10-small": BenchmarkDataset("../shared/data/cifar10-small", None, "cifar10", "uoft-cs/cifar10")
        },
        architecture={"img_size": 32, "patch_size": 4, "depth": 6},
        recipe={"epochs": 8, "batch_size": 64, "warmup_epochs": 1, "keep_checkpoints": 1},
        seeds=(0, 1),
        table_epochs=(2, 4),
        jobs=2,
        notes="Sized for a shared 2-core CPU: ViT-Tiny width (dim 192, 3 heads) with patch 4 (8 x 8 tokens at 32 px) "
        "and 6 blocks instead of patch 2 and 12, 8 epochs of 4,194 training images (466 held out for validation), "
        "batch 64 with 1 warm-up epoch; the rest is the paper's recipe (AdamW lr 1e-3, wd 0.01, RandAugment m9, "
        "label smoothing 0.1, clip 3). Two runs at a time, one thread each. Planned from ~53 images/s measured per "
        "single-thread run on the busy machine (40 assumed): about 90 minutes for 6 arms x 2 seeds.",
    ),
    "cpu-proxy": Profile(
        name="cpu-proxy",
        datasets={"cifar10": BenchmarkDataset("../shared/data/cifar10", None, "cifar10", "uoft-cs/cifar10")},
        architecture={"img_size": 16, "patch_size": 2, "depth": 12, "embed_dim": 48, "num_heads": 3},
        recipe={
            "epochs": 6,
            "batch_size": 256,
            "warmup_epochs": 1,
            "weight_decay": 0.05,
            "aa": "none",
            "scale": (0.35, 1.0),
            "max_train_samples": 20_000,
            "val_split": 0.02,
            "keep_checkpoints": 1,
        },
        seeds=(0, 1),
        table_epochs=(2, 4),
        jobs=2,
        notes="The paper's token (patch 2: 12 pixel values per token) on a 2-core CPU: full CIFAR-10 images resized to "
        "16 px (8 x 8 tokens), ViT depth 12, width 48, 3 heads; 6 epochs of 20,000 training images (2% held out for "
        "validation), all 10,000 test images scored; batch 256, AdamW lr 1e-3 wd 0.05, 1 warm-up epoch, crop + flip "
        "without RandAugment, label smoothing 0.1, clip 3. Two runs at a time, one thread each: about 13 minutes "
        "a run on the shared 2-core CPU (~170 training images/s per run). The patch-2 token, not the token count, "
        "is what made impulse init trail at paper scale (../shared/DESIGN.md).",
    ),
    "cifar10": Profile(
        name="cifar10",
        datasets={"cifar10": BenchmarkDataset("data/cifar10", None, "cifar10", "uoft-cs/cifar10")},
        architecture={"img_size": 32, "patch_size": 2, "depth": 12},
        recipe={"epochs": 20, "batch_size": 512, "warmup_epochs": 1, "keep_checkpoints": 1, "val_split": 0.02},
        seeds=(0, 1),
        table_epochs=(5, 10),
        jobs=4,
        notes="For one GPU: the paper's architecture (ViT-Tiny, 32 px, patch 2, 12 blocks) on full CIFAR-10 (a local "
        "copy in data/cifar10), 20 epochs (the authors' own Colab compared inits at 20), batch 512, 1 warm-up epoch, "
        "the rest of train.py's recipe, with train.py's GPU defaults (bf16 autocast, compile). Four runs share the "
        "GPU at a time (six at once ran out of 80 GB). Default, mimetic, impulse3, impulse5, v1 and v2 take two "
        "seeds; Kaiming and ConViT (about 7x slower) one: pass --arms ... --seeds 0 for those.",
    ),
    "paper": Profile(
        name="paper",
        datasets={
            "cifar10": BenchmarkDataset("uoft-cs/cifar10", None, "cifar10"),
            "cifar100": BenchmarkDataset("uoft-cs/cifar100", None, "cifar100"),
            "svhn": BenchmarkDataset("ufldl-stanford/svhn", "cropped_digits", "svhn"),
        },
        architecture={"img_size": 32, "patch_size": 2, "depth": 12},
        recipe={"epochs": 200, "batch_size": 512, "workers": 4, "keep_checkpoints": 1},
        seeds=(0, 1, 2),
        table_epochs=(50, 100),
        jobs=1,
        notes="The paper's setting: ViT-Tiny (dim 192, 12 blocks, 3 heads), 32 px, patch 2, 200 epochs, batch 512, "
        "AdamW lr 1e-3 wd 0.01 eps 1e-3, cosine with 10 warm-up epochs, RandAugment m9, label smoothing 0.1, "
        "clip 3; one run at a time on the full dataset from the Hub.",
    ),
}

RUN_RESULTS = "results.json"
RUN_LOG = "train.log"
RUN_TIMING = "benchmark_run.json"
BENCHMARK_CLOCK = "wall_clock.json"  # per study: wall_clock-ablation.json for the ablation
RUN_SPECIFIC_ARGS = ("model", "model_kwargs", "seed", "output_dir", "resume", "dataset", "dataset_config")
CONVIT_GPSA_SHARE = 10 / 12  # ConViT-Tiny: 10 of its 12 blocks are GPSA; kept when the depth changes
# scripts/train.py, run as ``python -c`` so the benchmark needs no checkout of the scripts folder
TRAIN_ENTRY = "from structinit_hf.training import train, training_parser; train(training_parser().parse_args())"


def study_arm_names(study: str) -> list[str]:
    """The arms a study trains by default: the six of the main table, or the ablation with its reference rows."""
    if study not in STUDIES:
        raise ValueError(f"unknown study {study!r}; expected one of {', '.join(STUDIES)}")
    return list(ARMS) if study == "main" else [*ABLATION_REFERENCES, *ABLATION_ARMS]


def select_arms(names: Iterable[str] | None = None) -> list[Arm]:
    """The arms called ``names`` (the main six for ``None``), in the order given; ablation arms included."""
    if names is None:
        return list(ARMS.values())
    names = list(names)
    unknown = [name for name in names if name not in ALL_ARMS]
    if unknown or not names:
        raise ValueError(f"unknown arm(s) {unknown or names}; expected some of {', '.join(ALL_ARMS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"arm names repeat in {names}")
    return [ALL_ARMS[name] for name in names]


def arm_model_kwargs(arm: Arm, profile: Profile) -> dict[str, Any]:
    """The builder kwargs of ``arm`` under ``profile``: the shared architecture, then the arm's own.

    ConViT keeps its share of GPSA blocks (10 of 12) when the profile changes the depth.
    """
    kwargs = {**profile.architecture, **arm.model_kwargs}
    if arm.model.startswith("convit") and "depth" in kwargs:
        kwargs.setdefault("local_up_to_layer", max(1, round(kwargs["depth"] * CONVIT_GPSA_SHARE)))
    return kwargs


def _flag_values(name: str, value: Any) -> list[str]:
    flag = f"--{name.replace('_', '-')}"
    if isinstance(value, bool):
        return [flag] if value else []
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
        argv += _flag_values(name, value)
    return argv + ["--seed", str(seed), "--output-dir", str(run_dir)]


def run_dir_for(runs_dir: Path, arm: Arm, seed: int) -> Path:
    return Path(runs_dir) / f"{arm.name}-seed{seed}"


def _is_finished(run_dir: Path) -> bool:
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
    given = {key: value for key, value in model_kwargs.items() if key in IMPULSE_KWARGS}
    expected = asdict(ImpulseOptions(**{"kernel_size": recorded.get("kernel_size"), **given}))
    return all(expected.get(key) == value for key, value in recorded.items() if key != "attention_init")


def check_finished_runs(planned: Iterable[tuple[list[str], Path, dict[str, Any]]]) -> None:
    """Refuse to reuse a finished run that is not the run the benchmark would train now: other arguments (an arm
    or the recipe edited since) or other init settings (a package default moved). It would be scored under the
    wrong name. Takes ``(train argv, run folder, model kwargs)`` per run; nothing is deleted."""
    stale = []
    for argv, run_dir, model_kwargs in planned:
        if not _is_finished(run_dir):
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


def _train_one(argv: list[str], run_dir: Path, threads: int) -> tuple[int, float]:
    """Train one run in a subprocess (its own memory, its own thread count); log to ``run_dir/train.log``.

    A run cut short resumes from its newest complete checkpoint; one cut short before its first
    checkpoint starts over, without what it left (a partial ``checkpoints/``, a logged first epoch).
    """
    if any((run_dir / "checkpoints").glob(f"epoch_*/{TRAINER_STATE}")):
        argv = [*argv, "--resume", "latest"]
    else:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        (run_dir / "metrics.jsonl").unlink(missing_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    with (run_dir / RUN_LOG).open("a") as log:
        log.write(f"$ python scripts/train.py {' '.join(argv)}\n")
        log.flush()
        code = subprocess.run(
            [sys.executable, "-c", TRAIN_ENTRY, *argv], stdout=log, stderr=subprocess.STDOUT, env=env
        ).returncode
    elapsed = time.perf_counter() - start
    if code == 0:
        write_json(run_dir / RUN_TIMING, {"argv": argv, "threads": threads, "elapsed_s": round(elapsed, 1)})
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # final/ holds the model; resuming is over
    return code, elapsed


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
) -> dict[str, Any]:
    """Train every unfinished (arm, seed) run of ``profile``, then write the tables and plots to ``out_dir``.

    Runs go seed by seed (all arms of seed 0 first), ``jobs`` at a time with ``cpu_count // jobs``
    threads each. A failed run does not stop the others; the failures are raised together at the end
    with the paths of their logs. Returns the aggregated record written to ``out_dir/results.json``.
    """
    dataset_key = dataset if dataset is not None else next(iter(profile.datasets))
    if dataset_key not in profile.datasets:
        raise ValueError(
            f"profile {profile.name!r} has no dataset {dataset_key!r}; expected one of {', '.join(profile.datasets)}"
        )
    spec = profile.datasets[dataset_key]
    if spec.dataset.startswith((".", "/", "~")) and not Path(spec.dataset).expanduser().is_dir():
        raise ValueError(f"dataset folder {spec.dataset!r} does not exist; pass its location with --data-path")
    chosen = select_arms(arms)
    seeds = list(profile.seeds if seeds is None else seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one, got {seeds}")
    jobs = profile.jobs if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    threads = max(1, (os.cpu_count() or 1) // jobs)
    runs = [(arm, seed, run_dir_for(runs_dir, arm, seed)) for seed in seeds for arm in chosen]
    check_finished_runs(
        (train_argv(profile, arm, seed, spec, path), path, arm_model_kwargs(arm, profile)) for arm, seed, path in runs
    )
    pending = [(arm, seed, path) for arm, seed, path in runs if not _is_finished(path)]
    print(f"{len(runs) - len(pending)} of {len(runs)} runs already finished in {runs_dir}; training {len(pending)}")

    failures = []
    clock_file = BENCHMARK_CLOCK if study == "main" else f"wall_clock-{study}.json"
    with _wall_clock(Path(runs_dir) / clock_file) as clock, ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {
            pool.submit(_train_one, train_argv(profile, arm, seed, spec, path), path, threads): (arm, seed, path)
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
    if failures:
        raise RuntimeError(f"{len(failures)} run(s) failed: {'; '.join(failures)}. Rerun to retry them.")
    record = aggregate_runs(
        {arm.name: [path for a, _, path in runs if a is arm] for arm in chosen},
        profile=profile,
        dataset_key=dataset_key,
        command=command,
        wall_clock_s=clock["total"],
        jobs=jobs,
        study=study,
    )
    for arm in record["arms"].values():
        if not (Path(arm["best_run"]) / ATTENTION_IMAGE).is_file():
            draw_run_attention(Path(arm["best_run"]))
    write_outputs(record, out_dir)
    return record


def draw_run_attention(run_dir: Path, num_images: int = 16) -> Path:
    """``run_dir/attention_init.png``: the run's model rebuilt as it started (same name, kwargs and seed), on
    images of the split it was scored on; the model card of a published run shows it."""
    results = json.loads((Path(run_dir) / RUN_RESULTS).read_text())
    torch.manual_seed(results["args"]["seed"])
    model, _ = load_model(results["model"], num_classes=results["num_classes"], model_kwargs=results["model_kwargs"])
    images = load_images(results["dataset"], [model], num_images, split=results["split"])
    return plot_attention_figure(
        {results["model"]: model},
        images,
        Path(run_dir) / ATTENTION_IMAGE,
        title=f"attention at initialization (head 0, mean over {len(images[0])} {results['split']} images)",
    )


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


def _read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def aggregate_runs(
    arm_runs: dict[str, list[Path]],
    *,
    profile: Profile,
    dataset_key: str,
    command: str = "",
    wall_clock_s: float | None = None,
    jobs: int = 1,
    study: str = "main",
) -> dict[str, Any]:
    """Collect finished runs into the benchmark record (``results.json``).

    ``arms.<arm>.final_top1`` lists one final top-1 (percent, on the evaluation split) per seed;
    ``val_top1`` one per-epoch curve per seed. ``best_run`` is the run with the highest last-epoch
    validation top-1 (held-out training images, not the test split), ties broken by the final top-1:
    the folder to publish with ``scripts/push_to_hub.py --run-dir``.
    """
    arms: dict[str, Any] = {}
    first: dict[str, Any] | None = None
    for name, paths in arm_runs.items():
        missing = [str(path) for path in paths if not _is_finished(path)]
        if missing:
            raise ValueError(f"arm {name!r} has unfinished runs (no {RUN_RESULTS}): {', '.join(missing)}")
        results = [json.loads((path / RUN_RESULTS).read_text()) for path in paths]
        curves = [[m["val_top1"] for m in _read_metrics(path)] for path in paths]
        first = first or results[0]
        timing = [path / RUN_TIMING for path in paths]
        best = max(range(len(paths)), key=lambda i: (curves[i][-1], results[i]["top1"]))
        arms[name] = {
            "description": ALL_ARMS[name].description if name in ALL_ARMS else name,
            "model": results[0]["model"],
            "model_kwargs": results[0]["model_kwargs"],
            "init": results[0]["init"],
            "seeds": [r["args"]["seed"] for r in results],
            "final_top1": [r["top1"] for r in results],
            "final_top5": [r["top5"] for r in results],
            "val_top1": curves,
            "wall_time_s": [
                json.loads(t.read_text())["elapsed_s"] if t.is_file() else r["wall_time_s"]
                for t, r in zip(timing, results, strict=True)
            ],
            "runs": [str(path) for path in paths],
            "best_run": str(paths[best]),
        }
    if first is None:
        raise ValueError("no runs to aggregate")
    spec = profile.datasets[dataset_key]
    options = {key: value for key, value in first["args"].items() if key not in RUN_SPECIFIC_ARGS}
    return {
        "profile": profile.name,
        "study": study,
        "profile_notes": profile.notes,
        "dataset": spec.dataset,
        "dataset_config": spec.config,
        "dataset_hub_id": spec.hub_id,
        "split": first["split"],
        "num_eval_images": first["num_samples"],
        "command": command,
        "architecture": dict(profile.architecture),
        "recipe": dict(profile.recipe),
        "train_options": options,
        "table_epochs": list(profile.table_epochs),
        "paper_column": spec.paper_column,
        "paper_table2": {arm: row[spec.paper_column] for arm, row in PAPER_TABLE2.items() if spec.paper_column in row},
        "run_time_s": round(sum(sum(arm["wall_time_s"]) for arm in arms.values()), 1),
        "wall_clock_s": None if wall_clock_s is None else round(wall_clock_s, 1),
        "jobs": jobs,
        "versions": first["versions"],
        "arms": arms,
    }


def _format_spread(values: Sequence[float]) -> str:
    spread = _spread(values)
    return f"{spread['mean']:.2f} ± {spread['std']:.2f}" if len(values) > 1 else f"{spread['mean']:.2f}"


def _table(record: dict[str, Any]) -> list[str]:
    epochs, paper = record["table_epochs"], record["paper_table2"]
    head = [
        "arm",
        "init",
        *(f"val top-1 @ epoch {e}" for e in epochs),
        "val top-1, last epoch",
        f"final top-1 ({record['split']})",
        "per seed",
        f"paper Table 2 ({record['paper_column']})",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, arm in record["arms"].items():
        curves = arm["val_top1"]
        at_epoch = [_format_spread([c[e - 1] for c in curves]) if min(map(len, curves)) >= e else "–" for e in epochs]
        cells = [
            f"`{name}`",
            arm["description"],
            *at_epoch,
            _format_spread([c[-1] for c in curves]),
            f"**{_format_spread(arm['final_top1'])}**",
            ", ".join(f"{v:.2f}" for v in arm["final_top1"]),
            f"{paper[name]:.2f}" if name in paper else "–",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _target_lines(arms: dict[str, Any]) -> list[str]:
    """The issue's target, computed from the runs: impulse 3x3 >= default + 3 and >= mimetic - 0.5 (means)."""
    if not {"impulse3", "default", "mimetic"} <= arms.keys():
        return []
    mean = {name: statistics.fmean(arms[name]["final_top1"]) for name in ("impulse3", "default", "mimetic")}
    gain, versus_mimetic = mean["impulse3"] - mean["default"], mean["impulse3"] - mean["mimetic"]
    met = gain >= 3.0 and versus_mimetic >= -0.5
    return [
        f"Impulse 3x3 minus timm default: **{gain:+.2f}** points (target: at least +3); impulse 3x3 minus mimetic: "
        f"**{versus_mimetic:+.2f}** points (target: at least -0.5). Target {'met' if met else 'not met'}.",
        "",
    ]


def _ablation_lines(record: dict[str, Any]) -> list[str]:
    """What the ablation varies, and each arm's final top-1 against the first defaults (``impulse3-v0``)."""
    if record.get("study") != "ablation":
        return []
    arms = record["arms"]
    lines = [
        "Each `impulse3-*` arm changes one setting of the first released defaults (`impulse3-v0`; `impulse3-paper` "
        "changes three, to the paper's own solve); `default`, `mimetic` and `impulse3` (the package defaults when it "
        "ran, see its `init` in `results.json`) are the main study's runs of the same seed(s). Every setting of "
        "every arm is in its `model_kwargs` below and in `results.json`.",
        "",
    ]
    if "impulse3-v0" in arms:
        base = statistics.fmean(arms["impulse3-v0"]["final_top1"])
        deltas = [f"`{name}` {statistics.fmean(arm['final_top1']) - base:+.2f}" for name, arm in arms.items()]
        lines += [f"Final top-1 minus `impulse3-v0`, in points: {', '.join(deltas)}.", ""]
    return lines


def _duration(seconds: float | None) -> str:
    return "not recorded" if seconds is None else f"{seconds / 60:.1f} min"


def render_results_markdown(record: dict[str, Any]) -> str:
    """``results.md``: the table (mean ± std over seeds at a few epochs and at the end) beside the paper's figures,
    then the command, the recipe, the time taken, the library versions and the best run of each arm."""
    arms = record["arms"]
    num_seeds = max(len(arm["final_top1"]) for arm in arms.values())
    data = f"`{record['dataset']}`" + (f" (`{record['dataset_config']}`)" if record["dataset_config"] else "")
    flags = [flag for name, value in record["recipe"].items() for flag in _flag_values(name, value)]
    dataset_id = f" --dataset-id {record['dataset_hub_id']}" if record["dataset_hub_id"] else ""
    study = " (ablation of the impulse settings)" if record.get("study") == "ablation" else ""
    out = [
        f"# Small-data benchmark: `{record['profile']}` profile{study}",
        "",
        f"Top-1 accuracy (%) on {data}, mean ± standard deviation over {num_seeds} seed(s). Validation: images held "
        f"out of the training split, scored after every epoch; final: the `{record['split']}` split "
        f"({record['num_eval_images']} images) after the last epoch. The paper's figures (ViT-Tiny, 200 epochs on "
        "the full dataset) are for reference: this run is much shorter and smaller.",
        "",
        *_table(record),
        "",
        *(_target_lines(arms) if record.get("study", "main") == "main" else _ablation_lines(record)),
        "![validation top-1 per epoch, one line per arm](curves.png)",
        "",
        "## Command",
        "",
        "```",
        record["command"] or "(not recorded)",
        "```",
        "",
        "Rerun the same command to resume an interrupted benchmark: finished runs are kept.",
        "",
        "## Recipe",
        "",
        record["profile_notes"],
        "",
        "Every run is `python scripts/train.py --model <arm model> --model-kwargs <arm kwargs> "
        f"--dataset {record['dataset']} {' '.join(flags)} --seed <seed> --output-dir <run>`, with:",
        "",
        *(f"- `{name}`: `{arm['model']}` `{json.dumps(arm['model_kwargs'])}`" for name, arm in arms.items()),
        "",
        "<details><summary>every <code>scripts/train.py</code> option of the runs</summary>",
        "",
        "```json",
        json.dumps(record["train_options"], indent=1, sort_keys=True),
        "```",
        "",
        "</details>",
        "",
        "## Time and versions",
        "",
        f"- wall clock: {_duration(record['wall_clock_s'])} ({record['jobs']} run(s) at a time); sum over runs "
        f"(each including start-up and evaluation): {_duration(record['run_time_s'])}",
        "- " + ", ".join(f"{name} {version}" for name, version in record["versions"].items()),
        "",
        "## Best run of each arm (highest last-epoch validation top-1)",
        "",
        *(f"- `{name}`: `{arm['best_run']}`" for name, arm in arms.items()),
        "",
        "Publish one (drop `--dry-run` to upload):",
        "",
        "```",
        f"python scripts/push_to_hub.py --run-dir <best run> --repo-id <namespace/name>{dataset_id} --dry-run",
        "```",
        "",
    ]
    return "\n".join(out)


def plot_curves(record: dict[str, Any], path: Path) -> Path:
    """``curves.png``: validation top-1 per epoch, one line per arm (mean over seeds, band = min to max)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, arm in record["arms"].items():
        length = min(len(curve) for curve in arm["val_top1"])
        epochs = list(range(1, length + 1))
        per_epoch = [[curve[e] for curve in arm["val_top1"]] for e in range(length)]
        (line,) = ax.plot(
            epochs,
            [statistics.fmean(v) for v in per_epoch],
            marker="o",
            ms=3,
            label=f"{name}: {statistics.fmean(arm['final_top1']):.1f}%",
        )
        ax.fill_between(
            epochs, [min(v) for v in per_epoch], [max(v) for v in per_epoch], color=line.get_color(), alpha=0.15
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation top-1 (%)")
    ax.set_title(f"{record['profile']} profile, {Path(record['dataset']).name}: mean over seeds (band: min-max)")
    ax.grid(alpha=0.3)
    ax.legend(title=f"arm: final {record['split']} top-1", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


def write_outputs(record: dict[str, Any], out_dir: Path) -> None:
    """Write ``results.json``, ``results.md`` and ``curves.png`` into ``out_dir``, each atomically."""
    out_dir = Path(out_dir)
    write_json(out_dir / "results.json", record)
    plot_curves(record, out_dir / "curves.png")
    write_text(out_dir / "results.md", render_results_markdown(record))


def release_repo_id(record: dict[str, Any], arm: str, namespace: str) -> str:
    """The Hub repo an arm's best run is published as: its size, init and data in the name, e.g.
    ``structinit-hf/vit_tiny_p4d6_impulse3.cifar10-small`` (never the tag of the paper-size CIFAR-10 model)."""
    architecture = record["architecture"]
    size = f"p{architecture.get('patch_size', 2)}d{architecture.get('depth', 12)}"
    return f"{namespace}/vit_tiny_{size}_{arm}.{Path(record['dataset']).name}"


def write_release_cards(record: dict[str, Any], cards_dir: Path, stage_dir: Path, namespace: str) -> dict[str, Path]:
    """Stage every arm's best run for the Hub and keep its rendered card.

    ``stage_dir/<repo name>/`` is the exact folder ``scripts/push_to_hub.py`` uploads (weights included, so keep it
    out of git); ``cards_dir/<repo name>/`` holds its ``README.md`` and the picture the card shows, for git. Both
    are replaced whole, so a rerun never leaves a mix of old and new files. Returns the card paths by arm.
    """
    cards = {}
    for name, arm in record["arms"].items():
        repo_id = release_repo_id(record, name, namespace)
        repo_name = repo_id.split("/")[1]
        folder = replace_folder(
            Path(stage_dir) / repo_name,
            lambda tmp, run=arm["best_run"], repo=repo_id: stage_repo_folder(
                run, repo, tmp, dataset_id=record["dataset_hub_id"]
            ),
        )

        def copy_card(tmp: Path, folder: Path = folder) -> None:
            for file in (CARD_FILE, ATTENTION_IMAGE):
                if (folder / file).is_file():
                    shutil.copy2(folder / file, tmp / file)

        cards[name] = replace_folder(Path(cards_dir) / repo_name, copy_card) / CARD_FILE
    return cards


def benchmark_parser() -> argparse.ArgumentParser:
    """The flags of ``scripts/benchmark_small_data.py``."""
    parser = argparse.ArgumentParser(
        description="Train every attention init (and ConViT) with one recipe on small data; write the "
        "paper-style table, curves and raw results. Rerun the same command to resume.",
    )
    parser.add_argument("--profile", choices=tuple(PROFILES), default="cpu", help="cpu (default) or paper")
    parser.add_argument(
        "--dataset",
        default=None,
        help="a dataset key of the profile (cpu: cifar10-small; paper: cifar10, cifar100, svhn); "
        "default: the profile's first",
    )
    parser.add_argument(
        "--data-path",
        default=None,
        help="where the chosen dataset lives (a local folder or Hub id), if not the profile's",
    )
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
        help="default: every arm of the study",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default: the profile's")
    parser.add_argument("--jobs", type=int, default=None, help="runs at a time (default: the profile's)")
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
        help="where results.md/json and curves.png go (default: benchmarks/small_data for the "
        "cpu profile, benchmarks/small_data/<profile>-<dataset> otherwise)",
    )
    return parser


def main(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Run the benchmark the parsed ``args`` describe."""
    profile = PROFILES[args.profile]
    dataset = args.dataset if args.dataset is not None else next(iter(profile.datasets))
    if dataset not in profile.datasets:
        raise ValueError(f"--dataset {dataset!r} is not in profile {profile.name!r}: {', '.join(profile.datasets)}")
    if args.data_path is not None:
        profile = replace(
            profile, datasets={**profile.datasets, dataset: replace(profile.datasets[dataset], dataset=args.data_path)}
        )
    default_out = Path("benchmarks/small_data")
    if profile.name != "cpu":
        default_out = default_out / f"{profile.name}-{dataset}"
    if args.study == "ablation":
        default_out = default_out / "ablation"
    runs_dir = args.runs_dir or Path("runs") / f"small_data-{profile.name}-{dataset}"
    record = run_benchmark(
        profile,
        dataset=dataset,
        arms=args.arms if args.arms is not None else study_arm_names(args.study),
        seeds=args.seeds,
        runs_dir=runs_dir,
        out_dir=args.out_dir or default_out,
        jobs=args.jobs,
        command=command,
        study=args.study,
    )
    if args.release_cards is not None:
        cards = write_release_cards(record, args.release_cards, runs_dir / "release", args.release_namespace)
        print(f"staged {len(cards)} repo folder(s) in {runs_dir / 'release'}; cards in {args.release_cards}")
    return record
