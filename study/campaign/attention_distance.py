"""Mean attention distance per block, at init and after training, of the campaign's runs under each augmentation.

For each regime (a folder of harness runs) and each init, reads the run ``<runs-dir>/<arm>-seed<k>``: the model
rebuilt as it started (same name, kwargs and seed, as ``draw_run_attention`` does) and the trained ``final/``
checkpoint, both measured with :func:`structinit_hf.benchmark.plots.nonlocality` (ConViT's non-locality: the
attention-weighted query-key distance in patch units, averaged over queries, heads and images) on the first
``--num-images`` images of the split the run was scored on. Writes ``attention_distance.json``, ``.md`` and ``.png``
into ``--out-dir``.

The entry point is ``study/campaign_attention_distance.py``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from structinit_hf.atomic import write_json, write_text
from structinit_hf.benchmark.plots import attention_distance, nonlocality, save_figure
from structinit_hf.benchmark.runs import RUN_RESULTS
from structinit_hf.train._internal import load_images, load_model

__all__ = ["attention_distance_parser", "default_locality", "measure_run", "render", "write_attention_distance"]

ARMS = ("default", "mimetic", "impulse3")
LABELS = {"default": "timm's default", "mimetic": "mimetic", "impulse3": "impulse 3x3"}


def measure_run(run_dir: Path, num_images: int) -> dict[str, Any]:
    """Per-block attention distance of one run's model at init (rebuilt with the run's seed) and after training."""
    results = json.loads((run_dir / RUN_RESULTS).read_text())
    torch.manual_seed(results["args"]["seed"])
    init = load_model(results["model"], num_classes=results["num_classes"], model_kwargs=results["model_kwargs"]).model
    trained = load_model(str(run_dir / "final")).model
    images = load_images(results["dataset"], [init, trained], num_images, split=results["split"])
    with torch.no_grad():
        at_init = [round(d, 4) for d in nonlocality(init.eval(), images[0])]
        after = [round(d, 4) for d in nonlocality(trained.eval(), images[1])]
    return {
        "run": run_dir.as_posix(),
        "model": results["model"],
        "model_kwargs": results["model_kwargs"],
        "seed": results["args"]["seed"],
        "top1": results["top1"],
        "images": f"first {len(images[0])} of {results['split']}",
        "grid": list(trained.patch_embed.grid_size),
        "init": at_init,
        "trained": after,
    }


def _summary(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f} / {min(values):.2f}"


def render(record: dict[str, Any]) -> str:
    """The markdown tables: mean / min over blocks, then every block after training, then default against the rest."""
    regimes = record["regimes"]
    depth = len(next(iter(next(iter(regimes.values())).values()))["trained"])
    out = [
        "# Mean attention distance per block, at init and after training (seed 0, 10 epochs)",
        "",
        record["description"],
        "",
        "| regime | init | top-1 | at init: mean / min over blocks | trained: mean / min over blocks |",
        "|---|---|---|---|---|",
    ]
    for regime, arms in regimes.items():
        for arm, m in arms.items():
            out.append(
                f"| {regime} | {LABELS[arm]} | {m['top1']:.2f} | {_summary(m['init'])} | {_summary(m['trained'])} |"
            )
    out += ["", "After training, per block (patch units):", ""]
    out.append("| regime | init | " + " | ".join(f"b{i + 1}" for i in range(depth)) + " |")
    out.append("|---|---|" + "---|" * depth)
    for regime, arms in regimes.items():
        for arm, m in arms.items():
            out.append(f"| {regime} | {LABELS[arm]} | " + " | ".join(f"{d:.2f}" for d in m["trained"]) + " |")
    out += ["", "At init, per block (patch units; the same model under every regime, as the seed is the same):", ""]
    out.append("| init | " + " | ".join(f"b{i + 1}" for i in range(depth)) + " |")
    out.append("|---|" + "---|" * depth)
    first = next(iter(regimes.values()))
    for arm, m in first.items():
        out.append(f"| {LABELS[arm]} | " + " | ".join(f"{d:.2f}" for d in m["init"]) + " |")
    out += ["", "![attention distance per block](attention_distance.png)", ""]
    out += ["## Did augmentation alone make timm's default local?", ""]
    out += [f"- {line}" for line in record["default_locality"]]
    out.append("")
    return "\n".join(out)


def default_locality(regimes: dict[str, dict[str, Any]], uniform: float | None = None) -> list[str]:
    """One line per regime: timm default's trained minimum block distance against the reference regime's (the first)
    and against the impulse init's in the same regime, at init and trained; then the distance of uniform attention."""
    names = list(regimes)
    reference = names[0]
    ref_min = min(regimes[reference]["default"]["trained"])
    lines = []
    for regime in names:
        arms = regimes[regime]
        default_min = min(arms["default"]["trained"])
        impulse = arms.get("impulse3")
        text = f"{regime}: timm's default trained, minimum over blocks {default_min:.2f}"
        if regime != reference:
            text += f" (under {reference}: {ref_min:.2f}; {default_min - ref_min:+.2f})"
        if impulse is not None:
            imp_init, imp_trained = min(impulse["init"]), min(impulse["trained"])
            local = default_min <= imp_trained
            text += (
                f"; impulse 3x3 at init {imp_init:.2f}, trained {imp_trained:.2f}: default's most local block is "
                + ("as local as" if local else "less local than")
                + " impulse 3x3's after training"
            )
        lines.append(text + ".")
    if uniform is not None:
        lines.append(f"Uniform attention (every key weighted alike) on the same grid: {uniform:.2f}.")
    augmented = [r for r in names[1:] if "impulse3" in regimes[r]]
    if augmented:
        local = [
            r for r in augmented if min(regimes[r]["default"]["trained"]) <= min(regimes[r]["impulse3"]["trained"])
        ]
        lines.append(
            "Answer: "
            + (
                f"yes under {', '.join(local)}: timm's default's most local block reached impulse 3x3's."
                if local
                else "no: under no augmentation did timm's default's most local block reach impulse 3x3's"
                + (
                    f" (its closest: {min(min(regimes[r]['default']['trained']) for r in augmented):.2f} against "
                    f"uniform attention's {uniform:.2f})."
                    if uniform is not None
                    else "."
                )
            )
        )
    return lines


