"""The campaign's figures: ``size.png`` (top-1 and gain against training-set size) and ``augmentation.png``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from structinit_hf.benchmark.arms import arm_label
from structinit_hf.benchmark.plots import save_figure
from structinit_hf.benchmark.stats import CLAIM_SEEDS

from .sources import SIZE_ARMS

__all__ = ["plot_augmentation", "plot_sizes"]


def plot_sizes(record: Mapping[str, Any], path: Path) -> Path:
    """``size.png``: top-1 against size, and gain over timm's default against size; band = min-max over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (acc, gain) = plt.subplots(1, 2, figsize=(11, 4.3))
    sizes = sorted(record["sizes"], key=int)
    for name in SIZE_ARMS:
        points, gains = [], []  # (size, summary) pairs: the arm's top-1, and its paired gain over timm's default
        for size in sizes:
            setting = record["sizes"][size]
            arm = setting["arms"].get(name)
            if arm is not None:
                points.append((int(size), arm))
            c = setting["vs"].get("default", {}).get(name)
            if name == "default" and "default" in setting["arms"]:
                c = {"mean": 0.0, "min": 0.0, "max": 0.0, "n": setting["arms"]["default"]["n"]}
            if c is not None:
                gains.append((int(size), c))
        if points:
            color = _band(acc, points, arm_label(name))
            if gains:
                _band(gain, gains, arm_label(name), color)
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


def _band(ax: Any, points: list[tuple[int, Mapping[str, Any]]], label: str, color: str | None = None) -> str:
    """One arm on ``ax``: the mean over seeds at each x, its min-max band, a hollow marker where fewer than
    :data:`CLAIM_SEEDS` seeds ran; returns the line's color."""
    xs, mean = [x for x, _ in points], [summary["mean"] for _, summary in points]
    (line,) = ax.plot(xs, mean, marker="o", label=label, **({} if color is None else {"color": color}))
    low, high = [summary["min"] for _, summary in points], [summary["max"] for _, summary in points]
    ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.18)
    few = [(x, summary["mean"]) for x, summary in points if summary["n"] < CLAIM_SEEDS]
    if few:
        ax.plot(*zip(*few, strict=True), ls="none", marker="o", mfc="white", color=line.get_color())
    return line.get_color()


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
