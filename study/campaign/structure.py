"""Is it the structure? Each init against its norm-matched control, the relative-position ViT's cells, and mimetic MLP
init, read from the committed harness records (trains nothing).

A *cell* is one profile and dataset: its records, timm's default arm there, and the pairs it compares. Every pair is
judged seed by seed under the tie rule (:data:`structinit_hf.benchmark.stats.TIE_RULE`); an init's gain is the
structure's when it is ahead of its own norm-matched control (:func:`structure_verdict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structinit_hf.benchmark.arms import arm_label
from structinit_hf.benchmark.stats import TIE_RULE, paired_comparison, spread

from .scores import load_records, merge_scores
from .sources import BENCH

__all__ = ["CELLS", "Cell", "build_structure", "render_structure", "structure_verdict"]

WIDTH = "study/records/width"


@dataclass(frozen=True)
class Cell:
    """One setting: its title, record globs, timm's default arm, ``(init, control)`` pairs (``control`` a
    norm-matched arm), ``(arm, reference)`` comparisons beyond timm's default, and further arms it shows."""

    group: str
    title: str
    sources: tuple[str, ...]
    default: str
    controls: tuple[tuple[str, str], ...] = ()
    versus: tuple[tuple[str, str], ...] = ()
    note: str = ""
    shown: tuple[str, ...] = ()  # further arms the table lists against timm's default
    borrowed: tuple[tuple[str, str, str], ...] = ()  # (another cell's record folder, its arm, the name it takes here)


def _in(folder: str, root: str = BENCH) -> tuple[str, ...]:
    return (f"{root}/{folder}/results.json", f"{root}/{folder}/seed*-*/results.json")


def _relpos_variant(suffix: str, what: str, shown: tuple[str, ...]) -> Cell:
    """The relative-position ViT's ``-<suffix>`` profile: its arms against its own timm default, and that default
    against the family's as timm builds it (borrowed from the base profile's records)."""
    return Cell(
        "relpos",
        f"relative-position ViT {what}",
        _in(f"cpu-proxy-n2500-relpos-{suffix}-cifar10"),
        "model-default",
        versus=(("model-default", _AS_BUILT),),
        shown=shown,
        borrowed=(("cpu-proxy-n2500-relpos-cifar10", "model-default", _AS_BUILT),),
    )


