"""What the campaign reads: the committed ``results.json`` files of each setting (glob patterns under the repository
root) and the arms each table shows."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ALIASES",
    "AUGMENT_SIZE",
    "BENCH",
    "GPU_RECORDS",
    "HEADS",
    "LAYER_SCALE_OFF",
    "LENGTH_SIZE",
    "LENGTH_SOURCES",
    "MAIN_ARMS",
    "RATE_GRIDS",
    "RECIPE_KEYS",
    "REFERENCES",
    "REGIMES",
    "REGIME_REFERENCE",
    "RERUN_SOURCES",
    "SIZE_ARMS",
    "SIZE_SOURCES",
    "SIZE_TABLE_ARMS",
    "WIDTH_ARMS",
    "WIDTH_LENGTHS",
    "WIDTH_REFERENCES",
    "WIDTH_SETTINGS",
    "WidthSetting",
]

BENCH = "study/records/small_data"


# Training-set size -> the records holding cpu-proxy-family runs at that size (10 epochs each), as glob patterns under
# the repository root. 25,000 is cpu-proxy: seeds 0 and 1 from its own records, later seeds and arms
# from the campaign's, one folder per batch of runs (seed2-<arm>/, seed<k>/).
SIZE_SOURCES: dict[int, tuple[str, ...]] = {
    2_500: (f"{BENCH}/cpu-proxy-n2500-cifar10/results.json", f"{BENCH}/cpu-proxy-n2500-cifar10/seed*/results.json"),
    5_000: (f"{BENCH}/cpu-proxy-n5000-cifar10/results.json", f"{BENCH}/cpu-proxy-n5000-cifar10/seed*/results.json"),
    25_000: (
        f"{BENCH}/cpu-proxy-cifar10/results.json",
        f"{BENCH}/cpu-proxy-cifar10/one-seed/results.json",
        f"{BENCH}/cpu-proxy-cifar10/seed*/results.json",
    ),
}


LENGTH_SIZE = 2_500


LENGTH_SOURCES: dict[int, tuple[str, ...]] = {  # epochs -> records at LENGTH_SIZE images
    10: (f"{BENCH}/cpu-proxy-n2500-cifar10/results.json",),
    50: (f"{BENCH}/cpu-proxy-n2500-long-cifar10/seed*/results.json",),
}


# Augmentation regimes at AUGMENT_SIZE images (10 epochs, everything else the size table's): key -> (label, records).
# Crop + flip is the size table's own setting at that size, read from the same records.
AUGMENT_SIZE = 5_000


REGIMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "crop-flip": ("crop + flip", SIZE_SOURCES[AUGMENT_SIZE]),
    "randaug": ("RandAugment m9", (f"{BENCH}/cpu-proxy-n5000-randaug-cifar10/seed*/results.json",)),
    "mixcut": ("Mixup 0.8 + CutMix 1.0", (f"{BENCH}/cpu-proxy-n5000-mixcut-cifar10/seed*/results.json",)),
}


REGIME_REFERENCE = "crop-flip"


# The reference regime's runs trained again (same command, another runs folder, for their checkpoints): how far a
# repeat of an identical run lands from the committed one.
RERUN_SOURCES = (f"{BENCH}/cpu-proxy-n5000-rerun-cifar10/seed*/results.json",)


RECIPE_KEYS = ("aa", "mixup", "cutmix", "hflip", "scale")  # the recorded train options that tell the regimes apart


# The shift 3x3 runs made before `shift` became impulse3's default were recorded under this arm name (same settings).
LAYER_SCALE_OFF = "layer scale off: "  # issue 67's factorial: the prefix of a cell trained with every gamma at 1


ALIASES = {"impulse3-shift": "impulse3"}


SIZE_ARMS = ("default", "mimetic", "impulse3")


SIZE_TABLE_ARMS = (*SIZE_ARMS, "convit")  # the rows of the 2,500 and 5,000 tables: the inits, then ConViT beside them


MAIN_ARMS = ("default", "mimetic", "impulse3", "impulse5", "v1", "v2", "kaiming", "convit", "impulse5-svd")


REFERENCES = ("default", "mimetic")


# The width axis: the cpu-proxy at width 48, 96 and 192 in HEADS heads (head dimension 16, 32, 64, the last the
# paper's ViT-Tiny head), at the learning rate and warm-up each setting names. Records are every results.json under
# the setting's folders (one per seed and arm, or per batch of runs); a run in two records must carry the same figure.
# The runs of a lent GPU (fp32, eager, like the CPU's) sit under GPU_RECORDS; each table says where each seed ran.
GPU_RECORDS = "study/records/width/gpu"
CPU_RERUNS = "study/records/width/cpu"  # the CPU's runs of settings whose records came from a lent GPU


def _on_either_device(profile: str) -> tuple[str, str]:
    """The records of ``profile``'s width runs, wherever they trained: this CPU's, then a lent GPU's."""
    return f"{BENCH}/{profile}-cifar10/**/results.json", f"{GPU_RECORDS}/{profile}-cifar10/**/results.json"


