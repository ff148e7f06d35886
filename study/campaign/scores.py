"""One setting's scores from the committed harness records: read them, merge them per arm and seed, and summarise them
under the tie rule (what the campaign's record, its settings beyond the plain ViT and its convergence runs share)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from structinit_hf.benchmark.stats import paired_comparison, spread

from .sources import ALIASES, REFERENCES

__all__ = ["better_rates", "load_records", "merge_scores", "summarize_setting"]


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


def summarize_setting(
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


def load_records(root: Path, paths: Iterable[str]) -> tuple[list[dict[str, Any]], list[str]]:
    records, found = [], []
    for pattern in paths:
        for path in sorted(root.glob(pattern)):
            records.append(json.loads(path.read_text()))
            found.append(path.relative_to(root).as_posix())
    return records, found


def better_rates(
    settings: Sequence[Mapping[str, Any]], arms: Sequence[str]
) -> tuple[dict[str, dict[int, float]], dict[str, float]]:
    """Per arm, the seeds of the setting among ``settings`` (apart in the rate alone) where its mean over seeds is
    higher, and that setting's rate."""
    scores: dict[str, dict[int, float]] = {}
    rates: dict[str, float] = {}
    for name in arms:
        measured = [setting for setting in settings if name in setting["arms"]]
        if measured:
            better = max(measured, key=lambda setting: setting["arms"][name]["mean"])
            scores[name], rates[name] = dict(better["arms"][name]["per_seed"]), better["lr"]
    return scores, rates
