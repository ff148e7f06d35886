"""The small-data campaign: which init, and when, from the committed benchmark records.

Reads the ``results.json`` files the harness wrote for the ``cpu-proxy`` family of profiles (no training here) and
writes one summary: test top-1 per init at every training-set size (with ConViT beside the inits), the gain over timm's
default against size, the main table at 25,000 images, 10 against 50 epochs at 2,500 images, and at 5,000 images the
inits under each augmentation regime (crop + flip, RandAugment, Mixup + CutMix) with the gain over timm's default per
regime. Comparisons are paired: an init against a
reference on the same seed (the same split, data order and augmentation). The tie rule is :func:`decide`.

    python scripts/campaign_report.py      # writes benchmarks/small_data/campaign/{results.md,results.json,size.png,
                                           #   augmentation.png}
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..atomic import write_json, write_text
from .arms import arm_label
from .plots import save_figure
from .stats import CLAIM_SEEDS, TIE_RULE, paired_comparison, paired_differences, spread

__all__ = [
    "ALIASES",
    "AUGMENT_SIZE",
    "BENCH",
    "LENGTH_SIZE",
    "LENGTH_SOURCES",
    "MAIN_ARMS",
    "RECIPE_KEYS",
    "REFERENCES",
    "REGIMES",
    "REGIME_REFERENCE",
    "RERUN_SOURCES",
    "SIZE_ARMS",
    "SIZE_SOURCES",
    "SIZE_TABLE_ARMS",
    "build_augmentation",
    "build_campaign",
    "campaign_parser",
    "merge_scores",
    "plot_augmentation",
    "plot_sizes",
    "render_campaign_markdown",
    "report_campaign",
    "write_campaign",
]

BENCH = "benchmarks/small_data"


# Training-set size -> the records holding cpu-proxy-family runs at that size (10 epochs each), as glob patterns under
# the repository root. 25,000 is cpu-proxy: seeds 0 and 1 from its own records, later seeds and arms
# from the campaign's, one folder per batch of runs (seed2-<arm>/, seed<k>/).
SIZE_SOURCES: dict[int, tuple[str, ...]] = {
    2_500: (f"{BENCH}/cpu-proxy-n2500-cifar10/results.json", f"{BENCH}/cpu-proxy-n2500-cifar10/seed*/results.json"),
    5_000: (f"{BENCH}/cpu-proxy-n5000-cifar10/results.json", f"{BENCH}/cpu-proxy-n5000-cifar10/seed*/results.json"),
    25_000: (
        f"{BENCH}/cpu-proxy-cifar10/results.json",
        f"{BENCH}/cpu-proxy-cifar10/one-seed/results.json",
        f"{BENCH}/cpu-proxy-cifar10/seed*/results.json",
    ),
}


LENGTH_SIZE = 2_500


LENGTH_SOURCES: dict[int, tuple[str, ...]] = {  # epochs -> records at LENGTH_SIZE images
    10: (f"{BENCH}/cpu-proxy-n2500-cifar10/results.json",),
    50: (f"{BENCH}/cpu-proxy-n2500-long-cifar10/seed*/results.json",),
}


# Augmentation regimes at AUGMENT_SIZE images (10 epochs, everything else the size table's): key -> (label, records).
# Crop + flip is the size table's own setting at that size, read from the same records.
AUGMENT_SIZE = 5_000


REGIMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "crop-flip": ("crop + flip", SIZE_SOURCES[AUGMENT_SIZE]),
    "randaug": ("RandAugment m9", (f"{BENCH}/cpu-proxy-n5000-randaug-cifar10/seed*/results.json",)),
    "mixcut": ("Mixup 0.8 + CutMix 1.0", (f"{BENCH}/cpu-proxy-n5000-mixcut-cifar10/seed*/results.json",)),
}


REGIME_REFERENCE = "crop-flip"


# The reference regime's runs trained again (same command, another runs folder, for their checkpoints): how far a
# repeat of an identical run lands from the committed one.
RERUN_SOURCES = (f"{BENCH}/cpu-proxy-n5000-rerun-cifar10/seed*/results.json",)


RECIPE_KEYS = ("aa", "mixup", "cutmix", "hflip", "scale")  # the recorded train options that tell the regimes apart


# The shift 3x3 runs made before `shift` became impulse3's default were recorded under this arm name (same settings).
ALIASES = {"impulse3-shift": "impulse3"}


SIZE_ARMS = ("default", "mimetic", "impulse3")


SIZE_TABLE_ARMS = (*SIZE_ARMS, "convit")  # the rows of the 2,500 and 5,000 tables: the inits, then ConViT beside them


MAIN_ARMS = ("default", "mimetic", "impulse3", "impulse5", "v1", "v2", "kaiming", "convit", "impulse5-svd")


REFERENCES = ("default", "mimetic")


REFERENCE_NAMES = {"default": "default", "mimetic": "mimetic", "impulse3": "`shift`"}  # the tables' column heads


def merge_scores(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[int, float]]:
    """Final test top-1 per arm and seed, from harness records (``arms.<arm>.seeds`` / ``final_top1``).

    Arm names go through :data:`ALIASES`. The same (arm, seed) in two records must carry the same figure."""
    scores: dict[str, dict[int, float]] = {}
    for record in records:
        for name, arm in record["arms"].items():
            name = ALIASES.get(name, name)
            for seed, top1 in zip(arm["seeds"], arm["final_top1"], strict=True):
                known = scores.setdefault(name, {}).get(int(seed))
                if known is not None and known != top1:
                    raise ValueError(f"{name} seed {seed} recorded twice with different top-1 ({known}, {top1})")
                scores[name][int(seed)] = float(top1)
    return {name: dict(sorted(per_seed.items())) for name, per_seed in scores.items()}


def _arm_summary(per_seed: Mapping[int, float]) -> dict[str, Any]:
    return {"per_seed": dict(per_seed), **spread(list(per_seed.values()))}


def _setting(
    scores: Mapping[str, Mapping[int, float]], arms: Sequence[str], references: Sequence[str] = REFERENCES
) -> dict[str, Any]:
    """Summaries, paired comparisons against the references and the best-or-tied arms of one setting."""
    present = [name for name in arms if scores.get(name)]
    out: dict[str, Any] = {
        "arms": {name: _arm_summary(scores[name]) for name in present},
        "not_run": [name for name in arms if not scores.get(name)],
        "vs": {
            ref: {name: paired_comparison(scores[name], scores[ref]) for name in present if name != ref}
            for ref in references
            if scores.get(ref)
        },
    }
    multi = [name for name in present if len(scores[name]) > 1]
    if multi:
        best = max(multi, key=lambda name: statistics.fmean(scores[name].values()))
        verdicts = {name: paired_comparison(scores[name], scores[best]) for name in multi if name != best}
        out["best"] = {
            "arm": best,
            "tied": [name for name, c in verdicts.items() if c is not None and c["verdict"] in ("tie", "no verdict")],
            "behind": [name for name, c in verdicts.items() if c is not None and c["verdict"] == "behind"],
            "vs": {name: c for name, c in verdicts.items() if c is not None},
        }
    return out


def _load(root: Path, paths: Iterable[str]) -> tuple[list[dict[str, Any]], list[str]]:
    records, found = [], []
    for pattern in paths:
        for path in sorted(root.glob(pattern)):
            records.append(json.loads(path.read_text()))
            found.append(path.relative_to(root).as_posix())
    return records, found


def build_campaign(root: Path | str = ".") -> dict[str, Any]:
    """The campaign's record from the committed ``results.json`` files under ``root`` (missing ones are "not run")."""
    root = Path(root)
    sizes: dict[str, Any] = {}
    for size, paths in SIZE_SOURCES.items():
        records, found = _load(root, paths)
        scores = merge_scores(records)
        sizes[str(size)] = {"sources": found, **_setting(scores, MAIN_ARMS if size == 25_000 else SIZE_TABLE_ARMS)}
        convit = _convit_geometry(records)
        if convit is not None:
            sizes[str(size)]["convit_geometry"] = convit
    lengths: dict[str, Any] = {}
    length_scores = {}
    for epochs, paths in LENGTH_SOURCES.items():
        records, found = _load(root, paths)
        length_scores[epochs] = merge_scores(records)
        lengths[str(epochs)] = {"sources": found}
    long_seeds = sorted({s for arm in length_scores[max(LENGTH_SOURCES)].values() for s in arm})
    for epochs, scores in length_scores.items():  # the comparison is on the seeds the long runs have
        same = {name: {s: v for s, v in per_seed.items() if s in long_seeds} for name, per_seed in scores.items()}
        lengths[str(epochs)].update(_setting(same, SIZE_ARMS))
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
        "width": build_width(root),
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
        records, found = _load(root, paths)
        if key == REGIME_REFERENCE:
            reference_versions = _versions(records)
        scores[key] = {name: s for name, s in merge_scores(records).items() if name in SIZE_ARMS}
        setting = _setting(scores[key], SIZE_ARMS)
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
    records, found = _load(root, RERUN_SOURCES)
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


