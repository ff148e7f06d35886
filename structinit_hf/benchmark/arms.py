"""The benchmark's arms (one attention init each, with the label tables give it) and the paper's Table 2."""

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
    "FAMILY_ARMS",
    "DIAGNOSIS_ARMS",
    "FIRST_IMPULSE_DEFAULTS",
    "PAPER_TABLE2",
    "MIXER_ARMS",
    "MODEL_ARMS",
    "STRUCTURE_ARMS",
    "STUDIES",
    "SWIN_ARMS",
    "arm_label",
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
    family: str = "vit"  # its architecture: "vit" (ConViT included), "swin", "mixer", or "model" (compare --model)

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


# The other families (``compare --family``, the cpu-proxy-n2500-swin / -mixer profiles): timm's default, the impulse
# init (Swin: into the relative position bias; Mixer: the token MLP as a shift) and, for Swin, mimetic.
SWIN_ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm(
            "swin-default",
            "Swin, timm default (trunc normal, std 0.02)",
            "swin_tiny_patch2_window4_32",
            label="Swin, timm's default (trunc normal)",
            family="swin",
        ),
        Arm(
            "swin-impulse3",
            "Swin, impulse 3x3 in the relative position bias (value/output as drawn)",
            "swin_tiny_impulse3_patch2_window4_32",
            label="Swin, impulse 3x3 (bias)",
            family="swin",
        ),
        Arm(
            "swin-impulse3-mimeticvo",
            "Swin, impulse 3x3 in the relative position bias, mimetic value/output",
            "swin_tiny_impulse3_patch2_window4_32",
            {"value_init": "mimetic"},
            label="Swin, impulse 3x3 (bias) + mimetic V/O",
            family="swin",
        ),
        Arm(
            "swin-mimetic",
            "Swin, mimetic q/k/v/proj",
            "swin_tiny_mimetic_patch2_window4_32",
            label="Swin, mimetic",
            family="swin",
        ),
    )
}


MIXER_ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm(
            "mixer-default",
            "MLP-Mixer, timm default (xavier uniform)",
            "mixer_s4_32",
            label="Mixer, timm's default",
            family="mixer",
        ),
        Arm(
            "mixer-impulse3",
            "MLP-Mixer, every token MLP a random 3x3 shift",
            "mixer_s4_impulse3_32",
            label="Mixer, impulse 3x3 (token MLP)",
            family="mixer",
        ),
    )
}


# ``compare --model <any timm name>``: the inits on that model, each run by apply_structured_init on timm's own build
# (``--model-kwargs attention_init=...``); compare fills in ``model``
MODEL_ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm("model-default", "the model as timm builds it", "", label="timm's default", family="model"),
        Arm("model-mimetic", "mimetic", "", {"attention_init": "mimetic"}, label="mimetic", family="model"),
        Arm(
            "model-auto",
            "init 'auto': what the evidence says leads on the model's family (structinit_hf.init.options.AUTO_INITS)",
            "",
            {"attention_init": "auto"},
            label="auto",
            family="model",
        ),
        *(
            Arm(
                f"model-impulse{k}",
                f"impulse {k}x{k}",
                "",
                {"attention_init": "impulse", "kernel_size": k},
                label=f"impulse {k}x{k}",
                family="model",
            )
            for k in (3, 5)
        ),
        Arm(
            "model-impulse3-mimeticvo",
            "impulse 3x3, mimetic value/output",
            "",
            {"attention_init": "impulse", "kernel_size": 3, "value_init": "mimetic"},
            label="impulse 3x3 + mimetic V/O",
            family="model",
        ),
        *(
            Arm(
                f"model-impulse3-attnls{scale:g}",
                f"impulse 3x3, the attention branch's layer scale started at {scale:g} (the MLP branch's as built)",
                "",
                {"attention_init": "impulse", "kernel_size": 3, "attn_layer_scale": scale},
                label=f"impulse 3x3, attention layer scale {scale:g}",
                family="model",
            )
            for scale in (0.1, 1.0)
        ),
        # the impulse as the model was built: its layer scale kept, value/output as the family's options class leaves
        # them (an option None: model_inits fills in that class's own default for the model), no family default
        Arm(
            "model-impulse3-asbuilt",
            "impulse 3x3, the layer scale and value/output as the model was built (no family default)",
            "",
            {"attention_init": "impulse", "kernel_size": 3, "attn_layer_scale": "model", "value_init": None},
            label="impulse 3x3, as built",
            family="model",
        ),
        Arm(
            "model-impulse3-mimeticvo-attnls1",
            "impulse 3x3, mimetic value/output, the attention branch's layer scale started at 1",
            "",
            {"attention_init": "impulse", "kernel_size": 3, "value_init": "mimetic", "attn_layer_scale": 1.0},
            label="impulse 3x3 + mimetic V/O, attention layer scale 1",
            family="model",
        ),
    )
}


