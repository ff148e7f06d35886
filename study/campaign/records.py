"""The campaign's record (``results.json``) from the committed harness records; trains nothing.

Per setting: each arm's summary over seeds, its paired comparisons against the references under the tie rule, and the
best arm with those tied with it. Settings: the training-set sizes, 10 against 50 epochs, the augmentation regimes
and the widths.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from structinit_hf.benchmark.stats import CLAIM_SEEDS, TIE_RULE, paired_comparison, paired_differences

from .beyond import build_beyond
from .convergence import build_convergence
from .scores import better_rates, load_records, merge_scores, summarize_setting
from .sources import (
    ALIASES,
    AUGMENT_SIZE,
    HEADS,
    LENGTH_SIZE,
    LENGTH_SOURCES,
    MAIN_ARMS,
    RATE_GRIDS,
    RECIPE_KEYS,
    REGIME_REFERENCE,
    REGIMES,
    RERUN_SOURCES,
    SIZE_ARMS,
    SIZE_SOURCES,
    SIZE_TABLE_ARMS,
    WIDTH_ARMS,
    WIDTH_LENGTHS,
    WIDTH_REFERENCES,
    WIDTH_SETTINGS,
)

__all__ = [
    "build_augmentation",
    "build_best_rate",
    "build_campaign",
    "build_width",
    "build_width_length",
]


def build_campaign(root: Path | str = ".") -> dict[str, Any]:
    """The campaign's record from the committed ``results.json`` files under ``root`` (missing ones are "not run")."""
    root = Path(root)
    sizes: dict[str, Any] = {}
    for size, paths in SIZE_SOURCES.items():
        records, found = load_records(root, paths)
        scores = merge_scores(records)
        sizes[str(size)] = {
            "sources": found,
            **summarize_setting(scores, MAIN_ARMS if size == 25_000 else SIZE_TABLE_ARMS),
        }
        convit = _convit_geometry(records)
        if convit is not None:
            sizes[str(size)]["convit_geometry"] = convit
    lengths: dict[str, Any] = {}
    length_scores = {}
    for epochs, paths in LENGTH_SOURCES.items():
        records, found = load_records(root, paths)
        length_scores[epochs] = merge_scores(records)
        lengths[str(epochs)] = {"sources": found}
    long_seeds = sorted({s for arm in length_scores[max(LENGTH_SOURCES)].values() for s in arm})
    for epochs, scores in length_scores.items():  # the comparison is on the seeds the long runs have
        same = {name: {s: v for s, v in per_seed.items() if s in long_seeds} for name, per_seed in scores.items()}
        lengths[str(epochs)].update(summarize_setting(same, SIZE_ARMS))
    short, long = (length_scores[e] for e in sorted(LENGTH_SOURCES))
    lengths["long_minus_short"] = {
        name: paired_differences(long[name], short[name]) for name in SIZE_ARMS if long.get(name) and short.get(name)
    }
    return {
        "description": "issue 20's campaign on the cpu-proxy family (16 px CIFAR-10, patch 2, depth 12, width 48, "
        "3 heads); test top-1 on all 10,000 test images. Compute rule across sizes: the same 10 epochs at every size.",
        "tie_rule": TIE_RULE,
        "aliases": ALIASES,
        "sizes": sizes,
        "length_size": LENGTH_SIZE,
        "lengths": lengths,
        "augmentation": build_augmentation(root),
        "width": (width := build_width(root)),
        "width_best_rate": [build_best_rate(width, grid) for grid in RATE_GRIDS.values()],
        "width_length": [build_width_length(width, pair) for pair in WIDTH_LENGTHS.values()],
        "beyond": build_beyond(root, width),
        "convergence": build_convergence(root),
    }


