"""The study's profiles: compare's (:mod:`structinit_hf.benchmark.profiles`) and the campaign's own.

Every profile the small-data harness (``python study/benchmark_small_data.py --profile NAME``) trains: the paper's
setting, the CPU profiles, the campaign's sizes, augmentation regimes, epochs, widths, the Swin and Mixer
proxies at 3e-4, and timm's relative-position and rotary ViTs at the proxy's geometry (both rates). Each profile's
``notes`` say what it is; docs/benchmarks.md says how each was sized and what its runs found.
"""

from __future__ import annotations

from dataclasses import replace

from structinit_hf.benchmark.profiles import (
    MIXER_PROXY,
    STOCK_MODELS,
    SWIN_PROXY,
    BenchmarkDataset,
    Profile,
    family_proxy,
    proxy_lr,
)
from structinit_hf.benchmark.profiles import PROFILES as COMPARE_PROFILES

__all__ = ["PROFILES"]

PROFILES: dict[str, Profile] = dict(COMPARE_PROFILES)


PROFILES["cpu"] = Profile(
    name="cpu",
    datasets={"cifar10-small": BenchmarkDataset("cifar10-small", None, "cifar10", "uoft-cs/cifar10", local=True)},
    architecture={"img_size": 32, "patch_size": 4, "depth": 6},
    recipe={"epochs": 8, "batch_size": 64, "warmup_epochs": 1, "keep_checkpoints": 1},
    seeds=(0, 1),
    table_epochs=(2, 4),
    jobs=2,
    notes="Sized for a 2-core CPU: ViT-Tiny width (dim 192, 3 heads) with patch 4 (8 x 8 tokens at 32 px) and 6 "
    "blocks instead of patch 2 and 12, 8 epochs of 4,194 training images (466 held out for validation), batch 64 "
    "with 1 warm-up epoch; the rest is the paper's recipe (AdamW lr 1e-3, wd 0.01, RandAugment m9, label "
    "smoothing 0.1, clip 3). Two runs at a time, one thread each.",
)


PROFILES["cifar10"] = Profile(
    name="cifar10",
    datasets={"cifar10": BenchmarkDataset("cifar10", None, "cifar10", "uoft-cs/cifar10", local=True)},
    architecture={"img_size": 32, "patch_size": 2, "depth": 12},
    recipe={"epochs": 20, "batch_size": 512, "warmup_epochs": 1, "keep_checkpoints": 1, "val_split": 0.02},
    seeds=(0, 1),
    table_epochs=(5, 10),
    jobs=4,
    notes="For one GPU: the paper's architecture (ViT-Tiny, 32 px, patch 2, 12 blocks) on full CIFAR-10 (a local "
    "copy in data/cifar10), 20 epochs, batch 512, 1 warm-up epoch, the rest of train.py's recipe, with train.py's "
    "GPU defaults (bf16 autocast, compile). Four runs share the GPU at a time.",
)


PROFILES["paper"] = Profile(
    name="paper",
    datasets={
        "cifar10": BenchmarkDataset("uoft-cs/cifar10", None, "cifar10"),
        "cifar100": BenchmarkDataset("uoft-cs/cifar100", None, "cifar100"),
        "svhn": BenchmarkDataset("ufldl-stanford/svhn", "cropped_digits", "svhn"),
    },
    architecture={"img_size": 32, "patch_size": 2, "depth": 12},
    recipe={"epochs": 200, "batch_size": 512, "workers": 4, "keep_checkpoints": 1},
    seeds=(0, 1, 2),
    table_epochs=(50, 100),
    jobs=1,
    notes="The paper's setting: ViT-Tiny (dim 192, 12 blocks, 3 heads), 32 px, patch 2, 200 epochs, batch 512, "
    "AdamW lr 1e-3 wd 0.01 eps 1e-3, cosine with 10 warm-up epochs, RandAugment m9, label smoothing 0.1, "
    "clip 3; one run at a time on the full dataset from the Hub.",
)


PROFILES["cpu-proxy-eps1e-3"] = replace(
    PROFILES["cpu-proxy"],
    name="cpu-proxy-eps1e-3",
    recipe={flag: value for flag, value in PROFILES["cpu-proxy"].recipe.items() if flag != "opt_eps"},
    notes="cpu-proxy at train.py's AdamW eps 1e-3 (the paper's recipe) instead of PyTorch's 1e-8; only the eps "
    "differs.",
)


