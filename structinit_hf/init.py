"""Apply a named attention initialization to a Vision Transformer (timm or transformers).

The algorithms live in :mod:`structinit_hf.impulse` and :mod:`structinit_hf.mimetic`; this module
only knows where a model keeps its patch grid, attention weights and position embedding.  Two
layouts are understood: timm's ``VisionTransformer`` (fused ``qkv`` Linear per block) and
transformers' ViT (separate ``q_proj`` / ``k_proj`` / ``v_proj`` / ``o_proj``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from . import impulse
from .impulse import PSEUDO_INPUTS, SHIFT_ORDERS, SOLVERS
from .mimetic import mimetic_qk, mimetic_vo

__all__ = [
    "INIT_METHODS",
    "PRESETS",
    "PINV_DEFAULTS",
    "PROJECT_DEFAULTS",
    "SHIFT_DEFAULTS",
    "SVD_DEFAULTS",
    "ImpulseOptions",
    "apply_structured_init",
    "impulse_block_targets",
    "vit_layout",
]

INIT_METHODS = ("impulse", "mimetic", "default")
VALUE_INITS = ("default", "mimetic")  # what impulse init does to the value/output projections


# The 0.1 release's defaults: this project's "svd" closed form on the sin-cos code, content suppressed, sharpness 0.7.
# On the one GPU run at the paper's architecture and on the cpu-proxy profile they trained far worse than timm's
# default init: the attention collapses onto single keys as training goes (README, issue 11).
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
# mimetic value/output. Attention starts soft, at mimetic's scale (README: init health).
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
# This project's own construction ("structinit"): the shift construction since 0.2, chosen on the cpu-proxy profile
# (the CPU setting that ranks timm's default, mimetic and the svd construction as the GPU run did); not yet measured
# at the paper's scale (README, "Impulse init at the paper's architecture").
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
        pseudo_input: the solver's input, one of :data:`~structinit_hf.impulse.PSEUDO_INPUTS`.
        sharpness: mean attention mass on the target that ``"svd"`` heads reach on the pseudo input
            (``None`` where the preset's solver does not use it).
        solver: ``"svd"`` (closed form, default), ``"adam"`` (v1's 10,000-step recipe), ``"pinv"`` (v2's
            closed form) or ``"shift"`` (mimetic init's form and scale, its identity pointed at the impulse;
            pair it with ``suppress_content=False, value_init="mimetic"``); see
            :func:`~structinit_hf.impulse.solve_qk`.
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
        if (
            isinstance(self.kernel_size, bool)
            or not isinstance(self.kernel_size, int)
            or self.kernel_size < 1
            or self.kernel_size % 2 == 0
        ):
            raise ValueError(f"kernel_size must be an odd int >= 1 (1, 3, 5, ...), got {self.kernel_size!r}")
        if self.shift_order == "centre-first" and self.kernel_size != 3:
            raise ValueError(f"shift_order 'centre-first' needs kernel_size 3, got {self.kernel_size}")


@dataclass
class AttentionSlot:
    """Where one attention layer keeps its query/key/value/output weights (row-vector convention)."""

    num_heads: int
    head_dim: int
    write_qk: Callable[[torch.Tensor, torch.Tensor], None]  # (Q, K): heads x dim x head_dim
    write_vo: Callable[[torch.Tensor, torch.Tensor], None]  # (V: dim x attn_dim, O: attn_dim x dim)


@dataclass
class ViTLayout:
    """The parts of a ViT that the initializers touch."""

    grid_size: tuple[int, int]
    dim: int
    attentions: list[AttentionSlot]
    patch_weight: nn.Parameter  # the patch embedding's weight (out_dim x C x p x p)
    patch_bias: torch.Tensor | None  # and its bias: the same vector added to every patch token
    prefix_tokens: list[torch.Tensor] = field(default_factory=list)  # class/register tokens as block 1 sees them
    write_position_code: Callable[[torch.Tensor], None] | None = None  # (h w) x dim into pos embed


def _fused_qkv_slot(qkv: nn.Linear, proj: nn.Linear, num_heads: int, head_dim: int) -> AttentionSlot:
    attn_dim = num_heads * head_dim

    @torch.no_grad()
    def write_qk(q: torch.Tensor, k: torch.Tensor) -> None:
        qkv.weight[:attn_dim] = q.permute(0, 2, 1).reshape(attn_dim, -1).to(qkv.weight)
        qkv.weight[attn_dim : 2 * attn_dim] = k.permute(0, 2, 1).reshape(attn_dim, -1).to(qkv.weight)
        if qkv.bias is not None:  # a query/key bias would add content-free terms to the logits
            qkv.bias[: 2 * attn_dim].zero_()

    @torch.no_grad()
    def write_vo(v: torch.Tensor, o: torch.Tensor) -> None:
        qkv.weight[2 * attn_dim :] = v.T.to(qkv.weight)
        proj.weight.copy_(o.T.to(proj.weight))

    return AttentionSlot(num_heads, head_dim, write_qk, write_vo)


def _separate_qkv_slot(
    q_proj: nn.Linear, k_proj: nn.Linear, v_proj: nn.Linear, o_proj: nn.Linear, num_heads: int
) -> AttentionSlot:
    head_dim = q_proj.out_features // num_heads

    @torch.no_grad()
    def write_qk(q: torch.Tensor, k: torch.Tensor) -> None:
        for layer, value in ((q_proj, q), (k_proj, k)):
            layer.weight.copy_(value.permute(0, 2, 1).reshape(layer.out_features, -1).to(layer.weight))
            if layer.bias is not None:
                layer.bias.zero_()

    @torch.no_grad()
    def write_vo(v: torch.Tensor, o: torch.Tensor) -> None:
        v_proj.weight.copy_(v.T.to(v_proj.weight))
        o_proj.weight.copy_(o.T.to(o_proj.weight))

    return AttentionSlot(num_heads, head_dim, write_qk, write_vo)


def _patch_slots_writer(pos_embed: nn.Parameter | None, num_prefix: int) -> Callable[[torch.Tensor], None] | None:
    if pos_embed is None:
        return None

    @torch.no_grad()
    def write(code: torch.Tensor) -> None:
        pos_embed[:, num_prefix:] = code.to(pos_embed)

    return write


def _timm_layout(model: nn.Module) -> ViTLayout | None:
    blocks = getattr(model, "blocks", None)
    patch_embed = getattr(model, "patch_embed", None)
    if blocks is None or patch_embed is None or not hasattr(patch_embed, "grid_size"):
        return None
    attentions = []
    for block in blocks:
        attn = getattr(block, "attn", None)
        qkv, proj = getattr(attn, "qkv", None), getattr(attn, "proj", None)
        if not isinstance(qkv, nn.Linear) or not isinstance(proj, nn.Linear):
            return None
        if not isinstance(getattr(attn, "q_norm", nn.Identity()), nn.Identity):
            raise ValueError(
                f"{type(model).__name__} normalizes queries and keys (qk_norm=True); structured init "
                "solves for raw logits and supports only qk_norm=False"
            )
        num_heads = attn.num_heads
        attentions.append(
            _fused_qkv_slot(qkv, proj, num_heads, getattr(attn, "head_dim", qkv.out_features // 3 // num_heads))
        )
    if not attentions:
        return None
    proj = patch_embed.proj
    dim = proj.out_channels
    num_prefix = getattr(model, "num_prefix_tokens", 0)
    pos_embed = getattr(model, "pos_embed", None)
    embeds_prefix = pos_embed is not None and not getattr(model, "no_embed_class", False)
    prefix = [
        t[0].detach() for t in (getattr(model, "cls_token", None), getattr(model, "reg_token", None)) if t is not None
    ]
    prefix_tokens = torch.cat(prefix) if prefix else torch.zeros(0, dim)
    if embeds_prefix and prefix:
        prefix_tokens = prefix_tokens + pos_embed[0, :num_prefix].detach()
    return ViTLayout(
        grid_size=tuple(patch_embed.grid_size),
        dim=dim,
        attentions=attentions,
        patch_weight=proj.weight,
        patch_bias=None if proj.bias is None else proj.bias.detach(),
        prefix_tokens=list(prefix_tokens),
        write_position_code=_patch_slots_writer(pos_embed, num_prefix if embeds_prefix else 0),
    )


def _transformers_layout(model: nn.Module) -> ViTLayout | None:
    base = getattr(model, "vit", model)  # ViTForImageClassification keeps the ViTModel in .vit
    embeddings, config = getattr(base, "embeddings", None), getattr(base, "config", None)
    encoder_layers = getattr(base, "layers", None) or getattr(getattr(base, "encoder", None), "layer", None)
    if embeddings is None or config is None or encoder_layers is None:
        return None
    attentions = []
    for layer in encoder_layers:
        attn = getattr(layer, "attention", None)
        projections = [getattr(attn, name, None) for name in ("q_proj", "k_proj", "v_proj", "o_proj")]
        if not all(isinstance(p, nn.Linear) for p in projections):
            return None
        attentions.append(_separate_qkv_slot(*projections, num_heads=config.num_attention_heads))
    proj = embeddings.patch_embeddings.projection
    dim = proj.out_channels
    image_size, patch_size = config.image_size, config.patch_size
    image_size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    patch_size = (patch_size, patch_size) if isinstance(patch_size, int) else tuple(patch_size)
    pos_embed = getattr(embeddings, "position_embeddings", None)
    cls_token = getattr(embeddings, "cls_token", None)
    prefix_tokens = []
    if cls_token is not None:
        prefix_tokens.append(cls_token[0, 0].detach() + (pos_embed[0, 0].detach() if pos_embed is not None else 0))
    return ViTLayout(
        grid_size=(image_size[0] // patch_size[0], image_size[1] // patch_size[1]),
        dim=dim,
        attentions=attentions,
        patch_weight=proj.weight,
        patch_bias=None if proj.bias is None else proj.bias.detach(),
        prefix_tokens=prefix_tokens,
        write_position_code=_patch_slots_writer(pos_embed, len(prefix_tokens)),
    )


def vit_layout(model: nn.Module) -> ViTLayout:
    """Find the patch grid, attention layers and embeddings of a timm or transformers ViT."""
    for finder in (_timm_layout, _transformers_layout):
        layout = finder(model)
        if layout is not None:
            return layout
    raise ValueError(
        f"{type(model).__name__} has no attention layers structured init can handle; expected a timm "
        "VisionTransformer (blocks[i].attn.qkv) or a transformers ViT (layers[i].attention.q_proj ...)"
    )


def _content_basis(layout: ViTLayout) -> torch.Tensor:
    """Orthonormal basis of what Q/K may read: not the mean, patch bias, prefix tokens or (most of) patch content."""
    # LayerNorm ignores scale, so every vector counts by its direction (a class token starts at ~1e-6)
    hidden = [torch.ones(layout.dim, device=layout.patch_weight.device)]  # LayerNorm removes the mean anyway
    if layout.patch_bias is not None:
        hidden.append(layout.patch_bias)
    hidden += layout.prefix_tokens
    exact = torch.stack([v.float() / v.float().norm().clamp_min(1e-30) for v in hidden], dim=1)
    return impulse.complement_basis(
        layout.dim, exact=exact, approximate=layout.patch_weight.detach().reshape(layout.dim, -1)
    )


def _content_samples(layout: ViTLayout, code: torch.Tensor, seed: int, samples: int = 4) -> torch.Tensor:
    """Pseudo inputs with simulated image content: LayerNorm(code + patch embedding of unit-variance noise)."""
    generator = torch.Generator().manual_seed(int(seed))
    weight = layout.patch_weight.detach().reshape(layout.dim, -1).float().cpu()
    pixels = torch.randn(samples, code.shape[0], weight.shape[1], generator=generator)
    content = pixels @ weight.T + (0 if layout.patch_bias is None else layout.patch_bias.float().cpu())
    return torch.nn.functional.layer_norm(code + content, (layout.dim,), eps=impulse.LAYER_NORM_EPS)


def _block_shifts(layout: ViTLayout, options: ImpulseOptions) -> list[torch.Tensor]:
    """The ``(dy, dx)`` shift of every head, per block (one draw for all blocks unless ``per_layer``)."""
    num_heads = layout.attentions[0].num_heads
    seeds = [options.seed + i if options.per_layer else options.seed for i in range(len(layout.attentions))]
    return [
        impulse.impulse_shifts(num_heads, options.kernel_size, seed, layout.grid_size, options.shift_order)
        for seed in seeds
    ]


def _solver_options(
    options: ImpulseOptions, layout: ViTLayout, basis: torch.Tensor | None, checks: torch.Tensor | None
) -> dict[str, Any]:
    """The keyword arguments of ``options.solver`` (:data:`~structinit_hf.solvers.SOLVERS`) for this model."""
    if options.solver == "svd":  # a Frobenius norm replaces the sharpness: the scale it sets would be undone
        null_keys = len(layout.prefix_tokens) if options.suppress_content else 0
        sharpness = None if options.qk_frobenius else options.sharpness
        return dict(sharpness=sharpness, check_inputs=None if checks is None else checks @ basis, null_keys=null_keys)
    return dict(seed=options.seed)


def _apply_impulse(layout: ViTLayout, options: ImpulseOptions) -> list[list[list[int]]]:
    """Write the impulse init into ``layout``; returns the ``[dy, dx]`` of every head, per block (plain ints)."""
    device = layout.patch_weight.device
    heads = {(slot.num_heads, slot.head_dim) for slot in layout.attentions}
    if len(heads) != 1:
        raise ValueError(f"impulse init needs the same head layout in every block, got {sorted(heads)}")
    num_heads, head_dim = heads.pop()
    grid = layout.grid_size
    impulse.validate_kernel_size(options.kernel_size, grid)
    # the solve assumes the positional part of the pseudo input is the model's position embedding
    code = impulse.pseudo_input(grid, layout.dim, options.pseudo_input.split("+")[0], options.seed, normalize=False)
    code = code * options.position_scale
    if layout.write_position_code is not None:
        layout.write_position_code(code)
    with torch.no_grad():
        layout.patch_weight.mul_(options.patch_embed_scale)
    x = impulse.pseudo_input(grid, layout.dim, options.pseudo_input, options.seed).to(device)
    basis = checks = None
    if options.suppress_content:
        basis = _content_basis(layout).to(device)
        checks = _content_samples(layout, code, options.seed).to(device)

    # one solve for every block at once (heads are independent): the pseudo input is factored once
    block_shifts = _block_shifts(layout, options)
    solved = block_shifts if options.per_layer else block_shifts[:1]
    q, k = impulse.solve_qk(
        x,
        torch.cat(solved),
        grid,
        head_dim,
        options.solver,
        basis=basis,
        qk_frobenius=options.qk_frobenius,
        **_solver_options(options, layout, basis, checks),
    )
    q, k = q.split(num_heads), k.split(num_heads)
    for index, slot in enumerate(layout.attentions):
        slot.write_qk(q[index if options.per_layer else 0], k[index if options.per_layer else 0])
    if options.value_init == "mimetic":
        _apply_mimetic_vo(layout, options.seed)
    return [shifts.tolist() for shifts in block_shifts]


def impulse_block_targets(model: nn.Module, shifts: list[list[list[int]]] | None = None) -> list[torch.Tensor]:
    """The impulse target maps (``heads x N x N``, patch tokens) of every block, from recorded shifts.

    ``shifts`` (per block, ``[dy, dx]`` per head) default to the model's own ``structinit_shifts``, which
    :func:`apply_structured_init` records; pass another model's to check this one against its impulses.
    """
    shifts = getattr(model, "structinit_shifts", None) if shifts is None else shifts
    if shifts is None:
        raise ValueError(
            f"{type(model).__name__} records no impulse shifts (structinit_shifts): it was not built with impulse "
            "init; pass the shifts of one that was"
        )
    grid = vit_layout(model).grid_size
    return [impulse.impulse_targets(grid, torch.tensor(block, dtype=torch.long)) for block in shifts]


def _layer_seed(seed: int, index: int) -> int:
    return seed + 1000 * index  # every layer draws its own Z, as in the paper


def _apply_mimetic_vo(layout: ViTLayout, seed: int) -> None:
    for index, slot in enumerate(layout.attentions):
        slot.write_vo(*mimetic_vo(layout.dim, slot.num_heads * slot.head_dim, seed=_layer_seed(seed, index)))


def _apply_mimetic(layout: ViTLayout, seed: int) -> None:
    for index, slot in enumerate(layout.attentions):
        slot.write_qk(*mimetic_qk(layout.dim, slot.num_heads, slot.head_dim, seed=_layer_seed(seed, index)))
    _apply_mimetic_vo(layout, seed)


def apply_structured_init(model: nn.Module, method: str = "impulse", **options) -> nn.Module:
    """Initialize the attention of a timm or transformers ViT in place and return it.

    ``method`` is ``"impulse"`` (structured init, arXiv 2404.01139; keyword options are the fields
    of :class:`ImpulseOptions`), ``"mimetic"`` (Trockman & Kolter 2023; takes ``seed``) or
    ``"default"`` (leaves the model as it is).  Impulse init also writes its positional code into
    the patch slots of the model's absolute position embedding, since the solve assumes it, and
    records every block's shifts as ``model.structinit_shifts`` (per block, ``[dy, dx]`` per head).
    """
    if method not in INIT_METHODS:
        raise ValueError(f"unknown init method {method!r}; expected one of {', '.join(INIT_METHODS)}")
    if method == "default":
        if options:
            raise ValueError(f"init method 'default' takes no options, got {sorted(options)}")
        return model
    layout = vit_layout(model)
    if method == "impulse":
        model.structinit_shifts = _apply_impulse(layout, ImpulseOptions(**options))
    else:
        unknown = set(options) - {"seed"}
        if unknown:
            raise ValueError(f"init method 'mimetic' takes only 'seed', got {sorted(unknown)}")
        _apply_mimetic(layout, options.get("seed", 0))
    return model
