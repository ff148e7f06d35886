"""Trained to convergence (issue 55): does structured init's gain over timm's default last as the schedule grows?

Per dataset, the same proxy (2,500 images, width 48, crop + flip, lr 1e-3) trained for whole schedules of 10, 50 and
200 epochs: each init's test top-1, its paired gain over timm's default and over mimetic under the tie rule, at every
length committed. From the per-epoch validation curves of the longest schedule: the first epoch at which timm's default
reaches the score `shift` had after 10 and after 50 epochs of that same schedule, seed by seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from structinit_hf.benchmark.arms import arm_label
from structinit_hf.benchmark.plots import save_figure
from structinit_hf.benchmark.stats import CLAIM_SEEDS

from .scores import load_records, merge_scores, summarize_setting
from .sources import BENCH, SIZE_ARMS

__all__ = ["CONVERGENCE_SOURCES", "build_convergence", "convergence_markdown", "plot_convergence"]


def _records(profile: str, dataset: str) -> tuple[str, ...]:
    return (f"{BENCH}/{profile}-{dataset}/results.json", f"{BENCH}/{profile}-{dataset}/seed*/results.json")


# dataset -> schedule length (epochs) -> the records of the 2,500-image proxy trained that long
CONVERGENCE_SOURCES: dict[str, dict[int, tuple[str, ...]]] = {
    "cifar10": {
        10: _records("cpu-proxy-n2500", "cifar10"),
        50: _records("cpu-proxy-n2500-long", "cifar10"),
        200: _records("cpu-proxy-n2500-long200", "cifar10"),
    },
    "fashion_mnist": {
        10: _records("cpu-proxy-n2500", "fashion_mnist"),
        50: _records("cpu-proxy-n2500-long", "fashion_mnist"),
    },
}

MARKS = (10, 50)
COLORS = {
    "default": "C0",
    "mimetic": "C1",
    "impulse3": "C2",
}  # one color per init in every panel  # catch-up: the epochs of `shift`'s score that timm's default is timed to reach


def _curves(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, list[float]]]:
    """Per arm and seed, the validation top-1 after every epoch."""
    curves: dict[str, dict[int, list[float]]] = {}
    for record in records:
        for name, arm in record["arms"].items():
            for seed, curve in zip(arm["seeds"], arm.get("val_top1", []), strict=False):
                curves.setdefault(name, {})[int(seed)] = [float(v) for v in curve]
    return curves


def _catch_up(curves: Mapping[str, Mapping[int, list[float]]], epochs: int) -> dict[str, Any]:
    """Per mark in :data:`MARKS` and seed: `shift`'s validation top-1 at that epoch, and the first epoch (1-based) of
    the same schedule at which timm's default reaches it (``None``: it never does within the schedule)."""
    shift, default = curves.get("impulse3", {}), curves.get("default", {})
    out: dict[str, Any] = {}
    for mark in (m for m in MARKS if m < epochs):
        per_seed = {}
        for seed in sorted(set(shift) & set(default)):
            if len(shift[seed]) < mark or len(default[seed]) < epochs:
                continue
            target = shift[seed][mark - 1]
            reached = next((i + 1 for i, v in enumerate(default[seed]) if v >= target), None)
            per_seed[seed] = {"shift_val_top1": target, "default_epoch": reached}
        out[str(mark)] = per_seed
    return out


def build_convergence(root: Path | str = ".") -> dict[str, Any]:
    """The section's record: per dataset and length, the arms' summaries and verdicts against timm's default and
    mimetic; for the longest length run so far, the catch-up epochs and each seed's validation curve."""
    root = Path(root)
    out: dict[str, Any] = {}
    for dataset, lengths in CONVERGENCE_SOURCES.items():
        per_length: dict[str, Any] = {}
        curves: dict[int, dict[str, dict[int, list[float]]]] = {}
        for epochs, patterns in lengths.items():
            records, found = load_records(root, patterns)
            for record, path in zip(records, found, strict=True):
                if record["train_options"]["epochs"] != epochs:
                    raise ValueError(f"{path}: {record['train_options']['epochs']} epochs, listed under {epochs}")
            per_length[str(epochs)] = {"sources": found, **summarize_setting(merge_scores(records), SIZE_ARMS)}
            curves[epochs] = _curves(records)
        longest = max((epochs for epochs, c in curves.items() if c), default=None)  # the longest schedule run so far
        if longest is not None:
            per_length[str(longest)]["catch_up"] = _catch_up(curves[longest], longest)
            per_length[str(longest)]["curves"] = {
                name: {str(seed): curve for seed, curve in per_seed.items()}
                for name, per_seed in curves[longest].items()
            }
        out[dataset] = per_length
    return out


def _gain(setting: Mapping[str, Any], name: str, reference: str) -> str:
    c = setting.get("vs", {}).get(reference, {}).get(name)
    if c is None:
        return "–"
    if c["n"] == 1:
        return f"{c['mean']:+.2f} (1 seed: no verdict)"
    few = f", {c['n']} seeds, below the bar of {CLAIM_SEEDS}" if c["n"] < CLAIM_SEEDS else ""
    return f"{c['mean']:+.2f} ± {c['std']:.2f}: {c['verdict']} (spread {c['tolerance']:.2f}{few})"