def _fmt(summary: Mapping[str, Any] | None, digits: int = 2) -> str:
    if summary is None:
        return "–"
    if summary["n"] == 1:
        return f"{summary['mean']:.{digits}f} (1 seed)"
    return f"{summary['mean']:.{digits}f} ± {summary['std']:.{digits}f}"


def _seeds(per_seed: Mapping[Any, float]) -> str:
    return ", ".join(f"{float(v):.2f}" for v in per_seed.values())


def _signed(per_seed: Mapping[Any, float]) -> str:
    return ", ".join(f"{float(v):+.2f}" for v in per_seed.values())


def _verdict(c: Mapping[str, Any] | None) -> str:
    if c is None:
        return "–"
    if c["n"] == 1:
        return "no verdict (1 seed)"
    text = f"{c['verdict']} (spread {c['tolerance']:.2f})"
    return text + (", 2 seeds" if c["n"] == 2 and c["verdict"] in ("ahead", "behind") else "")


def _setting_table(
    setting: Mapping[str, Any], arms: Sequence[str], references: Sequence[str] = REFERENCES
) -> list[str]:
    versus = "".join(f" vs {REFERENCE_NAMES.get(ref, ref)}: paired diff (per seed) | verdict |" for ref in references)
    lines = [
        "| init | top-1 mean ± std | per seed | range |" + versus,
        "|---|---|---|---|" + "---|---|" * len(references),
    ]
    for name in arms:
        arm = setting["arms"].get(name)
        if arm is None:
            lines.append(f"| {arm_label(name)} | not run (time) | – | – |" + " – | – |" * len(references))
            continue
        cells = []
        for ref in references:
            c = setting["vs"].get(ref, {}).get(name)
            if name == ref or c is None:
                cells += ["–", "–"]
            else:
                diff = (
                    f"{c['mean']:+.2f} ± {c['std']:.2f} ({_signed(c['per_seed'])})"
                    if c["n"] > 1
                    else f"{c['mean']:+.2f}"
                )
                cells += [diff, _verdict(c)]
        seeds = ", ".join(f"s{s}" for s in arm["per_seed"])
        lines.append(
            f"| {arm_label(name)} | {_fmt(arm)} | {_seeds(arm['per_seed'])} ({seeds}) | "
            + (f"{arm['range']:.2f} | " if arm["n"] > 1 else "– | ")
            + " | ".join(cells)
            + " |"
        )
    return lines


