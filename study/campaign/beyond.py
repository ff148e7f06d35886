"""The campaign beyond the plain ViT on CIFAR-10: Swin and MLP-Mixer (issue 45), Fashion-MNIST (issue 47), and timm's
relative-position and rotary ViTs (issue 56).

Each setting is a set of harness records (one per seed and arm) trained in one recipe; a *grid* is two settings apart
in the learning rate alone, where each init is also judged at its better rate (the higher mean over seeds). Every
table pairs each init with its reference (timm's default init of the same network) on the seed, under the tie rule.
A setting on Fashion-MNIST names the CIFAR-10 setting it repeats, so the two datasets' findings sit side by side.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structinit_hf.benchmark.profiles import STOCK_MODELS

from .scores import better_rates, load_records, merge_scores, summarize_setting
from .sources import BENCH, LAYER_SCALE_OFF, WIDTH_SETTINGS

__all__ = ["BEYOND_GRIDS", "BEYOND_SETTINGS", "BeyondSetting", "build_beyond"]


@dataclass(frozen=True)
class BeyondSetting:
    """One table: its title, the records it reads (glob patterns under the repository root), its arms and reference,
    and the recipe every record must have been trained in (checked)."""

    title: str
    sources: tuple[str, ...]
    arms: tuple[str, ...]
    reference: str
    lr: float
    max_train_samples: int
    embed_dim: int | None = None  # the architecture's width, where the setting fixes one
    cifar10: str | None = None  # the same setting on CIFAR-10: a key of WIDTH_SETTINGS
    note: str = ""


SWIN_ARMS = ("swin-default", "swin-impulse3", "swin-mimetic", "swin-impulse3-mimeticvo")
MIXER_ARMS = ("mixer-default", "mixer-impulse3")
STOCK_ARMS = ("model-default", "model-impulse3", "model-mimetic")  # on a stock timm model (compare --model's arms)
VIT_ARMS = ("default", "mimetic", "impulse3", "v1")


def _records(profile: str, dataset: str = "cifar10") -> tuple[str]:
    return (f"{BENCH}/{profile}-{dataset}/**/results.json",)


BEYOND_SETTINGS: dict[str, BeyondSetting] = {
    "swin/0.001": BeyondSetting(
        "Swin (16 px CIFAR-10, patch 2, window 4, width 48, depths 8 + 8), lr 1e-3",
        _records("cpu-proxy-n2500-swin"),
        SWIN_ARMS,
        "swin-default",
        1e-3,
        2_500,
    ),
    "swin/0.0003": BeyondSetting(
        "Swin, lr 3e-4",
        _records("cpu-proxy-n2500-swin-lr3e-4"),
        SWIN_ARMS,
        "swin-default",
        3e-4,
        2_500,
    ),
    "mixer/0.001": BeyondSetting(
        "MLP-Mixer (16 px CIFAR-10, patch 2, width 64, 10 blocks, token MLP 128 wide), lr 1e-3",
        _records("cpu-proxy-n2500-mixer"),
        MIXER_ARMS,
        "mixer-default",
        1e-3,
        2_500,
    ),
    "mixer/0.0003": BeyondSetting(
        "MLP-Mixer, lr 3e-4",
        _records("cpu-proxy-n2500-mixer-lr3e-4"),
        MIXER_ARMS,
        "mixer-default",
        3e-4,
        2_500,
    ),
    "fashion_mnist/2500/48": BeyondSetting(
        "Fashion-MNIST, 2,500 images, width 48 (head dim 16), lr 1e-3",
        _records("cpu-proxy-n2500", "fashion_mnist"),
        VIT_ARMS[:3],
        "default",
        1e-3,
        2_500,
        48,
        cifar10="2500/48/0.001",
    ),
    "fashion_mnist/10000/48": BeyondSetting(
        "Fashion-MNIST, 10,000 images, width 48, lr 1e-3",
        _records("cpu-proxy-n10000", "fashion_mnist"),
        VIT_ARMS[:3],
        "default",
        1e-3,
        10_000,
        48,
    ),
    "fashion_mnist/2500/192": BeyondSetting(
        "Fashion-MNIST, 2,500 images, width 192 (head dim 64), lr 3e-4 (the width's rate)",
        _records("cpu-proxy-n2500-w192-lr3e-4", "fashion_mnist"),
        VIT_ARMS,
        "default",
        3e-4,
        2_500,
        192,
        cifar10="2500/192/0.0003",
    ),
}

# Swin and the Mixer on Fashion-MNIST (issue 60): compare's geometries, CIFAR-10's settings on the second dataset.
for _family, _arms in (("swin", SWIN_ARMS[:3]), ("mixer", MIXER_ARMS)):
    for _lr, _suffix in ((1e-3, ""), (3e-4, "-lr3e-4")):
        BEYOND_SETTINGS[f"{_family}/fashion_mnist/{_lr:g}"] = BeyondSetting(
            f"{'Swin' if _family == 'swin' else 'MLP-Mixer'} on Fashion-MNIST (the CIFAR-10 geometry), lr {_lr:g}",
            _records(f"cpu-proxy-n2500-{_family}{_suffix}", "fashion_mnist"),
            _arms,
            f"{_family}-default",
            _lr,
            2_500,
        )

# timm's own layer-scaled ViTs at the ViT proxy's geometry: the relative-position and rotary ViTs at two rates (issue
# 56), then issue 67's factorial at 1e-3 on them and DeiT-III: layer scale as timm builds it and off at init (-ls1),
# each init beside the impulse with mimetic V/O and the impulse opening its own attention branch
STOCK_NAMES = {"deit3": "DeiT-III", "relpos": "relative-position ViT", "rope": "rotary (RoPE) ViT"}
FACTORIAL_ARMS = (
    *STOCK_ARMS,
    "model-impulse3-mimeticvo",
    "model-impulse3-attnls0.1",
    "model-impulse3-attnls1",
    "model-impulse3-mimeticvo-attnls1",
)
LAYER_SCALE_OFF_ARMS = FACTORIAL_ARMS[:4]  # with every gamma at 1 the branch is open already
# DeiT-III takes the plain ViT's impulse, whose default value_init is mimetic already: its "+ mimetic V/O" arm would be
# its impulse arm again, so it is not run
WITHOUT_MIMETIC_VO = ("deit3",)
RATE_FAMILIES = ("relpos", "rope")  # the stock families also run at 3e-4
for _family, _what in STOCK_NAMES.items():
    _title = f"timm's {_what} ({STOCK_MODELS[_family]} at 16 px CIFAR-10, patch 2, width 48, depth 12)"
    BEYOND_SETTINGS[f"{_family}/0.001"] = BeyondSetting(
        f"{_title}, lr 1e-3", _records(f"cpu-proxy-n2500-{_family}"), FACTORIAL_ARMS, "model-default", 1e-3, 2_500
    )
    BEYOND_SETTINGS[f"{_family}/ls1"] = BeyondSetting(
        f"{_title}, layer scale off at init (init_values=1.0), lr 1e-3",
        _records(f"cpu-proxy-n2500-{_family}-ls1"),
        LAYER_SCALE_OFF_ARMS,
        "model-default",
        1e-3,
        2_500,
    )
    if _family in RATE_FAMILIES:
        BEYOND_SETTINGS[f"{_family}/0.0003"] = BeyondSetting(
            f"{_title}, lr 3e-4", _records(f"cpu-proxy-n2500-{_family}-lr3e-4"), STOCK_ARMS, "model-default", 3e-4,
            2_500,
        )  # fmt: skip

# does the rotary ViT's chosen impulse (mimetic V/O, attention scale 1) keep its lead at 50 epochs (issue 67, point 3)
BEYOND_SETTINGS["rope/50ep"] = BeyondSetting(
    f"timm's rotary (RoPE) ViT ({STOCK_MODELS['rope']} at the proxy's geometry), lr 1e-3, trained 50 epochs",
    _records("cpu-proxy-n2500-rope-long"),
    ("model-default", "model-impulse3-mimeticvo-attnls1"),
    "model-default",
    1e-3,
    2_500,
)

# Settings apart in the learning rate alone: each init at its better rate. "<family>" is CIFAR-10's grid.
BEYOND_GRIDS = {
    name: (f"{family}{dataset}/0.001", f"{family}{dataset}/0.0003")
    for family in ("swin", "mixer")
    for name, dataset in ((family, ""), (f"{family}, Fashion-MNIST", "/fashion_mnist"))
}
BEYOND_GRIDS.update({family: (f"{family}/0.001", f"{family}/0.0003") for family in RATE_FAMILIES})


def _check(path: str, record: Mapping[str, Any], setting: BeyondSetting) -> None:
    options = record["train_options"]
    recorded = (options["lr"], options.get("max_train_samples"), record["architecture"].get("embed_dim"))
    listed = (setting.lr, setting.max_train_samples, setting.embed_dim or recorded[2])
    if recorded != listed:
        raise ValueError(f"{path}: trained at (lr, images, width) {recorded}, listed under {listed}")


def build_beyond(root: Path | str, cifar10_width: Mapping[str, Any]) -> dict[str, Any]:
    """Per setting of :data:`BEYOND_SETTINGS`: summaries, verdicts against its reference, sources, wall time per run
    and, where it repeats a CIFAR-10 setting, that setting's comparisons; then each grid at the better rates."""
    root = Path(root)
    settings: dict[str, Any] = {}
    for key, setting in BEYOND_SETTINGS.items():
        records, found = load_records(root, setting.sources)
        for record, path in zip(records, found, strict=True):
            _check(path, record, setting)
        wall = [s for record in records for arm in record["arms"].values() for s in arm["wall_time_s"]]
        settings[key] = {
            "title": setting.title,
            "note": setting.note,
            "lr": setting.lr,
            "arms_listed": list(setting.arms),
            "reference": setting.reference,
            "sources": found,
            "wall_time_s_mean": statistics.fmean(wall) if wall else None,
            **summarize_setting(merge_scores(records), setting.arms, (setting.reference,)),
        }
        if setting.cifar10 is not None:
            assert setting.cifar10 in WIDTH_SETTINGS, setting.cifar10
            settings[key]["cifar10"] = {"setting": setting.cifar10, "vs": cifar10_width[setting.cifar10]["vs"]}
    grids = {}
    factorial = {family: _factorial(root, family) for family in STOCK_NAMES}
    for name, keys in BEYOND_GRIDS.items():
        arms, reference = BEYOND_SETTINGS[keys[0]].arms, BEYOND_SETTINGS[keys[0]].reference
        scores, rates = better_rates([settings[k] for k in keys], arms)
        grids[name] = {"settings": list(keys), "rates": rates, **summarize_setting(scores, arms, (reference,))}
    return {"settings": settings, "grids": grids, "factorial": factorial}


