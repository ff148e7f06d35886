"""README's "Which init, when" as one figure: per family and setting, the impulse's and mimetic's paired gain over
timm's default (mean, min-max over seeds; filled where ahead or behind under the tie rule), and, where it was
measured, the impulse's norm-matched control. Read from the campaign's record (``campaign/results.json``) and the
structure record (a row with a control takes all three from its structure cell, so that they pair the same runs);
trains nothing."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["ADVICE_ROWS", "advice_rows", "plot_advice"]

# (family, setting, path into the campaign record, reference, impulse arm, mimetic arm, structure cell of its control)
ADVICE_ROWS: tuple[tuple[str, str, tuple[str, ...], str, str, str | None, str | None], ...] = (
    ("ViT", "width 48, 2,500 images", ("sizes", "2500"), "default", "impulse3", "mimetic", "ViT width 48, CIFAR-10"),
    ("ViT", "width 48, 5,000 images", ("sizes", "5000"), "default", "impulse3", "mimetic", None),
    ("ViT", "width 48, 25,000 images", ("sizes", "25000"), "default", "impulse3", "mimetic", None),
    ("ViT", "5,000 images, RandAugment", ("augmentation", "regimes", "randaug"), "default", "impulse3", "mimetic",
     None),
    ("ViT", "5,000 images, Mixup + CutMix", ("augmentation", "regimes", "mixcut"), "default", "impulse3", "mimetic",
     None),
    ("ViT", "width 96, lr 3e-4", ("width", "2500/96/0.0003"), "default", "impulse3", "mimetic", None),
    ("ViT", "width 192, lr 3e-4 (CPU runs)", ("width", "2500/192/0.0003"), "default", "impulse3", "mimetic",
     "ViT width 192, lr 3e-4, CIFAR-10"),
    ("ViT", "width 48, 50 epochs", ("lengths", "50"), "default", "impulse3", "mimetic", None),
    ("ViT", "width 48, 200 epochs", ("convergence", "cifar10", "200"), "default", "impulse3", "mimetic", None),
    ("ViT", "width 192, 50 epochs", ("width", "2500/192/0.0003/50ep"), "default", "impulse3", "mimetic", None),
    ("Fashion-MNIST", "width 48, 2,500 images", ("beyond", "settings", "fashion_mnist/2500/48"), "default", "impulse3",
     "mimetic", "ViT width 48, Fashion-MNIST"),
    ("Fashion-MNIST", "width 48, 10,000 images", ("beyond", "settings", "fashion_mnist/10000/48"), "default",
     "impulse3", "mimetic", None),
    ("Fashion-MNIST", "width 192, lr 3e-4", ("beyond", "settings", "fashion_mnist/2500/192"), "default", "impulse3",
     "mimetic", None),
    ("Swin", "CIFAR-10, lr 3e-4", ("beyond", "settings", "swin/0.0003"), "swin-default", "swin-impulse3",
     "swin-mimetic", None),
    ("Swin", "Fashion-MNIST, lr 3e-4", ("beyond", "settings", "swin/fashion_mnist/0.0003"), "swin-default",
     "swin-impulse3", "swin-mimetic", None),
    ("MLP-Mixer", "CIFAR-10, lr 3e-4", ("beyond", "settings", "mixer/0.0003"), "mixer-default", "mixer-impulse3", None,
     None),
    ("DeiT-III", "impulse with layer scale 1", ("beyond", "settings", "deit3/0.001"), "model-default",
     "model-impulse3-attnls1", "model-mimetic", "DeiT-III (impulse with the attention layer scale at 1)"),
    ("relative-position ViT", "as timm builds it", ("beyond", "settings", "relpos/0.001"), "model-default",
     "model-impulse3", "model-mimetic",
     "relative-position ViT as timm builds it (weight_init='reset', bias MLP, layer scale 1e-6)"),
    ("RoPE ViT", "impulse + mimetic V/O, layer scale 1", ("beyond", "settings", "rope/0.001"), "model-default",
     "model-impulse3-mimeticvo-attnls1", "model-mimetic",
     "RoPE ViT (impulse with mimetic V/O and the attention layer scale at 1)"),
    ("RoPE ViT", "the same, 50 epochs", ("beyond", "settings", "rope/50ep"), "model-default",
     "model-impulse3-mimeticvo-attnls1", None,
     "RoPE ViT, 50 epochs (impulse with mimetic V/O and the attention layer scale at 1)"),
)  # fmt: skip


def _at(record: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any] | None:
    for key in path:
        record = record.get(key) if isinstance(record, Mapping) else None
    return record


def advice_rows(campaign: Mapping[str, Any], structure: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each row of :data:`ADVICE_ROWS` with its comparisons (``None`` where not measured)."""
    cells = {cell["title"]: cell for cell in structure["cells"] if cell["group"] in ("control", "relpos")}
    rows = []
    for family, setting, path, reference, impulse, mimetic, cell in ADVICE_ROWS:
        versus = (_at(campaign, path) or {}).get("vs", {}).get(reference, {})
        control = None
        if cell in cells and impulse in (cells[cell]["controls"] or {}):
            versus = cells[cell]["vs_default"]
            control = versus.get(cells[cell]["controls"][impulse]["control"])
        rows.append(dict(family=family, setting=setting, impulse=versus.get(impulse),
                         mimetic=versus.get(mimetic) if mimetic else None, control=control))  # fmt: skip
    return rows


def plot_advice(campaign: Mapping[str, Any], structure: Mapping[str, Any], path: Path) -> Path:
    """``which_init.png``: a row per setting, the gain of each init over timm's default of the same network."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from structinit_hf.benchmark.plots import save_figure

    rows = advice_rows(campaign, structure)
    fig, ax = plt.subplots(figsize=(9, 0.36 * len(rows) + 1.6))
    series = (("impulse", "tab:blue", 0.2, "impulse (the family's default options)"),
              ("mimetic", "tab:orange", 0.0, "mimetic"),
              ("control", "tab:gray", -0.2, "impulse's norm-matched control"))  # fmt: skip
    labelled = set()
    for y, row in enumerate(reversed(rows)):
        for key, color, offset, name in series:
            c = row[key]
            if c is None:
                continue
            decided = c.get("verdict") in ("ahead", "behind")
            ax.errorbar(c["mean"], y + offset, xerr=[[c["mean"] - c["min"]], [c["max"] - c["mean"]]], fmt="o",
                        color=color, mfc=color if decided else "white", capsize=2, ms=5,
                        label=None if name in labelled else name)  # fmt: skip
            labelled.add(name)
    ax.set_yticks(range(len(rows)), [f"{r['family']}: {r['setting']}" for r in reversed(rows)], fontsize=8)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("top-1 minus timm's default, same seed (points; log scale past 10)\nmean, bar min-max over the seeds")
    ax.set_title("CPU proxy. Filled: ahead (behind) on every seed by more than the spread; hollow: a tie", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path
