"""The attention inits' names and the impulse init's options: presets, defaults, and their checks.

Plain Python: the one place an option's default is written (:data:`PROJECT_DEFAULTS`, :data:`PRESETS`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from .control import validate_control
from .impulse import PSEUDO_INPUTS, SHIFT_ORDERS, validate_kernel_size, validate_shift_order
from .layer_scale import KEEP
from .mlp import validate_mlp_init
from .solvers import SOLVERS
from .token_mixing import TOKEN_MLPS

__all__ = [
    "AUTO_INITS",
    "FAMILIES",
    "FAMILY_IMPULSE_DEFAULTS",
    "FAMILY_METHODS",
    "IMPULSE_KWARGS",
    "INIT_METHODS",
    "MIMETIC_OPTIONS",
    "ImpulseOptions",
    "MixerImpulseOptions",
    "SwinImpulseOptions",
    "PINV_DEFAULTS",
    "PRESETS",
    "PROJECT_DEFAULTS",
    "SHIFT_DEFAULTS",
    "SVD_DEFAULTS",
    "VALUE_INITS",
    "family_options",
    "impulse_options",
    "init_settings",
]

INIT_METHODS = ("impulse", "mimetic", "default")


VALUE_INITS = ("default", "mimetic")  # what impulse init does to the value/output projections


# This project's "svd" closed form on the sin-cos code, content suppressed, sharpness 0.7, value/output as drawn.
SVD_DEFAULTS: dict[str, Any] = dict(
    pseudo_input="sincos",
    sharpness=0.7,
    solver="svd",
    per_layer=True,
    suppress_content=True,
    patch_embed_scale=1.0,
    value_init="default",
    shift_order="random",
    qk_frobenius=0.0,
    position_scale=1.0,
)


# v2's closed form and scale with the paper's random shifts: a learned-style code x18, Q/K at Frobenius norm 7 per head,
# mimetic value/output.
PINV_DEFAULTS: dict[str, Any] = dict(
    SVD_DEFAULTS,
    pseudo_input="learned",
    solver="pinv",
    suppress_content=False,
    value_init="mimetic",
    qk_frobenius=7.0,
    position_scale=18.0,
)


# Mimetic init's Q/K form and scale with its identity pointed at each head's impulse (solver "shift"), on the sin-cos
# code, with mimetic value/output: attention starts soft and content still reads, as mimetic's does.
SHIFT_DEFAULTS: dict[str, Any] = dict(SVD_DEFAULTS, solver="shift", suppress_content=False, value_init="mimetic")


# This project's own construction (preset "structinit"): the shift construction, 3x3 window, seed 0.
PROJECT_DEFAULTS: dict[str, Any] = dict(kernel_size=3, seed=0, **SHIFT_DEFAULTS)


# What each preset fixes; the options it leaves out take PROJECT_DEFAULTS.  ``sharpness=None``: not used.
PRESETS: dict[str, dict[str, Any]] = {
    "structinit": {},
    # arXiv 2404.01139, osiriszjq/structured_init: Adam on the softmax MSE from a uniform start, Q/K columns held
    # at the start's norm, random shifts, one solution for every block, everything else as timm draws it
    "v1": dict(SVD_DEFAULTS, sharpness=None, solver="adam", per_layer=False, suppress_content=False),
    # arXiv 2505.19985, osiriszjq/structured_initialization: a pseudo-inverse closed form on a learned position
    # embedding as timm draws it, x18; each head's Q and K at Frobenius norm 7; centre-first 3x3 shifts (the same in
    # every block, the target noise drawn per block); mimetic-style value/output (alpha = beta = 0.4)
    "v2": dict(PINV_DEFAULTS, kernel_size=3, sharpness=None, shift_order="centre-first"),
}


def validate_layer_scale(value: float | str | None) -> None:
    """``attn_layer_scale``: a number > 0, :data:`~.layer_scale.KEEP` (``"model"``) or ``None`` (not given)."""
    if value is None or value == KEEP:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"attn_layer_scale must be a number > 0 or {KEEP!r} (the model's own), got {value!r}")


@dataclass(frozen=True)
class ImpulseOptions:
    """The impulse initialization's settings; every registered model and config carries these.

    An option left at ``None`` takes its preset's value, else this project's default
    (:data:`PROJECT_DEFAULTS`); an option a preset fixes may be given only with the preset's value.

    Attributes:
        preset: ``"structinit"`` (this project's construction, every option free), ``"v1"`` (the
            paper's first version, arXiv 2404.01139: Adam, 10,000 steps) or ``"v2"`` (the NeurIPS 2025
            version, arXiv 2505.19985). Reproduced from the facts of the authors' code, not copied. What
            differs: v1's Adam runs on this package's sin-cos code and LayerNorm (eps 1e-6, the
            authors' 1e-5); v2's mimetic value/output draw ``Z`` from a Gaussian (the authors' from a
            uniform of the same variance); v2 draws its own learned-style code (timm's trunc normal, std
            0.02) and writes it x18 into the model's position embedding, which then trains (the authors
            scale whatever embedding the model has: timm's learned one by default); the noise of v2's
            targets comes from this package's seeded generator, one draw for all blocks.
        kernel_size: odd window size ``k``; each head's shift is drawn from the ``k x k`` window.
        seed: seeds the shifts (and the noise of noisy pseudo inputs and of v2's targets).
        pseudo_input: the solver's input, one of :data:`~structinit_hf.init.impulse.PSEUDO_INPUTS`.
        sharpness: mean attention mass on the target that ``"svd"`` heads reach on the pseudo input
            (``None`` where the preset's solver does not use it).
        solver: ``"shift"`` (the default: mimetic init's form and scale, its identity pointed at the impulse;
            pair it with ``suppress_content=False, value_init="mimetic"``, as the defaults do), ``"svd"`` (closed
            form), ``"adam"`` (v1's 10,000-step recipe) or ``"pinv"`` (v2's closed form); see
            :func:`~structinit_hf.init.solvers.solve_qk`.
        per_layer: solve each block anew (fresh shifts for random order) instead of copying one solution.
        suppress_content: confine Q/K to directions the patch embedding (and prefix tokens) cannot
            reach at init, so image content does not wash out the pattern on real images.
        patch_embed_scale: factor on the patch embedding's initial weights.
        value_init: ``"default"`` leaves the value and output projections as the model drew them (v1);
            ``"mimetic"`` gives them mimetic init's ``W_v W_proj ~ a Z - b I`` (v2).
        shift_order: ``"random"`` (v1) or ``"centre-first"`` (v2's fixed order of 3x3 cells).
        qk_frobenius: if > 0, each head's Q and K are rescaled to this Frobenius norm after the solve (v2: 7);
            0 keeps the solver's own scale (``"svd"``: ``sharpness``).
        position_scale: factor on the sin-cos position code the model adds to its patch tokens (v2: 18);
            the pseudo input is its LayerNorm, so the solve does not change, only how much position
            outweighs image content in each token at init.
        attn_layer_scale: where the model's blocks scale their attention branch (layer scale: DeiT-III, the
            relative-position and rotary ViTs), start that scale at this value instead of the model's own, the
            MLP branch's left as built (:mod:`.layer_scale`); ``"model"`` keeps the model's own; ``None`` (not
            given): the default of :data:`~.layer_scale.LAYER_SCALES` where the model's blocks have one, else the
            model's own. A model without layer scale refuses a number.
        control: ``None`` (the init itself) or ``"normmatched"``: the init's norm-matched control, every tensor it
            wrote redrawn at random at the init's norms (:mod:`.control`), for measuring what its pattern adds.
        mlp_init: ``"default"`` (the blocks' MLPs as built) or ``"mimetic"`` (each block MLP's first layer given a
            nonzero mean, :mod:`.mlp`).
    """

    preset: str = "structinit"
    kernel_size: int | None = None
    seed: int | None = None
    pseudo_input: str | None = None
    sharpness: float | None = None
    solver: str | None = None
    per_layer: bool | None = None
    suppress_content: bool | None = None
    patch_embed_scale: float | None = None
    value_init: str | None = None
    shift_order: str | None = None
    qk_frobenius: float | None = None
    position_scale: float | None = None
    attn_layer_scale: float | Literal["model"] | None = None
    control: str | None = None
    mlp_init: str = "default"

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"unknown impulse preset {self.preset!r}; expected one of {', '.join(PRESETS)}")
        fixed = PRESETS[self.preset]
        clashes = [  # in field order, whatever the order the preset lists them in
            f"{name}={fixed[name]!r} (got {getattr(self, name)!r})"
            for name in self.__dataclass_fields__
            if name in fixed and getattr(self, name) is not None and getattr(self, name) != fixed[name]
        ]
        if clashes:
            raise ValueError(
                f"impulse preset {self.preset!r} sets {', '.join(clashes)}; drop those options, or use "
                "preset='structinit' to set them freely"
            )
        for name, default in PROJECT_DEFAULTS.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, fixed.get(name, default))
        self._validate()

    def _validate(self) -> None:
        choices = (
            ("value_init", VALUE_INITS),
            ("pseudo_input", PSEUDO_INPUTS),
            ("solver", SOLVERS),
            ("shift_order", SHIFT_ORDERS),
        )
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; expected one of {', '.join(allowed)}")
        if not self.patch_embed_scale > 0:
            raise ValueError(f"patch_embed_scale must be > 0, got {self.patch_embed_scale}")
        if not self.position_scale > 0:
            raise ValueError(f"position_scale must be > 0, got {self.position_scale}")
        if not self.qk_frobenius >= 0:
            raise ValueError(f"qk_frobenius must be >= 0 (0: the solver's own scale), got {self.qk_frobenius}")
        if self.sharpness is not None and not 0.0 < self.sharpness < 1.0:
            raise ValueError(f"sharpness must be in (0, 1), got {self.sharpness}")
        if self.sharpness is None and self.solver == "svd" and not self.qk_frobenius:
            raise ValueError("solver 'svd' needs a sharpness in (0, 1) or a qk_frobenius > 0")
        validate_kernel_size(self.kernel_size)
        validate_shift_order(self.shift_order, self.kernel_size)
        validate_layer_scale(self.attn_layer_scale)
        validate_control(self.control)
        validate_mlp_init(self.mlp_init)


IMPULSE_KWARGS = tuple(ImpulseOptions.__dataclass_fields__)  # preset, kernel_size, seed, pseudo_input, ...


@dataclass(frozen=True)
class SwinImpulseOptions:
    """The impulse init of a Swin Transformer: every head's impulse written into its window's relative position bias;
    also of a relative-position ViT (its bias table or MLP over the grid) and a rotary ViT (its query/key biases).

    Attributes:
        kernel_size: odd window size ``k``; each head's shift is drawn from the ``k x k`` window (clipped to the
            offsets a smaller attention window has).
        seed: seeds the shifts (block ``i`` draws with ``seed + i`` when ``per_layer``).
        sharpness: attention mass on the target in a full window when the content logits ``q k^T`` are 0: the bias
            is ``log(sharpness (n - 1) / (1 - sharpness))`` at the head's offset, 0 elsewhere (``n`` keys a window).
        per_layer: fresh shifts for every block (else one draw for all).
        shift_order: ``"random"`` or ``"centre-first"`` (as the ViT's).
        value_init: ``"default"`` keeps the value/output projections as timm draws them; ``"mimetic"`` gives them
            mimetic init's ``W_v W_proj ~ a Z - b I``.
        attn_layer_scale: the attention branch's layer scale at init (as the ViT's option).
        control: ``None`` or ``"normmatched"`` (as the ViT's option).
        mlp_init: ``"default"`` or ``"mimetic"`` (as the ViT's option).
    """

    kernel_size: int = 3
    seed: int = 0
    sharpness: float = 0.7
    per_layer: bool = True
    shift_order: str = "random"
    value_init: str = "default"
    attn_layer_scale: float | Literal["model"] | None = None
    control: str | None = None
    mlp_init: str = "default"

    def __post_init__(self) -> None:
        validate_kernel_size(self.kernel_size)
        validate_shift_order(self.shift_order, self.kernel_size)
        if not 0.0 < self.sharpness < 1.0:
            raise ValueError(f"sharpness must be in (0, 1), got {self.sharpness}")
        if self.value_init not in VALUE_INITS:
            raise ValueError(f"unknown value_init {self.value_init!r}; expected one of {', '.join(VALUE_INITS)}")
        validate_layer_scale(self.attn_layer_scale)
        validate_control(self.control)
        validate_mlp_init(self.mlp_init)


@dataclass(frozen=True)
class MixerImpulseOptions:
    """The impulse init of an MLP-Mixer (and ResMLP / gMLP): every block's token mixer starts as a shift.

    Attributes:
        kernel_size: odd window size ``k``; the shifts are drawn from the ``k x k`` window.
        seed: seeds the shifts (block ``i`` draws with ``seed + i`` when ``per_layer``).
        num_shifts: shifts per block; the token mixer starts as their average (1: one impulse filter).
        per_layer: fresh shifts for every block (else one draw for all).
        shift_order: ``"random"`` or ``"centre-first"``.
        token_mlp: how a Mixer's token MLP carries the map (:data:`~structinit_hf.init.token_mixing.TOKEN_MLPS`):
            ``"pairs"`` exactly at rank ``hidden // 2``, ``"offset"`` approximately at rank ``hidden``, ``"auto"``
            pairs where ``hidden >= 2 N`` tokens, else offset. Single linear token mixers take the map exactly.
        control: ``None`` or ``"normmatched"`` (as the ViT's option).
    """

    kernel_size: int = 3
    seed: int = 0
    num_shifts: int = 1
    per_layer: bool = True
    shift_order: str = "random"
    token_mlp: str = "auto"
    control: str | None = None

    def __post_init__(self) -> None:
        validate_kernel_size(self.kernel_size)
        validate_shift_order(self.shift_order, self.kernel_size)
        if isinstance(self.num_shifts, bool) or not isinstance(self.num_shifts, int) or self.num_shifts < 1:
            raise ValueError(f"num_shifts must be an int >= 1, got {self.num_shifts!r}")
        if self.token_mlp not in TOKEN_MLPS:
            raise ValueError(f"unknown token_mlp {self.token_mlp!r}; expected one of {', '.join(TOKEN_MLPS)}")
        validate_control(self.control)


# mimetic init's options and their defaults
MIMETIC_OPTIONS: dict[str, Any] = {"seed": 0, "mlp_init": "default", "control": None}


# "relpos": a ViT with a relative position bias (table or MLP) over its grid; "rope": a rotary ViT
FAMILIES = ("vit", "swin", "mixer", "relpos", "rope")


# the init methods each family takes: a Mixer has no attention for mimetic init's Q/K form
FAMILY_METHODS = {"vit": INIT_METHODS, "swin": INIT_METHODS, "mixer": ("impulse", "default"), "relpos": INIT_METHODS,
                  "rope": INIT_METHODS}  # fmt: skip


# a relative bias or a rotation takes the impulse as Swin's bias does: the same options
_IMPULSE_OPTIONS = {"vit": ImpulseOptions, "swin": SwinImpulseOptions, "mixer": MixerImpulseOptions,
                    "relpos": SwinImpulseOptions, "rope": SwinImpulseOptions}  # fmt: skip


# The impulse options a family takes by default beyond its options class's own, where the campaign showed them to pay
# against timm's default under the tie rule (docs/campaign.md, "Layer scale"): a rotary ViT's impulse also writes
# mimetic value/output. The attention layer scale's default is per block class, not per family
# (:data:`~.layer_scale.LAYER_SCALES`): opened on the measured DeiT-III and RoPE ViTs only.
FAMILY_IMPULSE_DEFAULTS: dict[str, dict[str, Any]] = {"rope": {"value_init": "mimetic"}}


# What init "auto" writes into each family: what the committed evidence says leads there (the CPU proxy, 3 seeds, the
# tie rule: docs/campaign.md): a structured init that leads timm's default; the impulse's norm-matched control where
# that leads the impulse itself (the relative-position and rotary ViTs); timm's default where nothing led. The
# one-line reason names the evidence. The impulse (and its control) take the family defaults (FAMILY_IMPULSE_DEFAULTS,
# the layer scale) on top. "<family>/open": the family built with its attention layer scale already at 1, where the
# evidence differs.
AUTO_INITS: dict[str, tuple[str, dict[str, Any], str]] = {
    "vit": ("impulse", {}, "the impulse led timm's default on the plain ViT (widths 48-192, CIFAR-10, Fashion-MNIST, "
            "up to 200 epochs) and on DeiT-III with its attention layer scale opened"),
    "rope": ("impulse", {"control": "normmatched"}, "on the rotary ViT random query/key biases and V/O at the "
             "impulse's norms with its attention layer scale opened (its norm-matched control) led the impulse on "
             "every seed at 10 and 50 epochs, and timm's default by more: the gain is the scale's"),
    "rope/open": ("impulse", {}, "on the rotary ViT built with its layer scale at 1 the impulse with mimetic V/O led "
                  "that build's timm default on every seed (its norm-matched control was not measured there)"),
    "relpos": ("impulse", {"control": "normmatched"}, "on the relative-position ViT a random relative bias at the "
               "impulse's norms (its norm-matched control) led timm's default on every seed; the shifts trailed"),
    # the same family built with its layer scale off (every gamma at 1: init_values=1.0)
    "relpos/open": ("mimetic", {}, "on the relative-position ViT built with its layer scale at 1, mimetic led timm's "
                    "default on every seed"),
    "swin": ("default", {}, "on Swin the impulse tied timm's default and mimetic trailed it"),
    "mixer": ("default", {}, "on MLP-Mixer the impulse tied timm's default, with a different sign per dataset"),
}  # fmt: skip


def family_options(family: str) -> tuple[str, ...]:
    """The keyword options of ``family``'s impulse init (and mimetic's ``seed``)."""
    return tuple(_IMPULSE_OPTIONS[family].__dataclass_fields__)


def impulse_options(family: str, options: dict[str, Any]) -> ImpulseOptions | SwinImpulseOptions | MixerImpulseOptions:
    """``family``'s impulse options class filled in from ``options`` (a bad one is a ``ValueError``)."""
    return _IMPULSE_OPTIONS[family](**options)


def init_settings(method: str, options: dict[str, Any], family: str = "vit") -> dict[str, Any]:
    """The full settings of init ``method`` with ``options`` (defaults filled in): ``{"attention_init": method, ...}``.

    ``"impulse"`` takes the fields of the family's options (:class:`ImpulseOptions` for a ViT,
    :class:`SwinImpulseOptions`, :class:`MixerImpulseOptions`; a Swin or Mixer record names its ``family``),
    ``"mimetic"`` :data:`MIMETIC_OPTIONS` (``seed``, ``mlp_init``, ``control``), ``"default"`` only ``mlp_init``.
    Raises ``ValueError`` for an unknown method, one the family does not take, an option the method does not take or
    a bad value.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; expected one of {', '.join(FAMILIES)}")
    if method not in INIT_METHODS:
        raise ValueError(f"unknown init method {method!r}; expected one of {', '.join(INIT_METHODS)}")
    if method not in FAMILY_METHODS[family]:
        raise ValueError(
            f"init method {method!r} does not apply to a {family} model; expected one of "
            f"{', '.join(FAMILY_METHODS[family])}"
        )
    if method == "impulse":
        fields = _IMPULSE_OPTIONS[family].__dataclass_fields__
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise ValueError(
                f"impulse init of a {family} model: unknown option(s) {', '.join(map(repr, unknown))}; allowed: "
                f"{', '.join(fields)}"
            )
        settings = asdict(_IMPULSE_OPTIONS[family](**options))
        return {"attention_init": method, **({} if family == "vit" else {"family": family}), **settings}
    if method == "mimetic":
        unknown = sorted(set(options) - set(MIMETIC_OPTIONS))
        if unknown:
            raise ValueError(f"init method 'mimetic' takes only {', '.join(MIMETIC_OPTIONS)}, got {unknown}")
        settings = {**MIMETIC_OPTIONS, **options}
        validate_control(settings["control"])
        validate_mlp_init(settings["mlp_init"])
        return {"attention_init": method, **settings}
    if set(options) - {"mlp_init"}:
        raise ValueError(f"init method 'default' takes only mlp_init, got {sorted(set(options) - {'mlp_init'})}")
    if options.get("mlp_init", "default") == "default":
        return {"attention_init": method}
    validate_mlp_init(options["mlp_init"])
    return {"attention_init": method, "mlp_init": options["mlp_init"]}
