"""The campaign's width axis: the cpu-proxy at width 48, 96 and 192 with 3 heads (head dimension 16, 32, 64, the last
the paper's ViT-Tiny head), from the committed harness records; trains nothing.

Each setting gets the table of :mod:`.campaign` with paired differences against timm's default and against `shift`
(the default impulse construction), the tie rule's verdicts, and the wall time per run for planning.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .arms import arm_label
from .campaign import BENCH, _best_line, _load, _setting, _setting_table, merge_scores

__all__ = ["WIDTH_ARMS", "WIDTH_REFERENCES", "WIDTH_SOURCES", "build_width", "width_markdown"]

# (training images, width, peak lr) -> the records of that setting: every results.json under the profile's folder (the
# width campaign writes one per seed and setting, presets-seed<k>/ for the authors' v1 and v2); a run in two records
# must carry the same figure
WIDTH_SOURCES: dict[tuple[int, int, float], tuple[str, ...]] = {
    (2_500, 48, 1e-3): (f"{BENCH}/cpu-proxy-n2500-cifar10/results.json",),
    (2_500, 96, 1e-3): (f"{BENCH}/cpu-proxy-n2500-w96-cifar10/**/results.json",),
    (2_500, 192, 1e-3): (f"{BENCH}/cpu-proxy-n2500-w192-cifar10/**/results.json",),
    (2_500, 192, 3e-4): (f"{BENCH}/cpu-proxy-n2500-w192-lr3e-4-cifar10/**/results.json",),
    (5_000, 192, 1e-3): (f"{BENCH}/cpu-proxy-n5000-w192-cifar10/**/results.json",),
}

WIDTH_ARMS = ("default", "mimetic", "impulse3", "v1", "v2")

WIDTH_REFERENCES = ("default", "impulse3")  # timm's default, and `shift` (the library's default init)

HEADS = 3


def build_width(root: Path | str = ".") -> dict[str, Any]:
    """Per ``"<images>/<width>"``: the setting's summaries and verdicts, its sources and wall time per run."""
    root = Path(root)
    out: dict[str, Any] = {}
    for (size, width, lr), paths in WIDTH_SOURCES.items():
        records, found = _load(root, paths)
        for record, path in zip(records, found, strict=True):
            recorded = (record["architecture"].get("embed_dim"), record["train_options"]["lr"])
            if recorded != (width, lr):
                raise ValueError(f"{path}: width {recorded[0]} at lr {recorded[1]:g}, listed as {width} at {lr:g}")
        wall: dict[str, dict[int, float]] = {}
        for record in records:
            for name, arm in record["arms"].items():
                for seed, seconds in zip(arm["seeds"], arm["wall_time_s"], strict=True):
                    wall.setdefault(name, {})[seed] = seconds
        out[f"{size}/{width}/{lr:g}"] = {
            "images": size,
            "width": width,
            "lr": lr,
            "head_dim": width // HEADS,
            "sources": found,
            "wall_time_s": {name: statistics.fmean(per_seed.values()) for name, per_seed in wall.items()},
            **_setting(merge_scores(records), WIDTH_ARMS, WIDTH_REFERENCES),
        }
    return out


def width_markdown(width: Mapping[str, Any]) -> list[str]:
    """The width section of the campaign's ``results.md``."""
    out = [
        "## Width: head dimension 16, 32 and 64 (10 epochs, crop + flip, 3 heads)",
        "",
        "The cpu-proxy profiles with only the width changed (`cpu-proxy-n2500-w96`, `-n2500-w192`, `-n5000-w192`); "
        "the paper's ViT-Tiny head is 64 wide. Still 16 px and 10 epochs, not the paper's 32 px and 200 epochs.",
        "",
    ]
    for setting in width.values():
        title = (
            f"### {setting['images']:,} training images, width {setting['width']} (head dim {setting['head_dim']}), "
            f"lr {setting['lr']:g}"
        )
        out += [title, ""]
        if not setting["arms"]:
            out += ["Not run yet.", ""]
            continue
        out += [*_setting_table(setting, WIDTH_ARMS, WIDTH_REFERENCES), "", _best_line(setting), ""]
        times = ", ".join(f"{arm_label(n)} {s / 60:.0f} min" for n, s in setting["wall_time_s"].items())
        out += [f"Wall time per run (mean over its seeds, two single-thread runs at a time): {times}.", ""]
        out += [f"Sources: {', '.join(f'`{p}`' for p in setting['sources'])}", ""]
    return out