def _best_line(setting: Mapping[str, Any]) -> str:
    best = setting.get("best")
    if not setting["arms"]:
        return "Not run."
    if best is None:
        return "Best: no verdict (fewer than two seeds)."
    tied = ", ".join(arm_label(n) for n in best["tied"]) or "none"
    against = "; ".join(
        f"{arm_label(n)} {c['mean']:+.2f} ({_signed(c['per_seed'])}): {_verdict(c)}" for n, c in best["vs"].items()
    )
    return (
        f"Highest mean: {arm_label(best['arm'])}; tied with it within seed spread: {tied}. "
        f"Each init minus it, paired on the seed: {against}."
    )


def render_campaign_markdown(record: Mapping[str, Any]) -> str:
    """``results.md``: the size table, the main table at 25,000, the length comparison, the rule and the sources."""
    out = ["# Which init, and when: the CPU-proxy campaign (issue 20)", "", record["description"], ""]
    out += [f"**Tie rule.** {record['tie_rule']}", ""]
    out += ["## Accuracy and gain against training-set size (10 epochs at every size)", "", "![size](size.png)", ""]
    for size, setting in record["sizes"].items():
        arms = MAIN_ARMS if size == "25000" else SIZE_TABLE_ARMS
        title = f"### {int(size):,} training images"
        if size == "25000":
            title += " (`cpu-proxy`: the main table)"
        out += [title, "", *_setting_table(setting, arms), "", _best_line(setting), ""]
        out += [f"Sources: {', '.join(f'`{p}`' for p in setting['sources']) or 'none (not run)'}", ""]
        if "convit_geometry" in setting:
            out += [_convit_line(setting["convit_geometry"]), ""]
    lengths = record["lengths"]
    out += [f"## 10 against 50 epochs at {record['length_size']:,} images", ""]
    for epochs in (k for k in lengths if k.isdigit()):
        setting = lengths[epochs]
        out += [f"### {epochs} epochs", "", *_setting_table(setting, SIZE_ARMS), "", _best_line(setting), ""]
        out += [f"Sources: {', '.join(f'`{p}`' for p in setting['sources']) or 'none (not run)'}", ""]
    rows = lengths.get("long_minus_short") or {}
    if rows:
        out += ["### 50 epochs minus 10 epochs, same seed", "", "| init | mean gain from 5x the epochs | per seed |"]
        out += ["|---|---|---|"]
        out += [f"| {arm_label(n)} | {r['mean']:+.2f} | {_signed(r['per_seed'])} |" for n, r in rows.items() if r]
        out.append("")
    if "augmentation" in record:
        out += _augmentation_markdown(record["augmentation"])
    if "width" in record:
        out += width_markdown(record["width"])
    out += [
        "Paired differences are init minus reference on the same seed; `±` is the sample standard deviation over "
        "seeds; `range` is max - min over seeds (how far runs of identical settings landed apart). "
        f"Old arm names mapped: {', '.join(f'`{k}` -> `{v}`' for k, v in record['aliases'].items())}.",
        "",
    ]
    return "\n".join(out)