PROFILES["cpu-proxy-eps1e-3-short"] = replace(
    PROFILES["cpu-proxy-eps1e-3"],
    name="cpu-proxy-eps1e-3-short",
    recipe={  # random-resized crops of any aspect (train.py's default ratio)
        **{flag: value for flag, value in PROFILES["cpu-proxy-eps1e-3"].recipe.items() if flag != "ratio"},
        **{"epochs": 6, "max_train_samples": 20_000, "scale": (0.35, 1.0)},
    },
    table_epochs=(2, 4),
    notes="cpu-proxy-eps1e-3 cut to 6 epochs of 20,000 images (468 steps) with random-resized crops of any aspect "
    "(area 35-100%).",
)


PROFILES["cpu-proxy-n5000"] = replace(
    PROFILES["cpu-proxy"],
    name="cpu-proxy-n5000",
    recipe={**PROFILES["cpu-proxy"].recipe, "max_train_samples": 5_000},
    notes="cpu-proxy on 5,000 training images: the same 10 epochs, batch 256 and 1 warm-up epoch (about 20 steps "
    "an epoch, 200 in all). The middle size of the campaign's data-size comparison.",
)


PROFILES["cpu-proxy-n10000"] = replace(
    PROFILES["cpu-proxy"],
    name="cpu-proxy-n10000",
    recipe={**PROFILES["cpu-proxy"].recipe, "max_train_samples": 10_000},
    notes="cpu-proxy on 10,000 training images: the same 10 epochs, batch 256 and 1 warm-up epoch (about 40 steps "
    "an epoch, 400 in all). Fashion-MNIST's larger size (issue 47).",
)


PROFILES["cpu-proxy-n5000-randaug"] = replace(
    PROFILES["cpu-proxy-n5000"],
    name="cpu-proxy-n5000-randaug",
    recipe={**PROFILES["cpu-proxy-n5000"].recipe, "aa": "rand-m9-mstd0.5"},
    notes="cpu-proxy-n5000 with RandAugment m9 (timm's rand-m9-mstd0.5, the paper's v1 recipe) on top of the "
    "square crops and flip. Only the augmentation differs from cpu-proxy-n5000: the campaign's augmentation "
    "comparison at 5,000 images.",
)


PROFILES["cpu-proxy-n5000-mixcut"] = replace(
    PROFILES["cpu-proxy-n5000"],
    name="cpu-proxy-n5000-mixcut",
    recipe={**PROFILES["cpu-proxy-n5000"].recipe, "mixup": 0.8, "cutmix": 1.0},
    notes="cpu-proxy-n5000 with Mixup 0.8 and CutMix 1.0 (the paper's v2 recipe; timm's Mixup switches between the "
    "two per batch, with label smoothing 0.1 on the mixed targets) on top of the square crops and flip. Only the "
    "augmentation differs from cpu-proxy-n5000: the campaign's augmentation comparison at 5,000 images.",
)


PROFILES["cpu-proxy-n2500-long"] = replace(
    PROFILES["cpu-proxy-n2500"],
    name="cpu-proxy-n2500-long",
    recipe={**PROFILES["cpu-proxy-n2500"].recipe, "epochs": 50},
    table_epochs=(10, 25),
    notes="cpu-proxy-n2500 trained 5x as long: 50 epochs of the same 2,500 images (about 500 steps), still 1 "
    "warm-up epoch, then cosine over the 50. Only the epoch count differs from cpu-proxy-n2500: the campaign's "
    "10-against-50-epoch comparison.",
)


PROFILES["cpu-proxy-n2500-long200"] = replace(
    PROFILES["cpu-proxy-n2500-long"],
    name="cpu-proxy-n2500-long200",
    recipe={**PROFILES["cpu-proxy-n2500"].recipe, "epochs": 200},
    table_epochs=(10, 50, 100),
    notes="cpu-proxy-n2500 trained to convergence: 200 epochs of the same 2,500 images (about 2,000 steps; the "
    "paper's schedule length), still 1 warm-up epoch as cpu-proxy-n2500-long, then cosine over the 200. Only the "
    "epoch count differs from cpu-proxy-n2500: does the gain at 10 and 50 epochs last (issue 55)?",
)


