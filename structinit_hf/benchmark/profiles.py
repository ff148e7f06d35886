"""The profiles ``compare`` trains: everything the arms of one comparison share (data, architecture, recipe, seeds).

``cpu-proxy`` (the CPU proxy of the paper's CIFAR setting), ``cpu-proxy-n2500`` (compare's default: its recipe at
2,500 images) and its Swin and MLP-Mixer counterparts; the repository's study adds its own profiles to these. Each
profile's ``notes`` say what it is; docs/benchmarks.md says how each was sized.
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
    "STOCK_MODELS",
    "SWIN_PROXY",
    "WIDE_HEAD_DIM",
    "WIDE_HEAD_LR",
    "arm_model_kwargs",
    "family_proxy",
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
    family: str = "vit"  # the architecture its arms train (their Arm.family): "vit", "swin", "mixer" or "model"
    model: str = ""  # the "model" family's stock timm model, which its arms (model-*: Arm.model empty) train


PROFILES: dict[str, Profile] = {
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
            "lr": 1e-3,  # at head dimension 16; see proxy_lr
            "mixed_precision": "no",  # fp32 and eager on any device (compare resolves its own: --mixed-precision)
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
}


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


# The other families at the proxy's cost: cpu-proxy-n2500's data and recipe, a Swin / Mixer sized to the seconds per
# step of its ViT (width 48, depth 12), at the proxy's rate; timm's own relative-position and rotary ViTs at the ViT's
# geometry (the study's profiles: the model-* arms on the stock model).
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
    "relpos": "timm's relative-position ViT (vit_relpos_small_patch16_224: a RelPosMlp bias per block, no class token, "
    "average pool, no qkv bias, layer scale 1e-6) at the ViT proxy's geometry (16 px, patch 2, depth 12, width 48, 3 "
    "heads)",
    "deit3": "timm's DeiT-III (deit3_small_patch16_224: a plain ViT with layer scale 1e-6, a class token kept out of "
    "the learned position embedding, class-token pooling) at the ViT proxy's geometry (16 px, patch 2, depth 12, width "
    "48, 3 heads)",
    "rope": "timm's rotary ViT (vit_small_patch16_rope_224, eva.py: axial RoPE, no absolute code, a class token, qkv "
    "bias, layer scale 1e-5) at the ViT proxy's geometry (16 px, patch 2, depth 12, width 48, 3 heads)",
}
STOCK_MODELS = {  # family "model"
    "deit3": "deit3_small_patch16_224",
    "relpos": "vit_relpos_small_patch16_224",
    "rope": "vit_small_patch16_rope_224",
}
_STEP_COST = (
    "Sized to the ViT proxy's cost: single thread, batch 256, forward + backward + AdamW step, the median of 5 steps "
    "on the 2-core machine: {cost}"
)
_EPOCH_COST = (
    "Not sized (the ViT's own geometry): one epoch (10 steps, then the 1,000 held-out images scored) on one thread of "
    "the loaded 2-core machine: {cost} against the ViT proxy's 13.9 s"
)
_MEASURED = {
    "swin": _STEP_COST.format(cost="Swin 0.95 s against the ViT's 0.99 s (width 48, depth 12)"),
    "mixer": _STEP_COST.format(cost="Mixer 1.12 s against the ViT's 1.07 s (width 48, depth 12)"),
    "deit3": "Not sized: the ViT proxy's own blocks and geometry, layer scale and class token added",
    "relpos": _EPOCH_COST.format(cost="16.2 s"),
    "rope": _EPOCH_COST.format(cost="16.9-17.7 s"),
}


def family_proxy(family: str, architecture: dict[str, Any], lr: float) -> Profile:
    """``cpu-proxy-n2500-<family>[-lr<lr>]``: the proxy's data and recipe at peak rate ``lr`` on ``family``'s
    ``architecture``; a family of :data:`STOCK_MODELS` trains that timm model with the model-* arms."""
    base = PROFILES["cpu-proxy-n2500"]
    suffix = "" if lr == base.recipe["lr"] else f"-lr{lr:.0e}".replace("e-0", "e-")
    model = STOCK_MODELS.get(family, "")
    return replace(
        base,
        name=f"cpu-proxy-n2500-{family}{suffix}",
        architecture=dict(architecture),
        recipe={**base.recipe, "lr": lr},
        family="model" if model else family,
        model=model,
        notes=f"cpu-proxy-n2500's data and recipe (2,500 training images at 16 px, 10 epochs, batch 256, crop + flip, "
        f"AdamW wd 0.05, 1 warm-up epoch, peak lr {lr:g}) on {_FAMILY_NOTES[family]}. {_MEASURED[family]}.",
    )


for _family, _architecture in (("swin", SWIN_PROXY), ("mixer", MIXER_PROXY)):
    _profile = family_proxy(_family, _architecture, PROFILES["cpu-proxy-n2500"].recipe["lr"])
    PROFILES[_profile.name] = _profile


WIDE_HEAD_DIM = 32  # from this head dimension (ViT-Tiny's is 64) the proxy recipe trains at WIDE_HEAD_LR


WIDE_HEAD_LR = 3e-4


def proxy_lr(head_dim: int) -> float:
    """The proxy recipe's peak learning rate at ``head_dim``: cpu-proxy's 1e-3 below :data:`WIDE_HEAD_DIM` (measured
    at head dimension 16), :data:`WIDE_HEAD_LR` from it (measured at 32 and 64). At 1e-3, reached after about 10
    warm-up steps, mimetic and `shift` sit near chance loss for epochs at head dimension 64 and train slowly and
    unsteadily at 32; at 3e-4 every init trains at both (docs/method.md, "At the paper's width")."""
    return PROFILES["cpu-proxy"].recipe["lr"] if head_dim < WIDE_HEAD_DIM else WIDE_HEAD_LR


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
