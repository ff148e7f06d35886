"""The benchmark's arms (one attention init each), the paper's Table 2 and the profiles (data, size, recipe).

Profiles:

* ``cpu``: the 4,660 / 932 real CIFAR-10 images of ``cifar10-small`` (under ``--data-root``), ViT-Tiny width
  (dim 192, 3 heads) at 32 px with patch 4 (8 x 8 tokens), 6 blocks, 8 epochs, batch 64, 1 warm-up
  epoch, two runs at a time with one thread each.
* ``cpu-proxy``: patch 2 on 16 px full-CIFAR-10 images, depth 12, width 48, AdamW at PyTorch's eps: a CPU
  setting for ranking the inits at the paper's depth and patch size. ``cpu-proxy-eps1e-3`` (and its ``-short``
  cut) is the same with ``train.py``'s eps 1e-3.
* ``cpu-proxy-n2500``, ``-n5000`` (and its ``-randaug`` and ``-mixcut`` augmentations) and ``-n2500-long``: the
  small-data campaign's profiles, ``cpu-proxy`` on fewer training images or for longer.
* ``cpu-proxy-n2500-w96``, ``-n2500-w192``, ``-n5000-w192``: the campaign's width axis, its profiles at width 96
  or 192 (3 heads).
* ``cifar10``: the paper's architecture on full CIFAR-10 for 20 epochs, for one GPU.
* ``paper``: the paper's setting (ViT-Tiny, patch 2, 12 blocks, 200 epochs, batch 512 and the rest of
  ``train.py``'s default recipe) on CIFAR-10, CIFAR-100 or SVHN from the Hub, for GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..init.options import PINV_DEFAULTS, SHIFT_DEFAULTS, SVD_DEFAULTS

__all__ = [
    "ABLATION_ARMS",
    "ABLATION_REFERENCES",
    "ALL_ARMS",
    "ARMS",
    "Arm",
    "BenchmarkDataset",
    "CONVIT_GPSA_SHARE",
    "CONVIT_HEADS",
    "DIAGNOSIS_ARMS",
    "FIRST_IMPULSE_DEFAULTS",
    "PAPER_TABLE2",
    "PROFILES",
    "Profile",
    "STUDIES",
    "arm_label",
    "arm_model_kwargs",
    "select_arms",
    "study_arm_names",
]


@dataclass(frozen=True)
class Arm:
    """One column of the comparison: a registered model name, its extra kwargs and the paper's row."""

    name: str
    description: str
    model: str
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    paper_row: str | None = None  # key of PAPER_TABLE2, None where the paper reports no figure
    label: str = ""  # the arm's name in tables and plots; its ``name`` where empty

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.name)


# timm 1.0.31's weight_init='reset' calls each module's own reset_parameters() and nothing else: nn.Linear
# and the patch-embedding Conv2d get PyTorch's Kaiming-uniform default (weights and biases uniform in
# +-1/sqrt(fan_in)), LayerNorm ones/zeros; the sin-cos position embedding is then written by the builder.
ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm(
            "default",
            "timm default (trunc normal, std 0.02)",
            "vit_tiny_patch2_32",
            {},
            "default",
            label="timm's default (trunc normal)",
        ),
        Arm(
            "kaiming",
            "PyTorch default (Kaiming uniform)",
            "vit_tiny_patch2_32",
            {"weight_init": "reset"},
            "kaiming",
            label="Kaiming uniform (PyTorch default)",
        ),
        Arm("mimetic", "mimetic", "vit_tiny_mimetic", {}, "mimetic"),
        Arm("impulse3", "impulse 3x3", "vit_tiny_impulse3", {}, "impulse3", label="impulse 3x3, `shift` (default)"),
        Arm("impulse5", "impulse 5x5", "vit_tiny_impulse5", {}, "impulse5", label="impulse 5x5, `shift` (default)"),
        Arm(
            "v1",
            "impulse 3x3, the authors' v1 (Adam, arXiv 2404.01139)",
            "vit_tiny_impulse3",
            {"preset": "v1"},
            label="`v1` preset (impulse 3x3)",
        ),
        Arm(
            "v2",
            "impulse 3x3, the authors' v2 (NeurIPS 2025)",
            "vit_tiny_impulse3",
            {"preset": "v2"},
            label="`v2` preset (impulse 3x3)",
        ),
        Arm(
            "convit", "ConViT-Tiny (GPSA, architectural peer)", "convit_tiny_patch2_32", {}, None, label="ConViT (GPSA)"
        ),
    )
}