# the Swin and Mixer proxies at 3e-4 (compare trains them at the proxy's rate)
for _family, _architecture in (("swin", SWIN_PROXY), ("mixer", MIXER_PROXY)):
    _profile = family_proxy(_family, _architecture, 3e-4)
    PROFILES[_profile.name] = _profile


# timm's own relative-position and rotary ViTs at the ViT proxy's geometry, both rates (issue 56): the model-* arms
for _family in STOCK_MODELS:
    for _lr in (1e-3, 3e-4):
        _profile = family_proxy(_family, PROFILES["cpu-proxy-n2500"].architecture, _lr)
        PROFILES[_profile.name] = _profile


# the layer-scale factorial (issue 67): each layer-scaled family with its layer scale off at init, every gamma 1
# (init_values=1.0; not None, which timm.create_model drops, nor 0, which closes the rotary ViT's branches)
for _family in STOCK_MODELS:
    _base = PROFILES[f"cpu-proxy-n2500-{_family}"]
    PROFILES[f"{_base.name}-ls1"] = replace(
        _base,
        name=f"{_base.name}-ls1",
        architecture={**_base.architecture, "init_values": 1.0},
        notes=_base.notes + " Layer scale off at init (init_values=1.0: every block's gamma starts at 1, the block as "
        "without layer scale); only that differs.",
    )


# does the rotary ViT's chosen impulse (mimetic V/O, attention scale opened) keep its lead trained 5x as long (issue 67)
PROFILES["cpu-proxy-n2500-rope-long"] = replace(
    PROFILES["cpu-proxy-n2500-rope"],
    name="cpu-proxy-n2500-rope-long",
    recipe={**PROFILES["cpu-proxy-n2500-rope"].recipe, "epochs": 50},
    table_epochs=(10, 25),
    notes=PROFILES["cpu-proxy-n2500-rope"].notes + " Trained 5x as long: 50 epochs, still 1 warm-up epoch, then cosine "
    "over the 50; only the epoch count differs.",
)


# why does the impulse trail on the relative-position ViT (issue 73)? Its base init: timm builds vit_relpos_* with
# weight_init='reset' (PyTorch's Linear default, not the plain ViT's trunc normal 0.02): "-tn" builds it with timm's
# ViT init (weight_init=''); its relative term: an MLP over log-spaced offsets by default, "-bias" a table (timm's
# rel_pos_type='bias'); "-cls" with a class token, the rows and column the bias leaves at 0
for _suffix, _args, _what in (
    ("tn", {"weight_init": ""}, "built with timm's ViT init (weight_init='': trunc normal 0.02) instead of 'reset'"),
    ("bias", {"rel_pos_type": "bias"}, "with a relative position bias table (rel_pos_type='bias') instead of the MLP"),
    ("cls", {"class_token": True, "global_pool": "token"}, "with a class token read by the head (as timm's _cls "
     "variants: the relative bias padded with 0 in the class token's row and column)"),
):
    _base = PROFILES["cpu-proxy-n2500-relpos"]
    PROFILES[f"{_base.name}-{_suffix}"] = replace(
        _base,
        name=f"{_base.name}-{_suffix}",
        architecture={**_base.architecture, **_args},
        notes=_base.notes + f" The family {_what}; only that differs.",
    )