_PLAIN = (("impulse3", "impulse3-normmatched"), ("mimetic", "mimetic-normmatched"))
_AS_BUILT = "timm's default of the family as timm builds it"
_MODEL = "model-impulse3"
CELLS: tuple[Cell, ...] = (
    Cell("control", "ViT width 48, CIFAR-10", _in("cpu-proxy-n2500-cifar10"), "default", _PLAIN),
    Cell("control", "ViT width 48, Fashion-MNIST", _in("cpu-proxy-n2500-fashion_mnist"), "default", _PLAIN),
    Cell(
        "control",
        "ViT width 192, lr 3e-4, CIFAR-10",
        (*_in("cpu-proxy-n2500-w192-lr3e-4-cifar10"), *_in("cpu/cpu-proxy-n2500-w192-lr3e-4-cifar10", WIDTH)),
        "default",
        _PLAIN,
        note="CPU runs only (seeds 1-2 of the committed impulse and default ran on a GPU: study/records/width/gpu)",
    ),
    Cell(
        "control",
        "DeiT-III (impulse with the attention layer scale at 1)",
        _in("cpu-proxy-n2500-deit3-cifar10"),
        "model-default",
        ((f"{_MODEL}-attnls1", f"{_MODEL}-attnls1-normmatched"), ("model-mimetic", "model-mimetic-normmatched")),
    ),
    Cell(
        "control",
        "RoPE ViT (impulse with mimetic V/O and the attention layer scale at 1)",
        _in("cpu-proxy-n2500-rope-cifar10"),
        "model-default",
        (
            (f"{_MODEL}-mimeticvo-attnls1", f"{_MODEL}-mimeticvo-attnls1-normmatched"),
            ("model-mimetic", "model-mimetic-normmatched"),
        ),
    ),
    Cell(
        "control",
        "RoPE ViT, 50 epochs (impulse with mimetic V/O and the attention layer scale at 1)",
        _in("cpu-proxy-n2500-rope-long-cifar10"),
        "model-default",
        ((f"{_MODEL}-mimeticvo-attnls1", f"{_MODEL}-mimeticvo-attnls1-normmatched"),),
    ),
    Cell(
        "relpos",
        "relative-position ViT as timm builds it (weight_init='reset', bias MLP, layer scale 1e-6)",
        _in("cpu-proxy-n2500-relpos-cifar10"),
        "model-default",
        ((_MODEL, f"{_MODEL}-normmatched"),),
        ((f"{_MODEL}-sharp0.3", _MODEL), (f"{_MODEL}-sharp0.9", _MODEL), ("model-mimetic", _MODEL)),
    ),
    _relpos_variant("tn", "built with timm's ViT init (trunc normal 0.02)", (_MODEL, "model-mimetic")),
    _relpos_variant("bias", "with a bias table (rel_pos_type='bias')", (_MODEL,)),
    _relpos_variant("cls", "with a class token (class_token=True, global_pool='token')", (_MODEL,)),
    Cell(
        "relpos",
        "relative-position ViT with layer scale off at init (init_values=1)",
        _in("cpu-proxy-n2500-relpos-ls1-cifar10"),
        "model-default",
        shown=(_MODEL, f"{_MODEL}-mimeticvo", "model-mimetic"),
    ),
    Cell(
        "mlp",
        "ViT width 48, CIFAR-10",
        _in("cpu-proxy-n2500-cifar10"),
        "default",
        versus=(
            ("default-mlpmimetic", "default"),
            ("impulse3-mlpmimetic", "impulse3"),
            ("mimetic-mlpmimetic", "mimetic"),
        ),
    ),
    Cell(
        "mlp",
        "ViT width 192, lr 3e-4, CIFAR-10",
        (*_in("cpu-proxy-n2500-w192-lr3e-4-cifar10"), *_in("cpu/cpu-proxy-n2500-w192-lr3e-4-cifar10", WIDTH)),
        "default",
        versus=(
            ("default-mlpmimetic", "default"),
            ("impulse3-mlpmimetic", "impulse3"),
            ("mimetic-mlpmimetic", "mimetic"),
        ),
        note="CPU runs only",
    ),
    Cell(
        "mlp",
        "DeiT-III",
        _in("cpu-proxy-n2500-deit3-cifar10"),
        "model-default",
        versus=(
            ("model-default-mlpmimetic", "model-default"),
            (f"{_MODEL}-attnls1-mlpmimetic", f"{_MODEL}-attnls1"),
            ("model-mimetic-mlpmimetic", "model-mimetic"),
        ),
    ),
)


def structure_verdict(init_vs_control: Mapping[str, Any] | None, control_vs_default: Mapping[str, Any] | None) -> str:
    """Whose is an init's gain: ``"the structure's"`` (ahead of its norm-matched control under the tie rule),
    ``"partly the structure's"`` (higher than the control on every seed, within the spread), ``"the scale's"`` (the
    control alone is ahead of timm's default, the init not ahead of it), else ``"not separated"``."""
    if init_vs_control is None or init_vs_control["n"] < 2:
        return "no verdict"
    if init_vs_control["verdict"] == "ahead":
        return "the structure's"
    if all(d > 0 for d in init_vs_control["per_seed"].values()):
        return "partly the structure's"
    if control_vs_default is not None and control_vs_default["verdict"] == "ahead":
        return "the scale's"
    return "not separated"