# The impulse settings the ablation starts from, spelled out so its runs stay the same runs when the package
# defaults move (``value_init`` is "default").
FIRST_IMPULSE_DEFAULTS: dict[str, Any] = {
    "pseudo_input": "sincos",
    "sharpness": 0.7,
    "solver": "svd",
    "per_layer": False,
    "suppress_content": True,
    "patch_embed_scale": 0.5,
}


# The ablation (``--study ablation``): impulse 3x3 with one setting changed at a time from the first defaults,
# plus the paper's own solve; the main study's ``default``, ``mimetic`` and ``impulse3`` (today's defaults) runs
# are its references.
ABLATION_ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm(
            "impulse3-v0",
            "impulse 3x3, first defaults (svd, sharpness 0.7, content suppressed, patch x0.5)",
            "vit_tiny_impulse3",
            dict(FIRST_IMPULSE_DEFAULTS),
        ),
        Arm(
            "impulse3-paper",
            "impulse 3x3, the paper's solve (adam, content not suppressed, patch x1)",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "solver": "adam", "suppress_content": False, "patch_embed_scale": 1.0},
        ),
        Arm(
            "impulse3-scale1",
            "v0 with patch_embed_scale 1",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "patch_embed_scale": 1.0},
        ),
        Arm(
            "impulse3-soft", "v0 with sharpness 0.3", "vit_tiny_impulse3", {**FIRST_IMPULSE_DEFAULTS, "sharpness": 0.3}
        ),
        Arm(
            "impulse3-content",
            "v0 with suppress_content off",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "suppress_content": False},
        ),
        Arm(
            "impulse3-perlayer",
            "v0 with a fresh solve per block",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "per_layer": True},
        ),
        Arm(
            "impulse3-noisy",
            "v0 solved on sin-cos plus Gaussian noise",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "pseudo_input": "sincos+gaussian"},
        ),
        Arm(
            "impulse3-mimeticvo",
            "v0 with mimetic value/output projections",
            "vit_tiny_impulse3",
            {**FIRST_IMPULSE_DEFAULTS, "value_init": "mimetic"},
        ),
    )
}


# The patch-2 diagnosis, on the cpu-proxy profiles: the svd defaults (SVD_DEFAULTS) with one of v2's choices each.
DIAGNOSIS_ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        # today's defaults spelled out, so these runs keep their meaning if the defaults move
        Arm(
            "impulse3-svd", "impulse 3x3, the svd construction (0.1 defaults)", "vit_tiny_impulse3", dict(SVD_DEFAULTS)
        ),
        Arm(
            "impulse5-svd",
            "impulse 5x5, the svd construction (0.1 defaults)",
            "vit_tiny_impulse5",
            dict(SVD_DEFAULTS),
            label="impulse 5x5, `svd` (the 0.1 default)",
        ),
        Arm(
            "impulse3-svd-qkfro7",
            "0.1 defaults, Q/K at Frobenius norm 7 per head (v2's scale)",
            "vit_tiny_impulse3",
            {**SVD_DEFAULTS, "qk_frobenius": 7.0},
        ),
        Arm(
            "impulse3-svd-pos18",
            "0.1 defaults, position code x18 (v2's)",
            "vit_tiny_impulse3",
            {**SVD_DEFAULTS, "position_scale": 18.0},
        ),
        Arm(
            "impulse3-svd-free",
            "0.1 defaults, content not suppressed",
            "vit_tiny_impulse3",
            {**SVD_DEFAULTS, "suppress_content": False},
        ),
        Arm(
            "impulse3-pinv",
            "impulse 3x3, v2's closed form and scale with random shifts (pinv, learned-style code x18, Q/K norm 7, "
            "mimetic V/O)",
            "vit_tiny_impulse3",
            dict(PINV_DEFAULTS),
        ),
        Arm(
            "impulse3-shift",
            "impulse 3x3 at mimetic's scale: mimetic's Q K^T with its identity pointed at the impulse (shift solver, "
            "sin-cos code, mimetic V/O)",
            "vit_tiny_impulse3",
            dict(SHIFT_DEFAULTS),
        ),
        Arm(
            "impulse5-shift",
            "impulse 5x5 at mimetic's scale (shift solver, sin-cos code, mimetic V/O)",
            "vit_tiny_impulse5",
            dict(SHIFT_DEFAULTS),
        ),
        Arm(
            "impulse3-pinv-sincos",
            "today's defaults solved on the sin-cos code instead of a learned-style one",
            "vit_tiny_impulse3",
            {**PINV_DEFAULTS, "pseudo_input": "sincos"},
        ),
    )
}


