"""The campaign's ``results.md``: a table per setting with its verdicts, the augmentation and width sections."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from structinit_hf.benchmark.arms import arm_label
from structinit_hf.benchmark.stats import CLAIM_SEEDS

from .sources import LAYER_SCALE_OFF, MAIN_ARMS, REFERENCES, SIZE_ARMS, SIZE_TABLE_ARMS, WIDTH_ARMS, WIDTH_REFERENCES

__all__ = [
    "beyond_markdown",
    "best_rate_markdown",
    "render_campaign_markdown",
    "width_length_markdown",
    "width_markdown",
]

REFERENCE_NAMES = {  # the tables' column heads
    "default": "default",
    "mimetic": "mimetic",
    "impulse3": "`shift`",
    "swin-default": "timm's default",
    "mixer-default": "timm's default",
    "model-default": "timm's default",
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
    against = (
        "; ".join(
            f"{arm_label(n)} {c['mean']:+.2f} ({_signed(c['per_seed'])}): {_verdict(c)}" for n, c in best["vs"].items()
        )
        or "no other init has two seeds yet"
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
    if lengths.get("long_minus_short"):
        out += ["### 50 epochs minus 10 epochs, same seed", "", *_gain_table(lengths["long_minus_short"], 5), ""]
    if "augmentation" in record:
        out += _augmentation_markdown(record["augmentation"])
    if "width" in record:
        out += width_markdown(record["width"])
    for best_rate in record.get("width_best_rate", ()):
        out += best_rate_markdown(best_rate)
    for length in record.get("width_length", ()):
        out += width_length_markdown(length)
    if "beyond" in record:
        out += beyond_markdown(record["beyond"])
    if "convergence" in record:
        from .convergence import convergence_markdown

        out += convergence_markdown(record["convergence"])
    out += [
        "Paired differences are init minus reference on the same seed; `±` is the sample standard deviation over "
        "seeds; `range` is max - min over seeds (how far runs of identical settings landed apart). "
        f"Old arm names mapped: {', '.join(f'`{k}` -> `{v}`' for k, v in record['aliases'].items())}.",
        "",
    ]
    return "\n".join(out)


def _devices(devices: Mapping[str, Sequence[int]]) -> str:
    """Where each seed trained: ``CPU (s0, s1); NVIDIA H200 (s2)``."""
    return "; ".join(f"{device} ({', '.join(f's{seed}' for seed in seeds)})" for device, seeds in devices.items())


def _gain_table(gains: Mapping[str, Mapping[str, Any] | None], factor: int) -> list[str]:
    """Each init's gain from ``factor`` x the epochs, paired on the seed."""
    rows = [f"| {arm_label(n)} | {g['mean']:+.2f} | {_signed(g['per_seed'])} |" for n, g in gains.items() if g]
    return [f"| init | mean gain from {factor}x the epochs | per seed |", "|---|---|---|", *rows]


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
        "[attention_distance.md](attention_distance.md), written by `study/campaign_attention_distance.py`.",
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


def width_markdown(width: Mapping[str, Any]) -> list[str]:
    """The width section of the campaign's ``results.md``."""
    out = [
        "## Width: head dimension 16, 32 and 64 (10 epochs, crop + flip, 3 heads)",
        "",
        "The cpu-proxy profiles with only the width changed (`cpu-proxy-n2500-w96`, `-n2500-w192`, ...), then at "
        "width 192 the learning rate, the warm-up or the epochs; the paper's ViT-Tiny head is 64 wide. Still 16 px "
        "and 10 epochs (one setting 50, as its title says), not the paper's 32 px and 200 epochs. Runs on a lent "
        "GPU are the CPU's runs on another device (fp32, eager); each setting says where each seed ran.",
        "",
    ]
    for setting in width.values():
        warmup = f", {setting['warmup_epochs']:g} warm-up epochs" if setting["warmup_epochs"] != 1 else ""
        epochs = f", {setting['epochs']} epochs" if setting["epochs"] != 10 else ""
        title = (
            f"### {setting['images']:,} training images, width {setting['width']} (head dim {setting['head_dim']}), "
            f"lr {setting['lr']:g}{warmup}{epochs}"
        )
        out += [title, ""]
        if setting["note"]:
            out += [setting["note"], ""]
        if not setting["arms"]:
            out += ["Not run yet.", ""]
            continue
        out += [*_setting_table(setting, WIDTH_ARMS, WIDTH_REFERENCES), "", _best_line(setting), ""]
        where = _devices(setting["devices"])
        times = ", ".join(f"{arm_label(n)} {s / 60:.0f} min" for n, s in setting["wall_time_s"].items())
        out += [
            f"Trained on: {where}. Wall time per run (mean over its seeds; on the CPU two single-thread runs at a "
            f"time, on a GPU five runs sharing it): {times}.",
            "",
        ]
        out += [f"Sources: {', '.join(f'`{p}`' for p in setting['sources'])}", ""]
    return out