def _cell(cell: Cell, root: Path) -> dict[str, Any]:
    records, found = load_records(root, cell.sources)
    scores = merge_scores(records)
    for folder, arm, name in cell.borrowed:
        borrowed, sources = load_records(root, _in(folder))
        scores[name], found = merge_scores(borrowed).get(arm, {}), found + sources
    arms = [cell.default, *cell.shown, *{a for pair in (*cell.controls, *cell.versus) for a in pair}]
    out: dict[str, Any] = {
        "group": cell.group,
        "title": cell.title,
        "note": cell.note,
        "sources": found,
        "arms": {
            name: {"per_seed": scores[name], **spread(list(scores[name].values()))}
            for name in sorted(set(arms))
            if scores.get(name)
        },
        "vs_default": {
            name: paired_comparison(scores[name], scores[cell.default])
            for name in sorted(set(arms) - {cell.default})
            if scores.get(name) and scores.get(cell.default)
        },
        "controls": {},
        "versus": {},
    }
    for init, control in cell.controls:
        if scores.get(init) and scores.get(control):
            paired = paired_comparison(scores[init], scores[control])
            out["controls"][init] = {
                "control": control,
                "init_minus_control": paired,
                "verdict": structure_verdict(paired, out["vs_default"].get(control)),
            }
    for arm, reference in cell.versus:
        if scores.get(arm) and scores.get(reference):
            out["versus"][f"{arm} vs {reference}"] = paired_comparison(scores[arm], scores[reference])
    return out


def build_structure(root: Path | str = ".") -> dict[str, Any]:
    """Every cell of :data:`CELLS` from the records under ``root``."""
    return {"tie_rule": TIE_RULE, "cells": [_cell(cell, Path(root)) for cell in CELLS]}


def _pm(c: Mapping[str, Any] | None) -> str:
    if c is None:
        return "–"
    seeds = ", ".join(f"{d:+.2f}" for d in c["per_seed"].values())
    return f"{c['mean']:+.2f} ± {c['std']:.2f} ({seeds}; spread {c['tolerance']:.2f}): {c['verdict']}"


def render_structure(record: Mapping[str, Any]) -> str:
    """``results.md``: a table per group of cells."""
    lines = ["# Is it the structure?", "", "Written by `python study/structure_report.py` from the committed records; "
             "trains nothing. " + record["tie_rule"], ""]  # fmt: skip
    heads = {
        "control": "## Each init against its norm-matched control (every tensor it writes redrawn at its norms)",
        "relpos": "## The relative-position ViT",
        "mlp": "## Mimetic MLP init (a nonzero mean in each block MLP's first layer)",
    }
    for group, head in heads.items():
        lines += [head, ""]
        for cell in (c for c in record["cells"] if c["group"] == group):
            lines += [f"### {cell['title']}", ""]
            if cell["note"]:
                lines += [cell["note"], ""]
            lines += ["| arm | top-1 per seed | minus timm's default (paired) |", "|---|---|---|"]
            for name, arm in cell["arms"].items():
                per_seed = ", ".join(f"{v:.2f}" for v in arm["per_seed"].values())
                lines.append(f"| {arm_label(name)} | {per_seed} | {_pm(cell['vs_default'].get(name))} |")
            if cell["controls"]:
                lines += ["", "| init | minus its norm-matched control (paired) | whose gain |", "|---|---|---|"]
                for init, c in cell["controls"].items():
                    lines.append(f"| {arm_label(init)} | {_pm(c['init_minus_control'])} | {c['verdict']} |")
            if cell["versus"]:
                lines += ["", "| comparison | paired difference |", "|---|---|"]
                for name, c in cell["versus"].items():
                    arm, reference = name.split(" vs ")
                    lines.append(f"| {arm_label(arm)} minus {arm_label(reference)} | {_pm(c)} |")
            lines += ["", "Sources: " + ", ".join(f"`{s}`" for s in cell["sources"]), ""]
    return "\n".join(lines)