def _convit_line(geometry: Mapping[str, Any]) -> str:
    kwargs = ", ".join(f"{k}={v}" for k, v in geometry["model_kwargs"].items())
    return (
        f"ConViT as run (`convit_tiny_patch2_32`, model kwargs from its records: {kwargs}): timm's ConViT takes "
        f"`embed_dim` per head, so width {geometry['width']} in {geometry['heads']} heads; `local_up_to_layer` is "
        "the number of GPSA blocks, the rest are plain self-attention."
    )


def _few_seeds(n: int) -> str:
    return f"; {n} seed{'s' if n > 1 else ''}: below the {CLAIM_SEEDS}-seed bar" if n < CLAIM_SEEDS else ""


def _summary_cell(arm: Mapping[str, Any] | None) -> str:
    if arm is None:
        return "not run"
    if arm["n"] == 1:
        return f"{arm['mean']:.2f} (1 seed: below the {CLAIM_SEEDS}-seed bar)"
    return f"{_fmt(arm)} ({_seeds(arm['per_seed'])}{_few_seeds(arm['n'])})"


def _difference_cell(c: Mapping[str, Any] | None) -> str:
    if c is None:
        return "–"
    if c["n"] == 1:
        return f"{c['mean']:+.2f} (1 seed): no verdict"
    verdict = f"{c['verdict']} (spread {c['tolerance']:.2f}){_few_seeds(c['n'])}"
    return f"{c['mean']:+.2f} ± {c['std']:.2f} ({_signed(c['per_seed'])}): {verdict}"


