"""Paired-seed statistics and the tie rule: how ``compare`` and the campaign judge one init against another.

Runs of two arms on the same seed share the split, the data order and the augmentation, so an init is compared with a
reference seed by seed; the rule is :data:`TIE_RULE`, applied by :func:`decide`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CLAIM_SEEDS",
    "TIE_RULE",
    "decide",
    "mean_std",
    "mean_std_text",
    "paired_comparison",
    "paired_differences",
    "spread",
]

CLAIM_SEEDS = 3  # seeds an accuracy claim needs


TIE_RULE = (
    "An init is called ahead of (or behind) a reference only when it is ahead (behind) on every paired seed and the "
    "mean paired difference is larger than the seed spread: the largest max-min range, over the same seeds, of "
    "either arm's runs (how far runs of identical settings landed apart). Anything else is a tie. One seed gives no "
    "verdict; two seeds are below the 3-seed bar for an accuracy claim and are marked so."
)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value) of ``values``."""
    if not values:
        raise ValueError("spread of no values")
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def mean_std_text(values: Sequence[float]) -> str:
    """``mean ± std`` to two decimals, the mean alone for one value."""
    mean, std = mean_std(values)
    return f"{mean:.2f} ± {std:.2f}" if len(values) > 1 else f"{mean:.2f}"


def spread(values: Sequence[float]) -> dict[str, float | int]:
    """n, mean, sample std (0 for one value), min, max and range (max - min) of ``values``."""
    values = list(values)
    mean, std = mean_std(values)
    return {
        "n": len(values),
        "mean": round(mean, 4),
        "std": round(std, 4),
        "min": min(values),
        "max": max(values),
        "range": round(max(values) - min(values), 4),
    }


def paired_differences(arm: Mapping[int, float], reference: Mapping[int, float]) -> dict[str, Any] | None:
    """``arm - reference`` on each seed both have, with its spread; ``None`` when they share no seed."""
    seeds = sorted(set(arm) & set(reference))
    if not seeds:
        return None
    per_seed = {seed: round(arm[seed] - reference[seed], 4) for seed in seeds}
    return {"seeds": seeds, "per_seed": per_seed, **spread(list(per_seed.values()))}


def decide(differences: Sequence[float], tolerance: float) -> str:
    """``ahead``, ``behind``, ``tie`` or ``no verdict`` (one seed) for paired differences (see :data:`TIE_RULE`)."""
    differences = list(differences)
    if len(differences) < 2:
        return "no verdict"
    mean = statistics.fmean(differences)
    if all(d > 0 for d in differences) and mean > tolerance:
        return "ahead"
    if all(d < 0 for d in differences) and -mean > tolerance:
        return "behind"
    return "tie"


def paired_comparison(arm: Mapping[int, float], reference: Mapping[int, float]) -> dict[str, Any] | None:
    """Paired differences of ``arm`` against ``reference``, the seed spread they are judged against and the verdict."""
    paired = paired_differences(arm, reference)
    if paired is None:
        return None
    seeds = paired["seeds"]
    tolerance = max(spread([arm[s] for s in seeds])["range"], spread([reference[s] for s in seeds])["range"])
    return {**paired, "tolerance": tolerance, "verdict": decide(list(paired["per_seed"].values()), tolerance)}