def _wider(parent: str, width: int, lr: float | None = None) -> Profile:
    """``parent`` at another width (``embed_dim``), still 3 heads: head dimension ``width // 3``, at the peak learning
    rate of that head dimension (:func:`proxy_lr`) unless ``lr`` is given."""
    base = PROFILES[parent]
    lr = proxy_lr(width // 3) if lr is None else lr
    shared = lr == base.recipe["lr"]
    return replace(
        base,
        name=f"{parent}-w{width}" + ("" if shared else f"-lr{lr:.0e}".replace("e-0", "e-")),
        architecture={**base.architecture, "embed_dim": width},
        recipe=base.recipe if shared else {**base.recipe, "lr": lr},
        notes=f"{parent} at width {width} (3 heads of {width // 3})"
        + ("" if shared else f" and peak learning rate {lr:g}")
        + "; nothing else differs. The campaign's width axis: head dimension 16 (width 48) -> 32 -> 64, the paper's "
        "ViT-Tiny head.",
    )


for _profile in (
    _wider("cpu-proxy-n2500", 96, lr=1e-3),  # the shared rate, where `shift` trains slowly: kept as its record
    _wider("cpu-proxy-n2500", 96),
    _wider("cpu-proxy-n2500", 192, lr=1e-3),  # the shared rate at which mimetic and `shift` stall: kept as its record
    _wider("cpu-proxy-n2500", 192),
    _wider("cpu-proxy-n5000", 192, lr=1e-3),  # timm's default's better rate at width 192: its side of the rate grid
    _wider("cpu-proxy-n5000", 192),
    _wider("cpu-proxy-n2500-long", 192),
):
    PROFILES[_profile.name] = _profile


PROFILES["cpu-proxy-n2500-w192-warmup5"] = replace(
    PROFILES["cpu-proxy-n2500-w192"],
    name="cpu-proxy-n2500-w192-warmup5",
    recipe={**PROFILES["cpu-proxy-n2500-w192"].recipe, "warmup_epochs": 5},
    notes="cpu-proxy-n2500-w192 with 5 warm-up epochs (about 50 steps) instead of 1 (about 10); only the warm-up "
    "differs. The width axis's warm-up comparison.",
)


PROFILES["cifar10-proxy-recipe"] = replace(
    PROFILES["cpu-proxy"],
    name="cifar10-proxy-recipe",
    architecture={"img_size": 32, "patch_size": 2, "depth": 12, "embed_dim": 192, "num_heads": 3},
    recipe={
        **{flag: value for flag, value in PROFILES["cpu-proxy"].recipe.items() if flag != "max_train_samples"},
        "mixed_precision": "bf16",
        "workers": 0,  # the lent machine's sandbox could not pass tensors from loader workers ("0 items of ancdata")
    },
    seeds=(0,),
    table_epochs=(1, 3),
    jobs=3,
    notes="For a lent GPU: the paper's architecture (ViT-Tiny: 32 px, patch 2, depth 12, width 192, 3 heads of 64) "
    "on all of CIFAR-10 (49,000 training images, 2% held out; all 10,000 test images scored) with cpu-proxy's "
    "recipe (batch 256, AdamW lr 1e-3 wd 0.05 eps 1e-8, 1 warm-up epoch, square crops + flip, label smoothing 0.1, "
    "clip 3), bf16 autocast, eager. The epoch count is the time at hand's (``--epochs``). Three runs share the GPU.",
)


PROFILES["cifar10-paper-recipe"] = replace(
    PROFILES["paper"],
    name="cifar10-paper-recipe",
    datasets=PROFILES["cifar10"].datasets,
    recipe={
        **PROFILES["paper"].recipe,
        "epochs": 6,
        "warmup_epochs": 0.3,  # the paper's 10 of 200 epochs (5%)
        "val_split": 0.02,
        "workers": 5,
    },
    seeds=(0, 1, 2),
    table_epochs=(2, 4),
    jobs=3,
    notes="For a lent GPU: the paper's architecture (ViT-Tiny: 32 px, patch 2, depth 12, width 192, 3 heads) and "
    "recipe (batch 512, AdamW lr 1e-3 wd 0.01 eps 1e-3, cosine with 5% of the epochs warming up, RandAugment m9, "
    "label smoothing 0.1, clip 3; train.py's GPU defaults: bf16 autocast, compiled) on all of CIFAR-10 (49,000 "
    "training images, 2% held out; all 10,000 test images scored), for a whole schedule of as many epochs as a loan "
    "fits (the command's ``--epochs``: study/gpu_loan.sh sets it from the rates it measures), not the "
    "paper's 200. Three runs share the GPU, 5 loader workers each.",
)


# Fashion-MNIST (issue 47): a second dataset of every cpu-proxy profile, as a datasets folder that
# study/fashion_mnist/make_dataset.py writes from Debian's package (28 px grayscale, resized to the profile's 16 px).
FASHION_MNIST = BenchmarkDataset("fashion_mnist", None, None, "zalando-datasets/fashion_mnist", local=True)
for _name, _profile in list(PROFILES.items()):
    if _name.startswith("cpu-proxy") and "cifar10" in _profile.datasets:
        PROFILES[_name] = replace(_profile, datasets={**_profile.datasets, "fashion_mnist": FASHION_MNIST})