def _augmentation_markdown(aug: Mapping[str, Any]) -> list[str]:
    """The augmentation section: one summary table across regimes, the gain over timm's default per regime, each
    regime against the reference one, then every regime's own table with its seed spread, recipe and sources."""
    regimes = aug["regimes"]
    reference = regimes[aug["reference"]]
    head = "| init | " + " | ".join(r["label"] for r in regimes.values()) + " |"
    rule = "|---|" + "---|" * len(regimes)
    out = [f"## Augmentation at {aug['size']:,} training images (10 epochs)", ""]
    out += [
        f"Each regime is the {aug['size']:,}-image setting with one change to the augmentation (the recorded train "
        f"options are under each regime's table); {reference['label']} is the {aug['size']:,}-image table above.",
        "",
        "![augmentation](augmentation.png)",
        "",
        "Mean attention distance per block of these inits at init and after training under each regime (seed 0): "
        "[attention_distance.md](attention_distance.md), written by `scripts/campaign_attention_distance.py`.",
        "",
        "### Test top-1 per regime (mean ± std over seeds, per seed in brackets)",
        "",
        head,
        rule,
    ]
    for name in SIZE_ARMS:
        cells = [_summary_cell(r["arms"].get(name)) for r in regimes.values()]
        out.append(f"| {arm_label(name)} | " + " | ".join(cells) + " |")
    spreads = [r["seed_spread"]["largest"] for r in regimes.values()]
    out.append("| seed spread: largest range of one init | " + " | ".join(_number(v) for v in spreads) + " |")
    seeds = [", ".join(f"s{s}" for s in r["seeds"]) or "–" for r in regimes.values()]
    out.append("| seeds | " + " | ".join(seeds) + " |")
    out.append("| ran with | " + " | ".join("; ".join(r["versions"]) or "–" for r in regimes.values()) + " |")
    out += ["", "### Gain over timm's default, paired on the seed (verdict under the tie rule)", "", head, rule]
    for name in SIZE_ARMS[1:]:
        cells = [_difference_cell(r["vs"].get("default", {}).get(name)) for r in regimes.values()]
        out.append(f"| {arm_label(name)} | " + " | ".join(cells) + " |")
    others = [key for key in regimes if key != aug["reference"]]
    out += ["", f"### Each regime minus {reference['label']}, same init and seed", ""]
    out += ["| init | " + " | ".join(regimes[k]["label"] for k in others) + " |", "|---|" + "---|" * len(others)]
    for name in SIZE_ARMS:
        cells = [_difference_cell(aug["minus_reference"][k].get(name)) for k in others]
        out.append(f"| {arm_label(name)} | " + " | ".join(cells) + " |")
    out.append("")
    rerun = aug.get("rerun", {})
    if rerun.get("arms"):
        out += [f"### {reference['label'].capitalize()} retrained: the same command again, same seed", ""]
        out += [
            "| init | seed | committed top-1 | retrained top-1 | difference | committed with | retrained with |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, per_seed in rerun["arms"].items():
            for seed, r in per_seed.items():
                out.append(
                    f"| {arm_label(name)} | s{seed} | {r['committed']:.2f} | {r['rerun']:.2f} | "
                    f"{r['difference']:+.2f} | {r['committed_with'] or '?'} | {r['rerun_with'] or '?'} |"
                )
        out += ["", f"Sources: {', '.join(f'`{p}`' for p in rerun['sources'])}", ""]
    for key in others:
        regime = regimes[key]
        title = f"### {regime['label']}"
        if regime["below_claim"]:
            title += f" (fewer than {CLAIM_SEEDS} seeds for some init: below the bar for an accuracy claim)"
        out += [title, "", *_setting_table(regime, SIZE_ARMS), "", _best_line(regime), ""]
        per_arm = ", ".join(f"{arm_label(n)} {v:.2f}" for n, v in regime["seed_spread"]["per_arm"].items())
        out += [f"Seed spread (max - min over seeds of identical settings): {per_arm or 'fewer than two seeds'}.", ""]
        recipe = ", ".join(f"`{k}`={v}" for k, v in regime["recipe"].items())
        out += [f"Recorded train options: {recipe or '–'}.", ""]
        out += [f"Sources: {', '.join(f'`{p}`' for p in regime['sources']) or 'none (not run)'}", ""]
    return out


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def plot_sizes(record: Mapping[str, Any], path: Path) -> Path:
    """``size.png``: top-1 against size, and gain over timm's default against size; band = min-max over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (acc, gain) = plt.subplots(1, 2, figsize=(11, 4.3))
    sizes = sorted(record["sizes"], key=int)
    for name in SIZE_ARMS:
        xs, mean, low, high, counts = [], [], [], [], []
        gx, gmean, glow, ghigh, gcounts = [], [], [], [], []
        for size in sizes:
            setting = record["sizes"][size]
            arm = setting["arms"].get(name)
            if arm is not None:
                xs.append(int(size))
                mean.append(arm["mean"])
                low.append(arm["min"])
                high.append(arm["max"])
                counts.append(arm["n"])
            c = setting["vs"].get("default", {}).get(name)
            if name == "default" and "default" in setting["arms"]:
                c = {"mean": 0.0, "min": 0.0, "max": 0.0, "n": setting["arms"]["default"]["n"]}
            if c is not None:
                gx.append(int(size))
                gmean.append(c["mean"])
                glow.append(c["min"])
                ghigh.append(c["max"])
                gcounts.append(c["n"])
        if xs:
            (line,) = acc.plot(xs, mean, marker="o", label=arm_label(name))
            acc.fill_between(xs, low, high, color=line.get_color(), alpha=0.18)
            few = [(x, y) for x, y, n in zip(xs, mean, counts, strict=True) if n < 3]
            if few:  # fewer than 3 seeds: hollow marker
                acc.plot(*zip(*few, strict=True), ls="none", marker="o", mfc="white", color=line.get_color())
            if gx:
                gain.plot(gx, gmean, marker="o", color=line.get_color(), label=arm_label(name))
                gain.fill_between(gx, glow, ghigh, color=line.get_color(), alpha=0.18)
                few = [(x, y) for x, y, n in zip(gx, gmean, gcounts, strict=True) if n < 3]
                if few:
                    gain.plot(*zip(*few, strict=True), ls="none", marker="o", mfc="white", color=line.get_color())
    for ax, ylabel in ((acc, "test top-1 (%)"), (gain, "paired gain over timm's default (points)")):
        ax.set_xscale("log")
        ax.set_xticks([int(s) for s in sizes], [f"{int(s):,}" for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("training images (10 epochs each)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    acc.set_title("cpu-proxy: mean over seeds, band min-max (hollow: < 3 seeds)", fontsize=10)
    gain.set_title("same-seed differences: mean, band min-max (hollow: < 3 seeds)", fontsize=10)
    gain.axhline(0.0, color="black", lw=0.8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


def plot_augmentation(record: Mapping[str, Any], path: Path) -> Path:
    """``augmentation.png``: top-1 per init per regime, and the paired gain over timm's default per regime; dots are
    the seeds, bars the mean (hollow marker: fewer than 3 seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    aug = record["augmentation"]
    regimes = list(aug["regimes"].values())
    labels = [r["label"] for r in regimes]
    fig, (acc, gain) = plt.subplots(1, 2, figsize=(11, 4.3))
    width = 0.8 / len(SIZE_ARMS)
    for i, name in enumerate(SIZE_ARMS):
        color = f"C{i}"
        for panel, values in (
            (acc, [r["arms"].get(name) for r in regimes]),
            (gain, [None if name == "default" else r["vs"].get("default", {}).get(name) for r in regimes]),
        ):
            for x, summary in enumerate(values):
                if summary is None:
                    continue
                position = x + (i - (len(SIZE_ARMS) - 1) / 2) * width
                few = summary["n"] < CLAIM_SEEDS
                panel.bar(position, summary["mean"], width * 0.9, color=color, alpha=0.25 if few else 0.5)
                seeds = list(summary["per_seed"].values())
                panel.plot([position] * len(seeds), seeds, ls="none", marker="o", ms=4, color=color,
                           mfc="white" if few else color)  # fmt: skip
        acc.bar(0, 0, 0, color=color, alpha=0.5, label=arm_label(name))
    acc.set_ylabel("test top-1 (%)")
    gain.set_ylabel("paired gain over timm's default (points)")
    gain.axhline(0.0, color="black", lw=0.8)
    for ax in (acc, gain):
        ax.set_xticks(range(len(labels)), labels, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    acc.legend(fontsize=8)
    acc.set_title(f"cpu-proxy, {aug['size']:,} images, 10 epochs: bar mean, dots seeds", fontsize=10)
    gain.set_title("same-seed differences (hollow dots, pale bar: < 3 seeds)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


def write_campaign(root: Path | str = ".", out_dir: Path | str = f"{BENCH}/campaign") -> dict[str, Any]:
    """Build the campaign's record from ``root``; write results.json, results.md, size.png and augmentation.png into
    ``out_dir``."""
    record = build_campaign(root)
    out_dir = Path(out_dir)
    write_json(out_dir / "results.json", record)
    write_text(out_dir / "results.md", render_campaign_markdown(record))
    plot_sizes(record, out_dir / "size.png")
    plot_augmentation(record, out_dir / "augmentation.png")
    return record


def campaign_parser(description: str) -> argparse.ArgumentParser:
    """The flags of ``scripts/campaign_report.py``; ``description`` is the first line of its help."""
    parser = argparse.ArgumentParser(allow_abbrev=False, description=description)
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: .)")
    parser.add_argument("--out-dir", type=Path, default=Path(f"{BENCH}/campaign"))
    return parser


def report_campaign(args: argparse.Namespace) -> None:
    """Write the campaign's summary from the records under ``args.root`` into ``args.out_dir`` and say so."""
    write_campaign(args.root, args.out_dir)
    print(f"wrote {args.out_dir / 'results.md'}, results.json, size.png and augmentation.png")


from .campaign_width import build_width, width_markdown  # noqa: E402  (it builds on the helpers above)