ABLATION_REFERENCES = ("default", "mimetic", "impulse3")


ALL_ARMS: dict[str, Arm] = {**ARMS, **ABLATION_ARMS, **DIAGNOSIS_ARMS}  # every arm --arms accepts


STUDIES = ("main", "ablation")


# The paper's Table 2 (top-1 %, ViT-Tiny, 200 epochs), for reference beside our own numbers.
PAPER_TABLE2: dict[str, dict[str, float]] = {
    "kaiming": {"cifar10": 86.36, "cifar100": 63.50, "svhn": 94.51},
    "default": {"cifar10": 88.63, "cifar100": 66.50, "svhn": 93.20},
    "mimetic": {"cifar10": 91.16, "cifar100": 70.40, "svhn": 97.53},
    "impulse3": {"cifar10": 91.62, "cifar100": 68.81, "svhn": 97.21},
    "impulse5": {"cifar10": 90.67, "cifar100": 70.46, "svhn": 97.23},
}


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


PROFILES: dict[str, Profile] = {
    "cpu": Profile(
        name="cpu",
        datasets={"cifar10-small": BenchmarkDataset("cifar10-small", None, "cifar10", "uoft-cs/cifar10", local=True)},
        architecture={"img_size": 32, "patch_size": 4, "depth": 6},
        recipe={"epochs": 8, "batch_size": 64, "warmup_epochs": 1, "keep_checkpoints": 1},
        seeds=(0, 1),
        table_epochs=(2, 4),
        jobs=2,
        notes="Sized for a shared 2-core CPU: ViT-Tiny width (dim 192, 3 heads) with patch 4 (8 x 8 tokens at 32 px) "
        "and 6 blocks instead of patch 2 and 12, 8 epochs of 4,194 training images (466 held out for validation), "
        "batch 64 with 1 warm-up epoch; the rest is the paper's recipe (AdamW lr 1e-3, wd 0.01, RandAugment m9, "
        "label smoothing 0.1, clip 3). Two runs at a time, one thread each. Planned from ~53 images/s measured per "
        "single-thread run on the busy machine (40 assumed): about 90 minutes for 6 arms x 2 seeds.",
    ),
    "cpu-proxy": Profile(
        name="cpu-proxy",
        datasets={"cifar10": BenchmarkDataset("cifar10", None, "cifar10", "uoft-cs/cifar10", local=True)},
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
        },
        seeds=(0, 1),
        table_epochs=(3, 6),
        jobs=2,
        notes="The paper's token (patch 2: 12 pixel values per token) on a 2-core CPU, close to the setting "
        "../shared/DESIGN.md measured with a bare PyTorch loop: full CIFAR-10 images resized to 16 px (8 x 8 tokens), "
        "ViT depth 12, width 48, 3 heads; 10 epochs of 25,000 training images (2% held out for validation; 977 "
        "steps), all 10,000 test images scored; batch 256, AdamW lr 1e-3 wd 0.05 at PyTorch's eps 1e-8 (train.py's "
        "paper recipe uses 1e-3, which at width 48 reverses the ranking: profile cpu-proxy-eps1e-3), 1 warm-up "
        "epoch, square crops of 64-100% of the area + flip, no RandAugment, label smoothing 0.1, clip 3. Two runs "
        "at a time, one thread each: 24-28 minutes a run on the 2-core CPU. It ranks timm's default, mimetic and the "
        "svd construction as the one GPU run at the paper's architecture did (README).",
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
        "copy in data/cifar10), 20 epochs (the authors' own Colab compared inits at 20), batch 512, 1 warm-up epoch, "
        "the rest of train.py's recipe, with train.py's GPU defaults (bf16 autocast, compile). Four runs share the "
        "GPU at a time (six at once ran out of 80 GB). Default, mimetic, impulse3, impulse5, v1 and v2 take two "
        "seeds; Kaiming and ConViT (about 7x slower) one: pass --arms ... --seeds 0 for those.",
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
    notes="cpu-proxy at train.py's AdamW eps 1e-3 (the paper's recipe). At width 48 the large eps damps every "
    "update whose gradient is small against 1e-3: timm's default init barely trains, and the impulse init comes "
    "out ahead of it, the reverse of the GPU run at width 192 (README). Kept as the record of that finding.",
)