def _variant(arm: Arm, suffix: str, options: dict[str, Any], what: str) -> Arm:
    """``arm`` with init ``options`` added, named ``<arm>-<suffix>`` and labelled ``<label>, <what>``."""
    return replace(
        arm,
        name=f"{arm.name}-{suffix}",
        description=f"{arm.description}, {what}",
        model_kwargs={**arm.model_kwargs, **options},
        paper_row=None,
        label=f"{arm.label}, {what}",
    )


# Is it the structure? Each init's norm-matched control (every tensor it writes redrawn at random at its norms:
# structinit_hf.init.control), mimetic MLP init (a nonzero mean in each block MLP's first layer) alone and with each
# attention init, on the registered names and on any timm model; the relative-position bias impulse's strength
_MODEL_DEFAULT = replace(MODEL_ARMS["model-default"], model_kwargs={"attention_init": "default"})
_VARIANTS = (  # (base arms, suffix, options, what the label adds)
    (("impulse3", "mimetic", "model-impulse3", "model-mimetic", "model-impulse3-attnls1",
      "model-impulse3-mimeticvo-attnls1"), "normmatched", {"control": "normmatched"}, "norm-matched control"),
    (("default", "impulse3", "mimetic", "model-default", "model-impulse3", "model-mimetic", "model-impulse3-attnls1"),
     "mlpmimetic", {"mlp_init": "mimetic"}, "mimetic MLP"),
    (("model-impulse3",), "sharp0.3", {"sharpness": 0.3}, "sharpness 0.3"),
    (("model-impulse3",), "sharp0.9", {"sharpness": 0.9}, "sharpness 0.9"),
)  # fmt: skip
STRUCTURE_ARMS: dict[str, Arm] = {
    arm.name: arm
    for bases, suffix, options, what in _VARIANTS
    for arm in (
        _variant(_MODEL_DEFAULT if b == "model-default" else {**ARMS, **MODEL_ARMS}[b], suffix, options, what)
        for b in bases
    )  # fmt: skip
}


# per family: its arms, and the arm (timm's own init) every other one is compared with
FAMILY_ARMS: dict[str, dict[str, Arm]] = {"vit": ARMS, "swin": SWIN_ARMS, "mixer": MIXER_ARMS, "model": MODEL_ARMS}
REFERENCE_ARMS: dict[str, str] = {
    "vit": "default",
    "swin": "swin-default",
    "mixer": "mixer-default",
    "model": "model-default",
}


ABLATION_REFERENCES = ("default", "mimetic", "impulse3")


# what --arms takes
ALL_ARMS: dict[str, Arm] = {
    **ARMS, **ABLATION_ARMS, **DIAGNOSIS_ARMS, **SWIN_ARMS, **MIXER_ARMS, **MODEL_ARMS, **STRUCTURE_ARMS
}  # fmt: skip


STUDIES = ("main", "ablation")


# The paper's Table 2 (top-1 %, ViT-Tiny, 200 epochs), for reference beside our own numbers.
PAPER_TABLE2: dict[str, dict[str, float]] = {
    "kaiming": {"cifar10": 86.36, "cifar100": 63.50, "svhn": 94.51},
    "default": {"cifar10": 88.63, "cifar100": 66.50, "svhn": 93.20},
    "mimetic": {"cifar10": 91.16, "cifar100": 70.40, "svhn": 97.53},
    "impulse3": {"cifar10": 91.62, "cifar100": 68.81, "svhn": 97.21},
    "impulse5": {"cifar10": 90.67, "cifar100": 70.46, "svhn": 97.23},
}


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