@dataclass(frozen=True)
class WidthSetting:
    """One row group of the width section: the setting its records must have been trained in, and where they are."""

    images: int
    width: int
    lr: float
    sources: tuple[str, ...]
    warmup_epochs: float = 1.0
    epochs: int = 10
    note: str = ""  # what the setting is for, printed under its title


WIDTH_SETTINGS: dict[str, WidthSetting] = {
    "2500/48/0.001": WidthSetting(2_500, 48, 1e-3, (f"{BENCH}/cpu-proxy-n2500-cifar10/results.json",)),
    "2500/96/0.001": WidthSetting(
        2_500,
        96,
        1e-3,
        _on_either_device("cpu-proxy-n2500-w96"),
        note="The shared rate: `shift` trains slowly and unsteadily.",
    ),
    "2500/96/0.0003": WidthSetting(
        2_500,
        96,
        3e-4,
        _on_either_device("cpu-proxy-n2500-w96-lr3e-4"),
        note="The proxy recipe's rate from head dimension 32 (`profiles.proxy_lr`).",
    ),
    "2500/192/0.001": WidthSetting(
        2_500,
        192,
        1e-3,
        (f"{BENCH}/cpu-proxy-n2500-w192-cifar10/**/results.json",),
        note="The shared rate: mimetic and `shift` reach it after about 10 warm-up steps and sit near chance loss for "
        "epochs.",
    ),
    "2500/192/0.001/gpu": WidthSetting(
        2_500,
        192,
        1e-3,
        (f"{GPU_RECORDS}/cpu-proxy-n2500-w192-cifar10/**/results.json",),
        note="The same runs trained again on a lent GPU (fp32, eager): how far identical runs land apart on two "
        "devices.",
    ),
    "2500/192/0.0003": WidthSetting(
        2_500,
        192,
        3e-4,
        _on_either_device("cpu-proxy-n2500-w192-lr3e-4"),
        note="The proxy recipe's rate from head dimension 32 (`profiles.proxy_lr`): every init trains.",
    ),
    "2500/192/0.0003/cpu": WidthSetting(
        2_500,
        192,
        3e-4,
        (f"{CPU_RERUNS}/cpu-proxy-n2500-w192-lr3e-4-cifar10/**/results.json",),
        note="Seed 0 of the GPU's runs above trained again on the CPU, the device of the 50-epoch runs: how far "
        "identical runs land apart on two devices at the width's rate.",
    ),
    "2500/192/0.001/warmup5": WidthSetting(
        2_500,
        192,
        1e-3,
        (f"{BENCH}/cpu-proxy-n2500-w192-warmup5-cifar10/**/results.json",),
        warmup_epochs=5.0,
        note="The shared rate reached after about 50 warm-up steps instead of 10.",
    ),
    "2500/192/0.0003/50ep": WidthSetting(
        2_500,
        192,
        3e-4,
        _on_either_device("cpu-proxy-n2500-long-w192-lr3e-4"),
        epochs=50,
        note="The proxy recipe's rate trained 5x as long; mimetic at one seed: a trend, not a verdict.",
    ),
    "5000/192/0.001": WidthSetting(
        5_000,
        192,
        1e-3,
        (f"{BENCH}/cpu-proxy-n5000-w192-cifar10/**/results.json",),
        note="timm's default at its better rate of width 192 at 2,500 images.",
    ),
    "5000/192/0.0003": WidthSetting(
        5_000, 192, 3e-4, (f"{BENCH}/cpu-proxy-n5000-w192-lr3e-4-cifar10/**/results.json",)
    ),
}

# Per width, the settings that differ only in the peak learning rate: each init is also judged at its better rate.
RATE_GRIDS = {
    "2500/96": ("2500/96/0.001", "2500/96/0.0003"),
    "2500/192": ("2500/192/0.001", "2500/192/0.0003"),
    "5000/192": ("5000/192/0.001", "5000/192/0.0003"),
}

# Per width, a setting and the same setting trained longer: each init's gain from the epochs, paired on the seed.
WIDTH_LENGTHS = {"2500/192/0.0003": ("2500/192/0.0003/cpu", "2500/192/0.0003/50ep")}  # on one device

WIDTH_ARMS = ("default", "mimetic", "impulse3", "v1", "v2")

WIDTH_REFERENCES = ("default", "impulse3")  # timm's default, and `shift` (the library's default init)

HEADS = 3  # the heads of every width setting