def _convit_geometry(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """ConViT's model kwargs as its records hold them, with the width they build (timm's embed_dim is per head)."""
    kwargs = [record["arms"]["convit"]["model_kwargs"] for record in records if "convit" in record["arms"]]
    if not kwargs:
        return None
    if any(k != kwargs[0] for k in kwargs):
        raise ValueError(f"ConViT ran with different kwargs at one size: {kwargs}")
    heads = kwargs[0].get("num_heads", 4)
    return {"model_kwargs": kwargs[0], "width": kwargs[0].get("embed_dim", 48) * heads, "heads": heads}


def _recipe(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The train options in :data:`RECIPE_KEYS` the records ran with; one regime's records must agree on them."""
    recipes = [{key: record.get("train_options", {}).get(key) for key in RECIPE_KEYS} for record in records]
    if any(r != recipes[0] for r in recipes):
        raise ValueError(f"one regime's records ran with different augmentation: {recipes}")
    return recipes[0] if recipes else {}


def _versions(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], str]:
    """(arm, seed) -> the torch and structinit_hf versions its record ran with."""
    out = {}
    for record in records:
        versions = record.get("versions", {})
        text = f"torch {versions.get('torch', '?')}, structinit_hf {versions.get('structinit_hf', '?')}"
        for name, arm in record["arms"].items():
            for seed in arm["seeds"]:
                out[(ALIASES.get(name, name), int(seed))] = text
    return out


def build_augmentation(root: Path | str = ".") -> dict[str, Any]:
    """The inits at :data:`AUGMENT_SIZE` images under each of :data:`REGIMES`: per regime the usual setting (paired
    against timm's default and mimetic), the recorded augmentation, the seed spread, and each init's paired difference
    against the same init under :data:`REGIME_REFERENCE`."""
    root = Path(root)
    regimes: dict[str, Any] = {}
    scores: dict[str, dict[str, dict[int, float]]] = {}
    for key, (label, paths) in REGIMES.items():
        records, found = load_records(root, paths)
        if key == REGIME_REFERENCE:
            reference_versions = _versions(records)
        scores[key] = {name: s for name, s in merge_scores(records).items() if name in SIZE_ARMS}
        setting = summarize_setting(scores[key], SIZE_ARMS)
        ranges = {name: arm["range"] for name, arm in setting["arms"].items() if arm["n"] > 1}
        seeds = sorted({seed for per_seed in scores[key].values() for seed in per_seed})
        regimes[key] = {
            "label": label,
            "sources": found,
            "recipe": _recipe(records),
            "versions": sorted({v for (name, _), v in _versions(records).items() if name in SIZE_ARMS}),
            "seeds": seeds,
            "below_claim": any(arm["n"] < CLAIM_SEEDS for arm in setting["arms"].values()) or not setting["arms"],
            "seed_spread": {"per_arm": ranges, "largest": max(ranges.values()) if ranges else None},
            **setting,
        }
    reference = scores[REGIME_REFERENCE]
    minus_reference = {
        key: {
            name: paired_comparison(scores[key][name], reference[name])
            for name in SIZE_ARMS
            if name in scores[key] and name in reference
        }
        for key in REGIMES
        if key != REGIME_REFERENCE
    }
    records, found = load_records(root, RERUN_SOURCES)
    rerun_versions = _versions(records)
    rerun = {
        name: {
            seed: {
                "committed": reference[name][seed],
                "rerun": top1,
                "difference": round(top1 - reference[name][seed], 4),
                "committed_with": reference_versions.get((name, seed)),
                "rerun_with": rerun_versions.get((name, seed)),
            }
            for seed, top1 in per_seed.items()
            if seed in reference.get(name, {})
        }
        for name, per_seed in merge_scores(records).items()
    }
    return {
        "size": AUGMENT_SIZE,
        "reference": REGIME_REFERENCE,
        "regimes": regimes,
        "minus_reference": minus_reference,
        "rerun": {"sources": found, "arms": rerun},
    }


def _device(record: Mapping[str, Any]) -> str:
    """Where a record's runs trained: the GPU's name, or ``CPU``."""
    return (record.get("numerics") or {}).get("gpu") or "CPU"


def build_width(root: Path | str = ".") -> dict[str, Any]:
    """Per width setting (:data:`WIDTH_SETTINGS`): its summaries and verdicts, its sources, where each seed ran and
    the wall time per run. A record trained in another setting than the one it is listed under is refused."""
    root = Path(root)
    out: dict[str, Any] = {}
    for key, setting in WIDTH_SETTINGS.items():
        records, found = load_records(root, setting.sources)
        for record, path in zip(records, found, strict=True):
            options = record["train_options"]
            recorded = (
                record["architecture"].get("embed_dim"),
                options["lr"],
                options.get("warmup_epochs", 1.0),
                options["epochs"],
            )
            listed = (setting.width, setting.lr, setting.warmup_epochs, setting.epochs)
            if recorded != listed:
                raise ValueError(
                    f"{path}: width {recorded[0]} at lr {recorded[1]:g} with {recorded[2]:g} warm-up epoch(s) of "
                    f"{recorded[3]}, listed as {listed[0]} at {listed[1]:g} with {listed[2]:g} of {listed[3]}"
                )
        wall: dict[str, dict[int, float]] = {}
        devices: dict[str, set[int]] = {}
        for record in records:
            for name, arm in record["arms"].items():
                for seed, seconds in zip(arm["seeds"], arm["wall_time_s"], strict=True):
                    wall.setdefault(name, {})[seed] = seconds
                devices.setdefault(_device(record), set()).update(arm["seeds"])
        out[key] = {
            "images": setting.images,
            "width": setting.width,
            "lr": setting.lr,
            "warmup_epochs": setting.warmup_epochs,
            "epochs": setting.epochs,
            "head_dim": setting.width // HEADS,
            "note": setting.note,
            "sources": found,
            "devices": {device: sorted(seeds) for device, seeds in sorted(devices.items())},
            "wall_time_s": {name: statistics.fmean(per_seed.values()) for name, per_seed in wall.items()},
            **summarize_setting(merge_scores(records), WIDTH_ARMS, WIDTH_REFERENCES),
        }
    return out


def build_best_rate(width: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """Each init at its better learning rate of the width settings ``keys`` (one of :data:`RATE_GRIDS`: settings apart
    in the rate alone; the higher mean over seeds wins), judged as a setting: against timm's default and `shift`, each
    at its own better rate, paired on the seed."""
    grid = {key: width[key] for key in keys}
    if len({_without(setting, "lr") for setting in grid.values()}) > 1:
        raise ValueError(f"learning-rate grid {list(keys)}: its settings differ in more than the rate")
    scores, rates = better_rates(list(grid.values()), WIDTH_ARMS)
    return {
        "settings": list(grid),
        **{key: next(iter(grid.values()))[key] for key in ("images", "width", "head_dim")},
        "grid": [setting["lr"] for setting in grid.values()],
        "rates": rates,
        **summarize_setting(scores, WIDTH_ARMS, WIDTH_REFERENCES),
    }


def _without(setting: Mapping[str, Any], varied: str) -> tuple[Any, ...]:
    """What a width setting trained in (images, width, rate, warm-up, epochs), less the one ``varied``."""
    return tuple(setting[key] for key in ("images", "width", "lr", "warmup_epochs", "epochs") if key != varied)


def build_width_length(width: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """Each init's gain from training longer: the width settings ``keys`` (one of :data:`WIDTH_LENGTHS`, the same
    setting at a shorter and a longer epoch count), the longer minus the shorter, paired on the seed."""
    short, long = (width[key] for key in keys)
    if _without(short, "epochs") != _without(long, "epochs") or short["epochs"] >= long["epochs"]:
        raise ValueError(
            f"length pair {list(keys)}: expected one setting at fewer, then more epochs, nothing else apart"
        )
    gains = {
        name: paired_differences(long["arms"][name]["per_seed"], short["arms"][name]["per_seed"])
        for name in WIDTH_ARMS
        if name in long["arms"] and name in short["arms"]
    }
    return {
        "settings": list(keys),
        **{key: short[key] for key in ("images", "width", "head_dim", "lr")},
        "epochs": [short["epochs"], long["epochs"]],
        "devices": [short["devices"], long["devices"]],
        "long_minus_short": {name: gain for name, gain in gains.items() if gain is not None},
    }
