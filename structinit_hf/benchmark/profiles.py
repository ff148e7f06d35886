"""The benchmark's profiles: everything the arms of one benchmark share (data, architecture, recipe, seeds).

Each profile's ``notes`` say what it is; docs/benchmarks.md says how each was sized and what its runs found.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .arms import Arm

__all__ = [
    "BenchmarkDataset",
    "CONVIT_GPSA_SHARE",
    "CONVIT_HEADS",
    "MIXER_PROXY",
    "PROFILES",
    "Profile",
    "SWIN_PROXY",
    "WIDE_HEAD_DIM",
    "WIDE_HEAD_LR",
    "arm_model_kwargs",
    "proxy_lr",
    "with_epochs",
]


@dataclass(frozen=True)
class BenchmarkDataset:
    """A dataset a profile trains on: ``train.py``'s ``--dataset`` / ``--dataset-config`` and the paper's column."""

    dataset: str
    config: str | None = None
    paper_column: str | None = None  # key into PAPER_TABLE2 rows
    hub_id: str | None = None  # the Hub dataset a local copy comes from (push_to_hub's --dataset-id)
    local: bool = False  # ``dataset`` names a folder under the benchmark's --data-root, not a Hub id


@dataclass(frozen=True)
class Profile:
    """Everything shared by the arms of one benchmark: data, architecture overrides, recipe and seeds."""

    name: str
    datasets: dict[str, BenchmarkDataset]
    architecture: dict[str, Any]  # --model-kwargs shared by every arm (img_size, patch_size, depth ...)
    recipe: dict[str, Any]  # train.py flags (dest names) shared by every arm
    seeds: tuple[int, ...]
    table_epochs: tuple[int, ...]  # epochs shown in the table besides the final score
    jobs: int  # runs trained at the same time
    notes: str = ""  # why the profile is sized as it is: printed in results.md
    family: str = "vit"  # the architecture its arms train (their Arm.family): "vit", "swin" or "mixer"


PROFILES: dict[str, Profile] = {
    "cpu": Profile(
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
    ),
    "cpu-proxy": Profile(
        name="cpu-proxy",
        datasets={
            "cifar10": BenchmarkDataset("cifar10", None, "cifar10", "uoft-cs/cifar10", local=True),
            # written by study/fashion_mnist/make_dataset.py from Debian's package; 28 px grayscale, resized to 16
            "fashion_mnist": BenchmarkDataset(
                "fashion_mnist", None, None, "zalando-datasets/fashion_mnist", local=True
            ),
        },
        architecture={"img_size": 16, "patch_size": 2, "depth": 12, "embed_dim": 48, "num_heads": 3},
        recipe={
            "epochs": 10,
            "batch_size": 256,
            "warmup_epochs": 1,
            "weight_decay": 0.05,
            "opt_eps": 1e-8,
            "aa": "none",
            "scale": (0.64, 1.0),
            "ratio": (1.0, 1.0),
            "max_train_samples": 25_000,
            "val_split": 0.02,
            "keep_checkpoints": 1,
            "lr": 1e-3,  # at head dimension 16; see proxy_lr
            "mixed_precision": "no",  # fp32 and eager on any device, as on the CPU it was sized for
            "compile": False,
        },
        seeds=(0, 1),
        table_epochs=(3, 6),
        jobs=2,
        notes="The paper's token (patch 2: 12 pixel values per token) on a 2-core CPU: full CIFAR-10 images resized "
        "to 16 px (8 x 8 tokens), ViT depth 12, width 48, 3 heads; 10 epochs of 25,000 training images (2% held out "
        "for validation; 977 steps), all 10,000 test images scored; batch 256, AdamW lr 1e-3 wd 0.05 at PyTorch's "
        "eps 1e-8, 1 warm-up epoch, square crops of 64-100% of the area + flip, no RandAugment, label smoothing 0.1, "
        "clip 3. Two runs at a time, one thread each.",
    ),
    "cifar10": Profile(
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
    ),
    "paper": Profile(
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
    ),
}


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


# The small-data campaign: cpu-proxy at fewer training images and with longer training. Compute rule:
# the same 10 epochs at every size (fewer steps at fewer images); everything else is cpu-proxy's.
PROFILES["cpu-proxy-n2500"] = replace(
    PROFILES["cpu-proxy"],
    name="cpu-proxy-n2500",
    recipe={**PROFILES["cpu-proxy"].recipe, "max_train_samples": 2_500},
    notes="cpu-proxy on 2,500 training images (a seed-dependent draw from the 49,000 left after the 2% held out): "
    "the same 10 epochs, batch 256 and 1 warm-up epoch, so about 10 steps an epoch and 100 in all (a tenth of "
    "cpu-proxy's); all 10,000 test images scored. The smallest size of the campaign's data-size comparison.",
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


# The other families at the proxy's cost: cpu-proxy-n2500's data and recipe, a Swin / Mixer sized to the seconds per
# step of its ViT (width 48, depth 12), each at the proxy's rate and at 3e-4.
SWIN_PROXY = {
    "img_size": 16, "patch_size": 2, "window_size": 4, "embed_dim": 48, "depths": (8, 8), "num_heads": (3, 6),
}  # fmt: skip
MIXER_PROXY = {"img_size": 16, "patch_size": 2, "num_blocks": 10, "embed_dim": 64, "mlp_ratio": (2.0, 4.0)}
_FAMILY_NOTES = {
    "swin": "a Swin of two stages at 16 px, patch 2, window 4: 8 blocks on the 8 x 8 grid (width 48, 3 heads of 16, "
    "windows of 4 x 4 tokens, every other block shifted by 2) then a patch merge and 8 blocks on the 4 x 4 grid (width "
    "96, 6 heads of 16, one window: global attention with a relative bias)",
    "mixer": "an MLP-Mixer at 16 px, patch 2 (8 x 8 = 64 tokens), width 64, 10 blocks, token MLP 128 hidden (mlp_ratio "
    "2, so the impulse init's token MLP is an exact shift), channel MLP 256",
}
_STEP_COST = (
    "Sized to the ViT proxy's cost: single thread, batch 256, forward + backward + AdamW step, the median of 5 steps "
    "on the 2-core machine: {cost}"
)
_MEASURED = {
    "swin": "Swin 0.95 s against the ViT's 0.99 s (width 48, depth 12)",
    "mixer": "Mixer 1.12 s against the ViT's 1.07 s (width 48, depth 12)",
}


def _family_proxy(family: str, architecture: dict[str, Any], lr: float) -> Profile:
    base = PROFILES["cpu-proxy-n2500"]
    suffix = "" if lr == base.recipe["lr"] else f"-lr{lr:.0e}".replace("e-0", "e-")
    return replace(
        base,
        name=f"cpu-proxy-n2500-{family}{suffix}",
        architecture=dict(architecture),
        recipe={**base.recipe, "lr": lr},
        family=family,
        notes=f"cpu-proxy-n2500's data and recipe (2,500 training images at 16 px, 10 epochs, batch 256, crop + flip, "
        f"AdamW wd 0.05, 1 warm-up epoch, peak lr {lr:g}) on {_FAMILY_NOTES[family]}. "
        + _STEP_COST.format(cost=_MEASURED[family])
        + ".",
    )


for _family, _architecture in (("swin", SWIN_PROXY), ("mixer", MIXER_PROXY)):
    for _lr in (1e-3, 3e-4):
        _profile = _family_proxy(_family, _architecture, _lr)
        PROFILES[_profile.name] = _profile


WIDE_HEAD_DIM = 32  # from this head dimension (ViT-Tiny's is 64) the proxy recipe trains at WIDE_HEAD_LR


WIDE_HEAD_LR = 3e-4


def proxy_lr(head_dim: int) -> float:
    """The proxy recipe's peak learning rate at ``head_dim``: cpu-proxy's 1e-3 below :data:`WIDE_HEAD_DIM` (measured
    at head dimension 16), :data:`WIDE_HEAD_LR` from it (measured at 32 and 64). At 1e-3, reached after about 10
    warm-up steps, mimetic and `shift` sit near chance loss for epochs at head dimension 64 and train slowly and
    unsteadily at 32; at 3e-4 every init trains at both (docs/method.md, "At the paper's width")."""
    return PROFILES["cpu-proxy"].recipe["lr"] if head_dim < WIDE_HEAD_DIM else WIDE_HEAD_LR


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
    "training images, 2% held out; all 10,000 test images scored), for a whole schedule of 6 epochs, the length "
    "that fits one loan (not the paper's 200). Three runs share the GPU, 5 loader workers each.",
)


def with_epochs(profile: Profile, epochs: int) -> Profile:
    """``profile`` trained for ``epochs`` (the table keeps the epochs it has); the record says so in its recipe."""
    if epochs < 1:
        raise ValueError(f"--epochs {epochs}: expected at least 1")
    return replace(
        profile,
        recipe={**profile.recipe, "epochs": epochs},
        table_epochs=tuple(epoch for epoch in profile.table_epochs if epoch < epochs),
    )


CONVIT_GPSA_SHARE = 10 / 12  # ConViT-Tiny: 10 of its 12 blocks are GPSA; kept when the depth changes


CONVIT_HEADS = 4  # convit_tiny_patch2_32's heads when the profile does not set num_heads


def arm_model_kwargs(arm: Arm, profile: Profile) -> dict[str, Any]:
    """The builder kwargs of ``arm`` under ``profile``: the shared architecture, then the arm's own.

    ConViT keeps its share of GPSA blocks (10 of 12) when the profile changes the depth. timm's ConViT multiplies
    ``embed_dim`` by ``num_heads``, so a profile's ``embed_dim`` (the total width of the ViT arms) is passed to it
    divided by the number of heads: ConViT gets the same width as the other arms.
    """
    kwargs = {**profile.architecture, **arm.model_kwargs}
    if arm.model.startswith("convit") and "depth" in kwargs:
        kwargs.setdefault("local_up_to_layer", max(1, round(kwargs["depth"] * CONVIT_GPSA_SHARE)))
    if arm.model.startswith("convit") and "embed_dim" in profile.architecture and "embed_dim" not in arm.model_kwargs:
        width, heads = profile.architecture["embed_dim"], kwargs.get("num_heads", CONVIT_HEADS)
        if width % heads:
            raise ValueError(f"profile {profile.name!r}: width {width} does not split into {heads} ConViT heads")
        kwargs["embed_dim"] = width // heads
    return kwargs