def _catch_up_lines(catch_up: Mapping[str, Any], epochs: int) -> list[str]:
    lines = []
    for mark, per_seed in catch_up.items():
        if not per_seed:
            continue
        cells = [
            f"seed {seed}: {v['shift_val_top1']:.1f} -> "
            + (f"epoch {v['default_epoch']}" if v["default_epoch"] else f"not within {epochs}")
            for seed, v in per_seed.items()
        ]
        lines.append(
            f"- `shift`'s validation top-1 after {mark} epochs, reached by timm's default at: {'; '.join(cells)}"
        )
    return lines


def convergence_markdown(convergence: Mapping[str, Any]) -> list[str]:
    """The report's section "Trained to convergence"."""
    out = [
        "## Trained to convergence: 10, 50 and 200 epochs at 2,500 images (issue 55)",
        "",
        "The proxy at 2,500 images (16 px, patch 2, width 48, depth 12, crop + flip, lr 1e-3, 1 warm-up epoch, then "
        "cosine to the end of the schedule), trained for a whole schedule of each length: a 50-epoch run is not the "
        "first 50 epochs of a 200-epoch one (its learning rate has decayed to the end by epoch 50), so each length is "
        "its own run. Test top-1 on all 10,000 test images; gains paired on the seed, under the tie rule.",
        "",
        "![convergence](convergence.png)",
        "",
    ]
    for dataset, lengths in convergence.items():
        out += [f"### {dataset}", ""]
        out += [
            "| epochs | seeds | timm's default | mimetic | `shift` | `shift` minus timm's default "
            "| mimetic minus timm's default | `shift` minus mimetic |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for epochs, setting in lengths.items():
            arms = setting["arms"]
            if not arms:
                out.append(f"| {epochs} | 0 | not run yet | | | | | |")
                continue
            top1 = [
                f"{arms[n]['mean']:.2f} ± {arms[n]['std']:.2f}"
                if n in arms and arms[n]["n"] > 1
                else (f"{arms[n]['mean']:.2f} (1 seed)" if n in arms else "–")
                for n in SIZE_ARMS
            ]
            seeds = max(arm["n"] for arm in arms.values())
            out.append(
                f"| {epochs} | {seeds} | {' | '.join(top1)} | {_gain(setting, 'impulse3', 'default')} | "
                f"{_gain(setting, 'mimetic', 'default')} | {_gain(setting, 'impulse3', 'mimetic')} |"
            )
        out.append("")
        for epochs, setting in lengths.items():
            if setting.get("catch_up"):
                out += [f"Within the {epochs}-epoch schedule (validation top-1 on the held-out images), per seed:", ""]
                out += [*_catch_up_lines(setting["catch_up"], int(epochs)), ""]
        sources = [p for setting in lengths.values() for p in setting["sources"]]
        out += [f"Sources: {', '.join(f'`{p}`' for p in sources) or 'none'}", ""]
    return out


def plot_convergence(convergence: Mapping[str, Any], path: Path) -> Path:
    """``convergence.png``: per dataset, `shift`'s and mimetic's paired gain over timm's default against the
    schedule's length (band: min-max over seeds), and each init's mean validation curve over the longest schedule."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    datasets = list(convergence)
    fig, axes = plt.subplots(2, len(datasets), figsize=(5.5 * len(datasets), 8), squeeze=False)
    for column, dataset in enumerate(datasets):
        gain_ax, curve_ax = axes[0][column], axes[1][column]
        lengths = convergence[dataset]
        for name in ("impulse3", "mimetic"):
            points = [(int(e), c) for e, s in lengths.items() if (c := s.get("vs", {}).get("default", {}).get(name))]
            if points:
                xs = [e for e, _ in points]
                gain_ax.plot(xs, [c["mean"] for _, c in points], marker="o", color=COLORS[name], label=arm_label(name))
                lows, highs = [c["min"] for _, c in points], [c["max"] for _, c in points]
                gain_ax.fill_between(xs, lows, highs, color=COLORS[name], alpha=0.2)
        gain_ax.axhline(0, color="black", lw=0.8)
        gain_ax.set_xscale("log")
        gain_ax.set_xlim(7, 300)
        gain_ax.set_xticks([int(e) for e in lengths], [str(e) for e in lengths])
        gain_ax.minorticks_off()
        gain_ax.set_title(f"{dataset}: gain over timm's default")
        gain_ax.set_xlabel("schedule length (epochs)")
        gain_ax.set_ylabel("paired test top-1 gain (points)")
        gain_ax.grid(alpha=0.3)
        gain_ax.legend(fontsize=8)
        longest = next((s for e, s in sorted(lengths.items(), key=lambda kv: -int(kv[0])) if s.get("curves")), None)
        if longest is not None:
            for name in SIZE_ARMS:
                per_seed = list(longest["curves"].get(name, {}).values())
                if per_seed:
                    n = min(len(c) for c in per_seed)
                    mean = [sum(c[i] for c in per_seed) / len(per_seed) for i in range(n)]
                    curve_ax.plot(
                        range(1, n + 1), mean, color=COLORS[name], label=f"{arm_label(name)} ({len(per_seed)} seed(s))"
                    )
            curve_ax.set_title(f"{dataset}: validation top-1 over the longest schedule")
            curve_ax.set_xlabel("epoch")
            curve_ax.set_ylabel("validation top-1 (%)")
            curve_ax.grid(alpha=0.3)
            curve_ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)
