"""``structinit-hf compare``: which attention init trains best on this data, in one command.

Trains timm's default, mimetic and impulse init (or any list of the benchmark's arms) one after the other on the same
images, in the same order and with the same augmentation (``train.py`` derives all three from ``--seed``), and prints
test top-1 per init with its paired difference to timm's default and, given several seeds, the verdict of the
tie rule (:func:`~structinit_hf.benchmark.stats.paired_comparison`). The defaults are the CPU proxy at 2,500
images (profile ``cpu-proxy-n2500``: 16 px, patch 2, width 48, depth 12, 10 epochs) on the embedded CIFAR-10 sample,
scored on its test split after every epoch.
The output folder gets one run folder per (arm, seed), ``results.json``, ``results.md``, ``curves.png`` (validation
top-1 per epoch per init) and ``compare.md`` (the printed table).

:func:`compare` is the call (:class:`~.compare_settings.CompareSettings` in, :class:`~.compare_settings.CompareResult`
out); the command only reads argv into the settings (:func:`compare_command`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import datasets
import torch
from tqdm.auto import tqdm

from ..atomic import write_json, write_text
from ..train import TrainingSettings, TrainingStopped, UsageError, run
from ..train._internal import (
    LOCK_FILE,
    SAMPLE_DATASETS,
    VALIDATION_SPLITS,
    DefaultsHelpFormatter,
    KeyValueAction,
    acquire_run_lock,
    check_model_kwargs,
    check_run_args,
    dataset_files_digest,
    dataset_source,
    find_columns,
    load_raw_dataset,
    stratified_split,
)
from .arms import ALL_ARMS, FAMILY_ARMS, arm_label, select_arms
from .compare_settings import FAMILIES, PRECISIONS, PROFILE, RECIPE_FLAGS, THREADS, CompareResult, CompareSettings
from .model_arms import DEFAULT_MODEL_ARMS, change_notes, merged_notes, model_inits, model_profile
from .profiles import WIDE_HEAD_DIM, BenchmarkDataset, Profile, proxy_lr
from .runs import RUN_LOG, RUN_RESULTS, changed_flags, run_settings
from .stats import mean_std_text
from .summary import aggregate_runs, numerics_line, untrained_warning, versus_cells, write_outputs

__all__ = ["compare", "compare_command", "compare_parser", "render_table"]


def compare_parser() -> argparse.ArgumentParser:
    """The flags of ``structinit-hf compare``."""
    recipe = PROFILE.recipe
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="structinit-hf compare",
        description="Train timm's default, mimetic and impulse init side by side on the same images, order and seed; "
        "print test top-1 per init, the paired difference to timm's default and (2+ seeds) the tie-rule verdict.",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument(
        "--dataset",
        type=dataset_source,
        default="cifar10-sample",
        help="anything train accepts: an image folder (one sub-folder per class), a datasets folder, a Hub id, or "
        "cifar10-sample (the CIFAR-10 sample shipped with the package)",
    )
    parser.add_argument(
        "--family",
        choices=tuple(FAMILIES),
        default="vit",
        help="the architecture you train: vit (ViT-proxy: width 48, depth 12, 3 heads), swin (a two-stage Swin, window "
        "4: timm's default, mimetic, impulse in the relative position bias) or mixer (an MLP-Mixer: timm's default, "
        "token MLPs starting as shifts); each at 16 px, patch 2, about the same seconds per step",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="instead of --family: any timm model name, built with --model-kwargs alone; its arms are timm's default "
        f"and each init it takes ({' '.join(FAMILY_ARMS['model'])}; default: {' '.join(DEFAULT_MODEL_ARMS)}); an "
        "init the model refuses is left out, with why, in the table's notes; arms that start the model from the same "
        "weights (model-impulse3 and model-impulse3-attnls1 on DeiT-III, whose impulse opens the scale by default) "
        "train once",
    )
    parser.add_argument(
        "--arms",
        nargs="+",
        default=None,
        help=f"the inits compared: any of the family's arms: {_family_arm_lists(lambda family: FAMILY_ARMS[family])} "
        "(vit also takes the benchmark's ablation and diagnosis arms); default: the family's "
        f"({_family_arm_lists(lambda family: FAMILIES[family][1])})",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="several seeds give a verdict")
    parser.add_argument("--epochs", type=int, default=recipe["epochs"], help="passes over the training data per run")
    parser.add_argument(
        "--max-train-samples", type=int, default=recipe["max_train_samples"], help="train on N images drawn at random"
    )
    parser.add_argument("--batch-size", type=int, default=recipe["batch_size"], help="images per optimizer step")
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="peak learning rate (default: the proxy's for the head dimension, embed_dim / num_heads: "
        f"1e-3 below {WIDE_HEAD_DIM}, 3e-4 from {WIDE_HEAD_DIM}, where at 1e-3 mimetic and shift barely train in 10 "
        "epochs; docs/method.md)",
    )
    parser.add_argument("--aa", default=recipe["aa"], help="timm auto-augment policy, e.g. rand-m9-mstd0.5")
    parser.add_argument("--mixup", type=float, default=0.0, help="mixup alpha (0 disables)")
    parser.add_argument("--cutmix", type=float, default=0.0, help="cutmix alpha (0 disables)")
    parser.add_argument(
        "--model-kwargs",
        nargs="*",
        default={},
        action=KeyValueAction,
        help=f"architecture of every arm, over the proxy's {dict(PROFILE.architecture)}, e.g. img_size=32 (with "
        "--model: over timm's own for that name, nothing of the proxy's)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=THREADS,
        help="torch threads of every run: the thread count orders float sums, so the table reproduces only with the "
        "same count (and CPU kind); more threads than cores is slower, not wrong",
    )
    parser.add_argument(
        "--mixed-precision",
        choices=PRECISIONS,
        default="auto",
        help="autocast of every run: auto is bf16 where the device computes it natively (a CUDA GPU that supports it; "
        "a CPU with AVX512-BF16 or AMX, where it trains through timm's unfused attention, 2.5x fp32's step), fp32 "
        "elsewhere; the table says which it ran",
    )
    parser.add_argument(
        "--skip-bad-images", action="store_true", help="drop unreadable images (counted in each run's log)"
    )
    parser.add_argument("--output-dir", type=Path, default=None, help="default: runs/compare-<dataset>-<time>")
    return parser


def _family_arm_lists(arms_of) -> str:
    return "; ".join(f"{family}: {' '.join(arms_of(family))}" for family in FAMILIES)


_LR_WHY = "compare trains with AdamW, where 1 or more diverges; train takes any lr > 0, for --opt sgd or lars"


def _check(settings: CompareSettings) -> CompareSettings:
    """Refuse, in one line naming the flag, its value and what is allowed, a value ``compare`` cannot use; return the
    settings with the arms filled in (the family's, or those of ``--model``)."""
    if settings.model is not None and settings.family != "vit":
        raise UsageError(f"--family {settings.family} --model {settings.model}: pass one; --model takes any timm model")
    if settings.family not in FAMILIES:  # the command line's choices refuse it first
        raise UsageError(f"--family {settings.family} (family={settings.family!r}): allowed: {', '.join(FAMILIES)}")
    family = "model" if settings.model is not None else settings.family  # any timm model: its own arms
    arms = settings.arms or (DEFAULT_MODEL_ARMS if settings.model is not None else FAMILIES[family][1])
    own = ", ".join(name for name, arm in ALL_ARMS.items() if arm.family == family)
    chosen = f"--model {settings.model}" if settings.model is not None else f"--family {family}"
    unknown = [arm for arm in arms if arm not in ALL_ARMS]
    if unknown:
        raise UsageError(f"--arms {' '.join(unknown)}: unknown arm; allowed ({chosen}): {own}")
    foreign = [arm for arm in arms if ALL_ARMS[arm].family != family]
    if foreign:
        raise UsageError(f"--arms {' '.join(foreign)}: not {family} arms ({chosen}); allowed: {own}")
    if not settings.seeds:
        raise UsageError("--seeds (seeds=()): no seed; allowed: one or more integers >= 0")
    for flag, values, what in (("arms", arms, "arm"), ("seeds", settings.seeds, "seed")):
        repeated = list(dict.fromkeys(value for value in values if values.count(value) > 1))
        if repeated:
            raise UsageError(
                f"--{flag} {' '.join(map(str, values))}: {what} {', '.join(map(str, repeated))} given more than once; "
                f"name each {what} once"
            )
    bad = [seed for seed in settings.seeds if seed < 0]
    if bad:
        raise UsageError(f"--seeds {bad[0]}: out of range; allowed: integers >= 0")
    if settings.threads < 1:
        raise UsageError(f"--threads {settings.threads}: out of range; allowed: an integer >= 1")
    if settings.mixed_precision not in PRECISIONS:
        raise UsageError(f"--mixed-precision {settings.mixed_precision}: not one of {', '.join(PRECISIONS)}")
    if settings.lr is not None and not 0 < settings.lr < 1:
        raise UsageError(f"--lr {settings.lr:g}: out of range; allowed: a number between 0 and 1 ({_LR_WHY})")
    recipe = {flag: getattr(settings, flag) for flag in RECIPE_FLAGS if getattr(settings, flag) is not None}
    check_run_args(TrainingSettings().with_flags(**recipe), num_processes=1)  # as each run would, before any output
    for model in dict.fromkeys([settings.model] if settings.model is not None else [ALL_ARMS[a].model for a in arms]):
        check_model_kwargs(settings.model_kwargs, model)  # as train checks them; the build names what else is wrong
    if settings.output_dir is not None and settings.output_dir.is_dir():
        foreign = sorted(path.name for path in settings.output_dir.iterdir() if not _comparison_entry(path))
        if foreign:
            raise UsageError(
                f"--output-dir {settings.output_dir}: holds {', '.join(foreign[:3])}, not a comparison's files; pass "
                "an empty or new folder, or a comparison's folder to resume it"
            )
    return replace(settings, arms=tuple(arms))


# what a comparison's folder holds: its outputs, its lock, and one run folder per (arm, seed)
COMPARISON_FILES = ("results.json", "results.md", "curves.png", "compare.md", LOCK_FILE)


def _comparison_entry(path: Path) -> bool:
    if path.is_dir():
        arm, _, seed = path.name.rpartition("-seed")
        return arm in ALL_ARMS and seed.isdigit()
    return path.name in COMPARISON_FILES or path.name.startswith(".")  # atomic writes' temporaries


def _profile(settings: CompareSettings) -> Profile:
    """The proxy profile with this comparison's data, architecture and recipe (the learning rate :func:`_lr`'s). A
    dataset with its own test (or validation) split is scored on it after every epoch, the paper's setting, so the
    curves are measured on all its images; one with a training split only (an image folder) holds out 10% of it."""
    base = model_profile(settings.model) if settings.model is not None else FAMILIES[settings.family][0]
    local = Path(settings.dataset).expanduser().exists()
    recipe = {**base.recipe, **{flag: getattr(settings, flag) for flag in RECIPE_FLAGS}, "lr": settings.resolved_lr()}
    recipe["mixed_precision"] = settings.resolved_precision()
    with _quiet_datasets():  # its "Generating train split: N examples" counts rows, not what trains: _data_line does
        splits = load_raw_dataset(settings.dataset)
    recipe["val_split"] = 0.0 if any(name in splits for name in ("test", *VALIDATION_SPLITS)) else 0.1
    print(_data_line(_dataset_name(settings.dataset), splits, recipe))
    return replace(
        base,
        name="compare",
        datasets={"data": BenchmarkDataset(settings.dataset, local=local)},
        architecture={**base.architecture, **settings.model_kwargs},
        recipe=recipe,
    )


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``threads`` (as it was, after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """datasets' progress bars off (as they were, after)."""
    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def _data_line(name: str, splits: datasets.DatasetDict, recipe: dict[str, Any]) -> str:
    """What the comparison reads of the data, in the words of its table: ``cifar10-sample: 2,560 training rows,
    2,500 used (--max-train-samples), 1,000 test rows scored``."""
    rows, limit = len(splits["train"]) if "train" in splits else 0, recipe["max_train_samples"]
    scored = next((split for split in ("test", *VALIDATION_SPLITS) if split in splits), None)
    words = [f"{rows:,} training rows"]
    if scored is None and rows:  # stratified: at least one image of every class of 2 or more, so often more
        label = find_columns(splits["train"].features)[1]
        held_out = len(stratified_split(splits["train"][label], recipe["val_split"], 0)[1])
        words.append(f"{held_out:,} of them ({held_out / rows:.0%}) held out and scored")
    words.append("all the rest used" if scored is None else "all used")
    if limit is not None and limit < (rows if scored else rows * (1 - recipe["val_split"])):
        words[-1] = f"{limit:,} used (--max-train-samples)"
    if scored is not None:
        words.append(f"{len(splits[scored]):,} {scored} rows scored")
    return f"{name}: {', '.join(words)}"


def _dataset_name(dataset: str) -> str:
    named = {str(path): name for name, path in SAMPLE_DATASETS.items()}
    return named.get(dataset, Path(dataset).name or dataset)


def render_table(record: dict[str, Any]) -> str:
    """The table ``compare`` prints: top-1 per init on the scored split, paired difference to the default, verdict;
    below it, the inits the model refused (``compare --model``), each with why."""
    seeds, epochs = record["seeds"], record["epochs"]
    model = f" on {record['model']}" if record.get("model") else ""
    lines = [
        f"which init for {record['dataset_name']}{model}: {record['train_images']:,} training images, {epochs} "
        f"epoch{'s' * (epochs > 1)}, seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}; top-1 on the "
        f"{record['num_eval_images']:,} images of {record['split']}",
    ]
    if record.get("numerics"):  # what the numbers depend on besides the data, the flags and the seeds
        precision = {"no": "fp32"}.get(
            record["recipe"]["mixed_precision"], f"{record['recipe']['mixed_precision']} autocast"
        )
        conditions = f"torch {record['versions']['torch']}, {precision}, {numerics_line(record['numerics'])}"
        lines.append(f"({conditions}: other versions, precisions, threads or CPU kernels give other numbers)")
    lines += ["", "| init | top-1 | per seed | minus timm's default (paired) | verdict |", "|---|---|---|---|---|"]
    for arm, scores in record["top1"].items():
        values = list(scores.values())
        per_seed = ", ".join(f"{value:.2f}" for value in values)
        difference, verdict = versus_cells(record["vs_default"].get(arm))
        lines.append(f"| {arm_label(arm)} | {mean_std_text(values)} | {per_seed} | {difference} | {verdict} |")
    refused = record.get("refused") or {}
    notes = change_notes(record.get("init_changes") or {})
    notes += merged_notes(record.get("merged") or {}, record.get("model"))
    notes += [f"{arm_label(arm)}: not compared, the model refuses it: {why}" for arm, why in refused.items()]
    notes += [record["family_note"]] if record.get("family_note") else []
    return "\n".join([*lines, *([""] + notes if notes else [])]) + "\n"


def compare_command(args: argparse.Namespace) -> CompareResult:
    """``structinit-hf compare`` (``scripts/compare.py``): :func:`compare` on the parsed command line."""
    return compare(CompareSettings(**vars(args)))


def compare(settings: CompareSettings) -> CompareResult:
    """Train every (arm, seed) that ``settings`` name, print and write the comparison; return its table and figures.
    A comparison's folder resumes: a finished run of the same settings on the same files is reused."""
    settings = _check(settings)
    arms, refused, family_note, merged, changes = select_arms(settings.arms), {}, "", {}, {}
    if settings.model is not None:  # the inits this model takes (the others left out, with why), at its heads' rate
        inits = model_inits(settings.model, settings.model_kwargs, arms, settings.seeds[0])
        arms, refused, family_note, merged, changes = inits.arms, inits.refused, inits.note, inits.merged, inits.changes
        settings = replace(settings, lr=settings.lr or proxy_lr(inits.head_dim))
        for line in merged_notes(merged, settings.model):
            print(line)
    settings = replace(settings, lr=settings.resolved_lr())
    profile = _profile(settings)
    name = _dataset_name(settings.dataset)
    out_dir = settings.output_dir or Path("runs") / f"compare-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    spec = profile.datasets["data"]
    runs = [(arm, seed, out_dir / f"{arm.name}-seed{seed}") for seed in settings.seeds for arm in arms]
    planned = {run_dir: run_settings(profile, arm, seed, spec, run_dir) for arm, seed, run_dir in runs}
    finished = [run_dir for _, _, run_dir in runs if (run_dir / RUN_RESULTS).is_file()]
    digest = dataset_files_digest(settings.dataset) if finished else None
    for run_dir in finished:  # a finished run is reused only if it is the run this command trains, on these files
        changed = changed_flags(run_dir, planned[run_dir])
        if changed:
            raise UsageError(
                f"--output-dir {out_dir}: its finished run {run_dir.name} was trained with {changed}; rerun with its "
                "settings to resume the comparison, or pass another --output-dir"
            )
        recorded = json.loads((run_dir / RUN_RESULTS).read_text()).get("dataset_digest")
        if recorded is not None and recorded != digest:
            raise UsageError(
                f"--output-dir {out_dir}: its finished run {run_dir.name} was trained on other files of --dataset "
                f"{settings.dataset} (files added, removed or changed in size since); pass another --output-dir to "
                "compare on the folder as it is now"
            )
    made = [folder for folder in (out_dir, *out_dir.parents) if not folder.exists()]  # innermost first
    lock = acquire_run_lock(out_dir)  # one comparison at a time in a folder; a dead holder's lock is taken over
    print(
        f"{out_dir}: {len(finished)} of {len(runs)} runs already finished; if stopped, rerun "
        f"`{_command(settings, out_dir)}` to resume",
        file=sys.stderr,
    )
    start = time.perf_counter()
    bar = dict(total=len(runs) * settings.epochs, unit="epoch", file=sys.stderr, dynamic_ncols=True)
    try:
        with _torch_threads(settings.threads), tqdm(**bar) as progress:
            progress.update(len(finished) * settings.epochs)
            for arm, seed, run_dir in runs:
                if run_dir in finished:
                    continue
                progress.set_description(f"{arm.name} seed {seed}")
                run_dir.mkdir(parents=True, exist_ok=True)
                with (
                    (run_dir / RUN_LOG).open("a") as log,
                    contextlib.redirect_stdout(log),
                    contextlib.redirect_stderr(log),
                ):  # resume="auto": a run cut short continues from its last checkpoint, bit for bit
                    run(planned[run_dir], on_epoch=lambda record: progress.update(1))
    except BaseException as error:
        _drop_untouched(out_dir)
        if isinstance(error, TrainingStopped):  # a signal: the run saved a checkpoint, which this command resumes
            error.resume = _command(settings, out_dir)
        raise
    finally:
        lock.release()
        for folder in made:  # a run refused before it trained leaves none of the folders this command made
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    record = aggregate_runs(
        {arm.name: [path for a, _, path in runs if a is arm] for arm in arms},
        profile=profile,
        dataset_key="data",
        command=_command(settings, out_dir),
        wall_clock_s=time.perf_counter() - start,
    )
    top1 = {arm.name: dict(zip(settings.seeds, record["arms"][arm.name]["final_top1"], strict=True)) for arm in arms}
    record.update(
        dataset_name=name,
        seeds=list(settings.seeds),
        epochs=settings.epochs,
        train_images=json.loads((runs[0][2] / RUN_RESULTS).read_text())["train_images"],
        top1=top1,
        model=settings.model,
        refused=refused,
        family_note=family_note,
        merged=merged,
        init_changes=changes,
    )
    write_outputs(record, out_dir)
    table = render_table(record)
    write_text(out_dir / "compare.md", table)
    write_json(out_dir / "results.json", record)
    print(table)
    for _, _, run_dir in runs:
        warning = untrained_warning(run_dir)
        if warning:
            print(warning)
    print(f"{out_dir}: results.json, curves.png (top-1 per epoch), compare.md, one run folder per init")
    verdicts = {arm: versus_cells(versus)[1] for arm, versus in record["vs_default"].items()}
    return CompareResult(out_dir, table, top1, record["vs_default"], verdicts, record)


def _drop_untouched(out_dir: Path) -> None:
    """After a run stopped: remove the run folders that hold only their log (a run refused before it trained)."""
    for run_dir in (path for path in out_dir.iterdir() if path.is_dir()):
        if {path.name for path in run_dir.iterdir()} <= {RUN_LOG}:
            shutil.rmtree(run_dir)


def _command(settings: CompareSettings, out_dir: Path) -> str:
    """The ``compare`` command line that reruns this comparison (every flag spelled out, the learning rate and the
    precision as they resolved too)."""
    words = ["structinit-hf", "compare"]
    values = {item.name: getattr(settings, item.name) for item in fields(settings)}
    resolved = {"lr": settings.resolved_lr(), "mixed_precision": settings.resolved_precision(), "output_dir": out_dir}
    for name, value in {**values, **resolved}.items():
        if value is None or (name == "family" and settings.model is not None):  # not given, or --model's own
            continue
        if isinstance(value, bool):  # a switch: spelled when on
            words += [f"--{name.replace('_', '-')}"] if value else []
            continue
        values = (
            value
            if isinstance(value, (list, tuple))
            else [f"{k}={v}" for k, v in value.items()]
            if isinstance(value, dict)
            else [value]
        )
        if values:
            words += [f"--{name.replace('_', '-')}", *map(str, values)]
    return shlex.join(words)