def best_rate_markdown(best_rate: Mapping[str, Any]) -> list[str]:
    """One width with each init at its better learning rate: a section after the width settings."""
    rates = ", ".join(f"{arm_label(name)} {lr:g}" for name, lr in best_rate["rates"].items())
    grid = " and ".join(f"{lr:g}" for lr in best_rate["grid"])
    out = [
        f"### Width {best_rate['width']} (head dim {best_rate['head_dim']}), {best_rate['images']:,} images: each "
        "init at its better learning rate",
        "",
        f"Per init, the better (higher mean) of peak learning rates {grid} from the settings above: {rates}. "
        "Paired on the seed with timm's default and `shift`, each at its own better rate.",
        "",
    ]
    if not best_rate["arms"]:
        return [*out, "Not run yet.", ""]
    return [*out, *_setting_table(best_rate, WIDTH_ARMS, WIDTH_REFERENCES), "", _best_line(best_rate), ""]


def width_length_markdown(length: Mapping[str, Any]) -> list[str]:
    """One width setting trained longer: each init's gain from the epochs, a section after the width settings."""
    short, long = length["epochs"]
    out = [
        f"### Width {length['width']} (head dim {length['head_dim']}), {length['images']:,} images, lr "
        f"{length['lr']:g}: {long} epochs minus {short}, same seed",
        "",
    ]
    if not length["long_minus_short"]:
        return [*out, "Not run yet.", ""]
    short_on, long_on = length["devices"]
    where = f"Trained: {short} epochs on {_devices(short_on)}; {long} on {_devices(long_on)}."
    if short_on.keys() != long_on.keys():
        where += (
            " The two lengths ran on different devices, so a gain also holds any difference between them (the "
            "settings trained on both, above, measure it)."
        )
    return [*out, *_gain_table(length["long_minus_short"], long // short), "", where, ""]


def _cifar10_line(cifar10: Mapping[str, Any]) -> str:
    versus = cifar10["vs"].get("default", {})
    cells = [
        f"{arm_label(name)} {c['mean']:+.2f} ({_signed(c['per_seed'])}): {_verdict(c)}"
        for name, c in versus.items()
        if c is not None and name in SIZE_ARMS
    ]
    heading = f"The same setting on CIFAR-10 (`{cifar10['setting']}`), minus timm's default: "
    return heading + ("; ".join(cells) or "not run") + "."


def beyond_markdown(beyond: Mapping[str, Any]) -> list[str]:
    """The Swin, Mixer, relative-position and RoPE ViT tables (each init at both rates, then at its better one) and the
    Fashion-MNIST tables."""
    out = [
        "## Beyond the plain ViT and CIFAR-10: Swin, MLP-Mixer, relative-position and RoPE ViTs, Fashion-MNIST (10 "
        "epochs, crop + flip, 2,500 images unless named)",
        "",
    ]
    for setting in beyond["settings"].values():
        references = (setting["reference"],)
        out += [f"### {setting['title']}", ""]
        out += [*_setting_table(setting, setting["arms_listed"], references), "", _best_line(setting), ""]
        if setting.get("cifar10"):
            out += [_cifar10_line(setting["cifar10"]), ""]
        if setting["wall_time_s_mean"] is not None:
            out += [f"Mean wall time per run: {setting['wall_time_s_mean'] / 60:.1f} minutes.", ""]
        out += [f"Sources: {', '.join(f'`{p}`' for p in setting['sources']) or 'none (not run)'}", ""]
    for name, grid in beyond["grids"].items():
        rates = ", ".join(f"{arm_label(arm)} {rate:g}" for arm, rate in grid["rates"].items())
        out += [f"### {name}: each init at its better rate ({rates})", ""]
        arms = list(grid["rates"])
        out += [*_setting_table(grid, arms, (arms[0],) if arms else ()), "", _best_line(grid), ""]
    out += _families_side_by_side(beyond["grids"])
    out += factorial_markdown(beyond.get("factorial", {}))
    return out


def _cell_label(name: str) -> str:
    off = name.startswith(LAYER_SCALE_OFF)
    return ("layer scale off, " if off else "") + arm_label(name.removeprefix(LAYER_SCALE_OFF))


def _gamma(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def factorial_markdown(factorial: Mapping[str, Any]) -> list[str]:
    """Issue 67's layer-scale factorial: per family, every (layer scale, init) cell minus timm's default as timm builds
    it and minus timm's default with layer scale off, paired on the seed, with each cell's starting gamma."""
    if not factorial:
        return []
    out = [
        "### Layer scale and the impulse: the factorial (issue 67; lr 1e-3, 10 epochs, 2,500 images)",
        "",
        "Every cell against timm's default as timm builds the model (the baseline a user has) and against timm's "
        "default with layer scale off at init (`init_values=1.0`), paired on the seed. *gamma* is the attention "
        "branch's layer scale the built model started with, read from the model (mean over blocks).",
        "",
    ]
    for family in factorial.values():
        refs = ("model-default", LAYER_SCALE_OFF + "model-default")
        out += [
            f"#### {family['name']} (`{family['model']}`)",
            "",
            "| layer scale, init | gamma | top-1 mean ± std | per seed | minus timm's default as built (paired, per seed) "
            "| minus timm's default with layer scale off |",
            "|---|---|---|---|---|---|",
        ]
        for name in family["cells"]:
            arm = family["arms"].get(name)
            gamma = _gamma(family["gamma"].get(name)) if name in family["gamma"] else "–"
            if arm is None:
                out.append(f"| {_cell_label(name)} | {gamma} | not run | – | – | – |")
                continue
            cells = [_difference_cell(family["vs"].get(ref, {}).get(name)) for ref in refs]
            out.append(
                f"| {_cell_label(name)} | {gamma} | {_fmt(arm)} | {_seeds(arm['per_seed'])} | " + " | ".join(cells)
                + " |"
            )  # fmt: skip
        out += ["", *([family["note"], ""] if family["note"] else []), _best_line(family), ""]
        out += [f"Sources: {len(family['sources'])} records.", ""]
    return out


def _families_side_by_side(grids: Mapping[str, Any]) -> list[str]:
    """Every family on each dataset it ran on: each init's paired gain over timm's default, each at its better rate."""
    rows = []
    for name, grid in grids.items():
        family, _, dataset = name.partition(", ")
        reference = next(iter(grid["rates"]), None)
        versus = grid["vs"].get(reference, {}) if reference else {}
        rows += [
            f"| {family} | {dataset or 'CIFAR-10'} | {arm_label(a)} | {_difference_cell(c)} |"
            for a, c in versus.items()
        ]
        if not versus:
            rows.append(f"| {family} | {dataset or 'CIFAR-10'} | – | not run yet |")
    return [
        "### Swin, MLP-Mixer, relative-position (relpos) and RoPE (rope) ViTs on each dataset (each init at its better "
        "rate)",
        "",
        "| family | dataset | init | minus timm's default, paired (per seed): verdict |",
        "|---|---|---|---|",
        *rows,
        "",
    ]