def plot(record: dict[str, Any], path: Path) -> Path:
    """One panel per regime: distance per block after training (solid) and at init (dashed), one colour per init."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    regimes = record["regimes"]
    fig, axes = plt.subplots(1, len(regimes), figsize=(4.2 * len(regimes), 3.8), sharey=True, squeeze=False)
    for ax, (regime, arms) in zip(axes[0], regimes.items(), strict=True):
        for i, (arm, m) in enumerate(arms.items()):
            blocks = range(1, len(m["trained"]) + 1)
            ax.plot(blocks, m["trained"], marker="o", ms=3, color=f"C{i}", label=f"{LABELS[arm]}, trained")
            ax.plot(blocks, m["init"], ls="--", color=f"C{i}", alpha=0.6, label=f"{LABELS[arm]}, init")
        ax.set_title(regime, fontsize=10)
        ax.set_xlabel("block")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("mean attention distance (patches)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


def attention_distance_parser() -> argparse.ArgumentParser:
    """The flags of ``study/campaign_attention_distance.py``."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description="Mean attention distance per block, at init and after training, of the campaign's runs under "
        "each augmentation.",
    )
    parser.add_argument(
        "--regime", action="append", required=True, help="LABEL=RUNS_DIR, in table order; the first is the reference"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-images", type=int, default=256)
    parser.add_argument("--out-dir", type=Path, default=Path("study/records/small_data/campaign"))
    return parser


def write_attention_distance(args: argparse.Namespace) -> int:
    """Measure every regime's runs and write ``attention_distance.json``, ``.md`` and ``.png`` into ``args.out_dir``."""
    torch.set_num_threads(1)
    regimes: dict[str, dict[str, Any]] = {}
    for spec in args.regime:
        label, _, runs_dir = spec.partition("=")
        regimes[label] = {arm: measure_run(Path(runs_dir) / f"{arm}-seed{args.seed}", args.num_images) for arm in ARMS}
    record = {
        "description": "Attention distance (structinit_hf.benchmark.plots.nonlocality: the attention-weighted "
        f"query-key distance in patch units on the patch grid, averaged over queries, heads and the first "
        f"{args.num_images} test images) of the seed-{args.seed} runs of each regime ({', '.join(regimes)}); at init "
        "the model is rebuilt with the run's name, kwargs and seed, trained is the run's final checkpoint. One seed: "
        "a measurement of these runs, not an accuracy claim.",
        "command": shlex.join(["python", "study/campaign_attention_distance.py", *sys.argv[1:]]),
        "regimes": regimes,
    }
    grid = next(iter(next(iter(regimes.values())).values()))["grid"]
    uniform = round(attention_distance(torch.ones(1, 1, grid[0] * grid[1], grid[0] * grid[1]), tuple(grid)), 4)
    record["uniform_attention_distance"] = uniform
    record["default_locality"] = default_locality(regimes, uniform)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_json(args.out_dir / "attention_distance.json", record)
    write_text(args.out_dir / "attention_distance.md", render(record))
    plot(record, args.out_dir / "attention_distance.png")
    print(f"wrote {args.out_dir / 'attention_distance.md'}, attention_distance.json and attention_distance.png")
    return 0