def _layer_scales(records: list[Mapping[str, Any]]) -> dict[str, float | None]:
    """Each arm's starting attention layer scale, as its records read it from the built model (one value an arm)."""
    scales: dict[str, set] = {}
    for record in records:
        for name, arm in record["arms"].items():
            if "attention_layer_scale" not in arm:
                raise ValueError(f"{name}: a factorial record without the gamma its model started with")
            scales.setdefault(name, set()).add(arm["attention_layer_scale"])
    if any(len(values) > 1 for values in scales.values()):
        raise ValueError(f"an arm started from two layer scales: {scales}")
    return {name: values.pop() for name, values in scales.items()}


def _factorial(root: Path, family: str) -> dict[str, Any]:
    """Issue 67's factorial on one layer-scaled family: every (layer scale, init) cell against timm's default as timm
    builds it, paired on the seed, with the gamma each cell's model started with."""
    built, built_paths = load_records(root, BEYOND_SETTINGS[f"{family}/0.001"].sources)
    off, off_paths = load_records(root, BEYOND_SETTINGS[f"{family}/ls1"].sources)
    scores = merge_scores(built)
    scores.update({LAYER_SCALE_OFF + name: per_seed for name, per_seed in merge_scores(off).items()})
    gammas = _layer_scales(built)
    gammas.update({LAYER_SCALE_OFF + name: gamma for name, gamma in _layer_scales(off).items()})
    cells = [*FACTORIAL_ARMS, *(LAYER_SCALE_OFF + name for name in LAYER_SCALE_OFF_ARMS)]
    if family in WITHOUT_MIMETIC_VO:
        cells = [name for name in cells if "mimeticvo" not in name]
    return {
        "model": STOCK_MODELS[family],
        "name": STOCK_NAMES[family],
        "note": 'Its impulse is the plain ViT\'s, which writes mimetic V/O by default: no separate "+ mimetic V/O" '
        "cells."
        if family in WITHOUT_MIMETIC_VO
        else "",
        "cells": cells,
        "gamma": gammas,
        "sources": built_paths + off_paths,
        **summarize_setting(scores, cells, ("model-default", LAYER_SCALE_OFF + "model-default")),
    }