PROFILES["cpu-proxy-eps1e-3-short"] = replace(
    PROFILES["cpu-proxy-eps1e-3"],
    name="cpu-proxy-eps1e-3-short",
    recipe={  # random-resized crops of any aspect (train.py's default ratio)
        **{flag: value for flag, value in PROFILES["cpu-proxy-eps1e-3"].recipe.items() if flag != "ratio"},
        **{"epochs": 6, "max_train_samples": 20_000, "scale": (0.35, 1.0)},
    },
    table_epochs=(2, 4),
    notes="cpu-proxy-eps1e-3 cut to 6 epochs of 20,000 images (468 steps) with random-resized crops (area "
    "35-100%): about 13 minutes a run. Like its parent it does not rank the inits as the GPU does (README). Kept as "
    "the record of that finding.",
)


# The small-data campaign: cpu-proxy at fewer training images and with longer training. Compute rule:
# the same 10 epochs at every size (fewer steps at fewer images); everything else is cpu-proxy's.
PROFILES["cpu-proxy-n2500"] = replace(
    PROFILES["cpu-proxy"],
    name="cpu-proxy-n2500",
    recipe={**PROFILES["cpu-proxy"].recipe, "max_train_samples": 2_500},
    notes="cpu-proxy on 2,500 training images (a seed-dependent draw from the 49,000 left after the 2% held out): "
    "the same 10 epochs, batch 256 and 1 warm-up epoch, so about 10 steps an epoch and 100 in all (a tenth of "
    "cpu-proxy's). The smallest size of the campaign's data-size comparison (issue 20); all 10,000 test images "
    "scored.",
)


PROFILES["cpu-proxy-n5000"] = replace(
    PROFILES["cpu-proxy"],
    name="cpu-proxy-n5000",
    recipe={**PROFILES["cpu-proxy"].recipe, "max_train_samples": 5_000},
    notes="cpu-proxy on 5,000 training images: the same 10 epochs, batch 256 and 1 warm-up epoch (about 20 steps "
    "an epoch, 200 in all). The middle size of the campaign's data-size comparison (issue 20).",
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
    "10-against-50-epoch comparison (issue 20).",
)


def _wider(parent: str, width: int) -> Profile:
    """``parent`` at another width (``embed_dim``), still 3 heads: head dimension ``width // 3``."""
    base = PROFILES[parent]
    return replace(
        base,
        name=f"{parent}-w{width}",
        architecture={**base.architecture, "embed_dim": width},
        notes=f"{parent} at width {width} (3 heads of {width // 3}); only the width differs. The campaign's width "
        "axis: head dimension 16 (width 48) -> 32 -> 64, the paper's ViT-Tiny head.",
    )


for _parent, _width in (("cpu-proxy-n2500", 96), ("cpu-proxy-n2500", 192), ("cpu-proxy-n5000", 192)):
    PROFILES[f"{_parent}-w{_width}"] = _wider(_parent, _width)

PROFILES["cpu-proxy-n2500-w192-lr3e-4"] = replace(
    PROFILES["cpu-proxy-n2500-w192"],
    name="cpu-proxy-n2500-w192-lr3e-4",
    recipe={**PROFILES["cpu-proxy-n2500-w192"].recipe, "lr": 3e-4},
    notes="cpu-proxy-n2500-w192 at peak learning rate 3e-4 instead of 1e-3; only the rate differs. The other point "
    "of the width axis's learning-rate grid, so that each init is also seen at its own better rate.",
)


CONVIT_GPSA_SHARE = 10 / 12  # ConViT-Tiny: 10 of its 12 blocks are GPSA; kept when the depth changes


CONVIT_HEADS = 4  # convit_tiny_patch2_32's heads when the profile does not set num_heads


def study_arm_names(study: str) -> list[str]:
    """The arms a study trains by default: the six of the main table, or the ablation with its reference rows."""
    if study not in STUDIES:
        raise ValueError(f"unknown study {study!r}; expected one of {', '.join(STUDIES)}")
    return list(ARMS) if study == "main" else [*ABLATION_REFERENCES, *ABLATION_ARMS]


def arm_label(name: str) -> str:
    """What tables and plots call the arm ``name``: its label, or ``name`` itself where it is no arm."""
    return ALL_ARMS[name].label if name in ALL_ARMS else name


def select_arms(names: Iterable[str] | None = None) -> list[Arm]:
    """The arms called ``names`` (the main six for ``None``), in the order given; ablation arms included."""
    if names is None:
        return list(ARMS.values())
    names = list(names)
    unknown = [name for name in names if name not in ALL_ARMS]
    if unknown or not names:
        raise ValueError(f"unknown arm(s) {unknown or names}; expected some of {', '.join(ALL_ARMS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"arm names repeat in {names}")
    return [ALL_ARMS[name] for name in names]


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
