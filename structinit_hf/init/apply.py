"""Apply a named attention initialization to a Vision Transformer (timm or transformers), a Swin or an MLP-Mixer.

The algorithms live in :mod:`.impulse`, :mod:`.solvers`, :mod:`.token_mixing` and :mod:`.mimetic`, the options in
:mod:`.options`, where a model keeps its weights in :mod:`.layouts`; this module runs an init on a model.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn

from . import impulse, solvers, token_mixing
from .check import InitRefused, attention_blocks, block_patterns, require_pattern
from .common import seeded_generator
from .control import norm_matched
from .layer_scale import (
    KEEP,
    attention_layer_scale,
    attention_scales,
    default_layer_scale,
    layer_scale_sites,
    set_attention_scale,
)
from .layouts import (
    AttentionSlot,
    MixerLayout,
    SwinLayout,
    ViTLayout,
    mixer_layout,
    model_family,
    swin_layout,
    vit_layout,
)
from .mimetic import mimetic_qk, mimetic_vo
from .mlp import mimetic_mlp
from .options import (
    FAMILIES,
    FAMILY_IMPULSE_DEFAULTS,
    FAMILY_METHODS,
    INIT_METHODS,
    ImpulseOptions,
    MixerImpulseOptions,
    SwinImpulseOptions,
    family_options,
    init_settings,
)
from .relative_layouts import RelativeLayout, relative_layout

__all__ = [
    "RECORDS",
    "InitRefused",
    "apply_structured_init",
    "impulse_block_targets",
    "init_family",
    "init_record",
    "init_refusal",
    "said_changes",
]


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
    generator = seeded_generator(seed)
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
    """The keyword arguments of ``options.solver`` (:data:`~structinit_hf.init.solvers.SOLVERS`) for this model."""
    if options.solver == "svd":  # a Frobenius norm replaces the sharpness: the scale it sets would be undone
        null_keys = len(layout.prefix_tokens) if options.suppress_content else 0
        sharpness = None if options.qk_frobenius else options.sharpness
        return dict(sharpness=sharpness, check_inputs=None if checks is None else checks @ basis, null_keys=null_keys)
    return dict(seed=options.seed)


def _apply_impulse(layout: ViTLayout, options: ImpulseOptions) -> tuple[list[list[list[int]]], torch.Tensor]:
    """Write the impulse init into ``layout``; returns the ``[dy, dx]`` of every head, per block (plain ints), and
    the pseudo input the solve read (``N x D``)."""
    device = layout.patch_weight.device if not layout.patch_weight.is_meta else torch.device("cpu")
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
    q, k = solvers.solve_qk(
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
    return [shifts.tolist() for shifts in block_shifts], x


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
    relative = relative_layout(model)
    grid = relative.grid_size if relative is not None else vit_layout(model).grid_size
    return [impulse.impulse_targets(grid, torch.tensor(block, dtype=torch.long)) for block in shifts]


def _layer_seed(seed: int, index: int) -> int:
    return seed + 1000 * index  # every layer draws its own Z, as in the paper


def _apply_mimetic_vo(layout: ViTLayout, seed: int) -> None:
    for index, slot in enumerate(layout.attentions):
        slot.write_vo(*mimetic_vo(layout.dim, slot.num_heads * slot.head_dim, seed=_layer_seed(seed, index)))


def _apply_mimetic(slots: list[AttentionSlot], seed: int) -> None:
    for index, slot in enumerate(slots):
        slot.write_qk(*mimetic_qk(slot.dim, slot.num_heads, slot.head_dim, seed=_layer_seed(seed, index)))
        slot.write_vo(*mimetic_vo(slot.dim, slot.num_heads * slot.head_dim, seed=_layer_seed(seed, index)))


def _draw_shifts(counts: list[int], kernel_size: int, seed: int, per_layer: bool, order: str) -> list[torch.Tensor]:
    """``counts[i]`` shifts for block ``i`` from the ``k x k`` window: seed ``seed + i`` if ``per_layer``, else
    ``seed`` for every block (blocks of more heads then extend the same draw)."""
    return [
        impulse.impulse_shifts(count, kernel_size, seed + index if per_layer else seed, order=order)
        for index, count in enumerate(counts)
    ]


def _apply_swin_impulse(layout: SwinLayout, options: SwinImpulseOptions) -> list[list[list[int]]]:
    """Write each head's impulse into its window's relative position bias (exact: no solve); returns the ``[dy, dx]``
    of every head per block, clipped to the offsets its window has."""
    counts = [slot.attention.num_heads for slot in layout.attentions]
    drawn = _draw_shifts(counts, options.kernel_size, options.seed, options.per_layer, options.shift_order)
    recorded = []
    for index, (slot, shifts) in enumerate(zip(layout.attentions, drawn, strict=True)):
        keys = slot.window_size[0] * slot.window_size[1]
        table = token_mixing.relative_bias_impulse(
            slot.window_size, shifts, token_mixing.bias_logit(options.sharpness, keys)
        )
        with torch.no_grad():
            slot.bias_table.copy_(table.to(slot.bias_table))
        if options.value_init == "mimetic":
            attn = slot.attention
            attn.write_vo(*mimetic_vo(slot.dim, attn.num_heads * attn.head_dim, seed=_layer_seed(options.seed, index)))
        recorded.append(token_mixing.clip_shifts(shifts, slot.window_size).tolist())
    return recorded


def _apply_swin_mimetic(layout: SwinLayout, seed: int) -> None:
    for index, slot in enumerate(layout.attentions):
        attn, layer_seed = slot.attention, _layer_seed(seed, index)
        attn.write_qk(*mimetic_qk(slot.dim, attn.num_heads, attn.head_dim, seed=layer_seed))
        attn.write_vo(*mimetic_vo(slot.dim, attn.num_heads * attn.head_dim, seed=layer_seed))


def _apply_relative_impulse(layout: RelativeLayout, options: SwinImpulseOptions) -> list[list[list[int]]]:
    """Write each head's impulse into its block's relative position term (a bias table or MLP, or a rotary head's
    query/key biases); a bias shared by every block takes block 0's shifts, recorded for every block."""
    counts = [slot.attention.num_heads for slot in layout.attentions]
    per_layer = options.per_layer and layout.shared is None
    drawn = _draw_shifts(counts, options.kernel_size, options.seed, per_layer, options.shift_order)
    impulse.validate_kernel_size(options.kernel_size, layout.grid_size)
    if layout.shared is not None:
        layout.shared(drawn[0], options.sharpness)
    for index, (slot, shifts) in enumerate(zip(layout.attentions, drawn, strict=True)):
        if slot.write_impulse is not None:
            slot.write_impulse(shifts, options.sharpness)
        if options.value_init == "mimetic":
            attn, seed = slot.attention, _layer_seed(options.seed, index)
            attn.write_vo(*mimetic_vo(attn.dim, attn.num_heads * attn.head_dim, seed=seed))
    return [shifts.tolist() for shifts in drawn]


def _apply_mixer_impulse(layout: MixerLayout, options: MixerImpulseOptions) -> list[list[list[int]]]:
    """Make every block's token mixer the average of its shifts (a Mixer's MLP through
    :func:`~.token_mixing.token_mlp_weights`, a single linear map exactly); returns the shifts per block."""
    kernel = options.kernel_size
    impulse.validate_kernel_size(kernel, layout.grid_size)
    counts = [options.num_shifts] * len(layout.mixers)
    drawn = _draw_shifts(counts, kernel, options.seed, options.per_layer, options.shift_order)
    for slot, shifts in zip(layout.mixers, drawn, strict=True):
        target = token_mixing.shift_mixing(layout.grid_size, shifts)
        if slot.kind == "mlp":
            fc1, fc2 = slot.layers
            values = token_mixing.token_mlp_weights(target, fc1.out_features, options.token_mlp)
            tensors = (fc1.weight, fc1.bias, fc2.weight, fc2.bias)
        elif slot.kind == "glu":
            fc1, fc2 = slot.layers
            values = token_mixing.token_glu_weights(target, fc2.in_features, slot.gate, slot.gate_last)
            tensors = (fc1.weight, fc1.bias, fc2.weight, fc2.bias)
        else:
            values, tensors = (target, torch.zeros(len(target))), (slot.layers[0].weight, slot.layers[0].bias)
        with torch.no_grad():
            for tensor, value in zip(tensors, values, strict=False):
                if tensor is not None:
                    tensor.copy_(value.to(tensor))
    return [shifts.tolist() for shifts in drawn]


@contextmanager
def _init_defaults() -> Iterator[None]:
    """Create new tensors in float32 and on the CPU inside, whatever the caller's defaults. The dtype: the solves need
    float32 (no half-precision SVD on the CPU) and write their results into the model's own dtype, whatever
    ``torch.set_default_dtype`` (which transformers' ``from_config(dtype=...)`` also sets) says. The device: every draw
    uses a seeded CPU generator, which a ``with torch.device("cuda")`` build would otherwise refuse; what runs on the
    model's device says so (the ViT's solve), and a value copied into a meta parameter is dropped."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        if torch.empty(()).device.type == "cpu":  # no device mode to undo: none is entered (one costs every torch call)
            yield
        else:
            with torch.device("cpu"):
                yield
    finally:
        torch.set_default_dtype(previous)


def init_family(model: nn.Module) -> tuple[str, RelativeLayout | None]:
    """Which init family ``model`` is (:data:`~.options.FAMILIES`), and its relative layout where it has one."""
    relative = relative_layout(model)
    return (relative.kind, relative) if relative is not None else (model_family(model), None)


def _check_impulse(
    model: nn.Module, grid: tuple[int, int], tokens: torch.Tensor, prefix_tokens: list[torch.Tensor] | None = None
) -> None:
    """Measure the written pattern per block (``model.structinit_check``) and refuse where it falls short; a ViT's
    ``prefix_tokens`` (its class and register tokens, maybe none) with ``tokens`` are every token a block sees."""
    if any(p.is_meta for p in model.parameters()) or not attention_blocks(model):
        return
    prefix = None if prefix_tokens is None else torch.stack(prefix_tokens) if prefix_tokens else tokens[:0]
    model.structinit_check = block_patterns(model, model.structinit_shifts, grid, tokens, prefix)
    require_pattern(model, model.structinit_check)


def _apply(model: nn.Module, method: str, family: str, relative: RelativeLayout | None, settings: dict,
           options: dict) -> None:  # fmt: skip
    if family == "swin":
        layout = swin_layout(model)
        if method == "impulse":
            model.structinit_shifts = _apply_swin_impulse(layout, SwinImpulseOptions(**options))
        else:
            _apply_swin_mimetic(layout, settings["seed"])
    elif family == "mixer":
        model.structinit_shifts = _apply_mixer_impulse(mixer_layout(model), MixerImpulseOptions(**options))
    elif relative is not None and method == "impulse":
        model.structinit_shifts = _apply_relative_impulse(relative, SwinImpulseOptions(**options))
        dim = relative.attentions[0].attention.dim
        tokens = impulse.pseudo_input(relative.grid_size, dim, "gaussian", settings["seed"])
        _check_impulse(model, relative.grid_size, tokens)
    elif relative is not None:
        _apply_mimetic([slot.attention for slot in relative.attentions], settings["seed"])
    elif method == "impulse":
        layout = vit_layout(model)
        if layout.write_position_code is None:
            raise InitRefused(
                model, "has no absolute position embedding, relative position bias or rotary query/key bias for "
                "the impulse init to write its pattern into"
            )  # fmt: skip
        model.structinit_shifts, tokens = _apply_impulse(layout, ImpulseOptions(**options))
        _check_impulse(model, layout.grid_size, tokens, layout.prefix_tokens)
    else:
        _apply_mimetic(vit_layout(model).attentions, settings["seed"])


def _open_attention_scale(model: nn.Module, value: float) -> None:
    """Start every block's attention-branch layer scale at ``value`` (the impulse's ``attn_layer_scale``)."""
    if not set_attention_scale(model, value):
        raise InitRefused(
            model, f"has no layer scale on its attention branch for attn_layer_scale={value!r} to set (the option is "
            "for layer-scaled ViTs: docs/method.md lists where each keeps it)"
        )  # fmt: skip


def init_refusal(model: nn.Module, method: str = "impulse", **options) -> str | None:
    """Why ``model`` refuses init ``method`` with ``options`` (the one-line message), or ``None`` where it takes it.

    Runs the init on a copy of ``model`` (its self-check included); ``model`` is not touched. A bad option is still an
    error (``ValueError``), not a refusal.
    """
    if method == "default":
        return None
    try:
        with said_changes():  # a question, not a change: nothing to say
            apply_structured_init(copy.deepcopy(model), method, **options)
    except InitRefused as error:
        return str(error)
    return None


# what an init records on the model; a failed init leaves the last one's. The shifts and the check are the last init's;
# what a family default or a given scale wrote (structinit_defaults, structinit_layer_scale) stays while the weights
# hold it, through later inits that leave it alone
RECORDS = ("structinit_shifts", "structinit_check", "structinit_defaults", "structinit_layer_scale")

logger = logging.getLogger(__name__)

# where apply_structured_init puts its line of what it changed beyond the attention: a list (said_changes) or the log
_SAID: ContextVar[list[str] | None] = ContextVar("structinit_said", default=None)


@contextmanager
def said_changes() -> Iterator[list[str]]:
    """Collect, instead of logging them, the lines :func:`apply_structured_init` says of what it changed beyond the
    attention (a layer scale, value/output by a family default): for a caller that reports them itself."""
    lines: list[str] = []
    token = _SAID.set(lines)
    try:
        yield lines
    finally:
        _SAID.reset(token)


_FAMILY_WORDS = {"rope": "rotary", "relpos": "relative-position"}


def _say(line: str) -> None:
    lines = _SAID.get()
    if lines is None:
        logger.warning(line)
    else:
        lines.append(line)


def _family_defaults(family: str, options: dict) -> dict[str, Any]:
    """The family's impulse defaults (:data:`~.options.FAMILY_IMPULSE_DEFAULTS`) that ``options`` leave to it."""
    return {k: v for k, v in FAMILY_IMPULSE_DEFAULTS.get(family, {}).items() if k not in options}


def _layer_scale_plan(model: nn.Module, given: Any) -> tuple[float | None, str | None]:
    """``(the value the attention scale is set to or None, its source)`` for ``attn_layer_scale=given``: a number is
    ``"given"``; ``KEEP`` keeps the model's own; not given (``None``), the default of :data:`~.layer_scale.LAYER_SCALES`
    where the model's blocks take one (``"family default"``), else the model's own. The source is ``None`` where the
    model has no layer scale and none is set."""
    if given is not None and given != KEEP:
        return given, "given"
    opened = default_layer_scale(model) if given is None else None
    if opened is not None:
        return opened, "family default"
    return None, ("model's own" if attention_scales(model) else None)


def _scale_line(model: nn.Module, before: float | None, after: float, source: str) -> str:
    sites = layer_scale_sites(model)
    site = sites[0][0]
    where = f"{site.attribute}, {len(sites)} blocks"
    why = (
        f"the default for a {site.library} {site.block} built at {site.opens[0]:g}"
        if source == "family default" and site.opens
        else f"attn_layer_scale={after!r} given"
    )
    keep = f"attn_layer_scale={KEEP!r} keeps the model's own"
    return f"attention layer scale ({where}) {before:g} -> {after:g}, {why} ({keep})"


def _kept_records(model: nn.Module, method: str, settings: dict, scale_set: bool) -> dict[str, Any]:
    """What the last inits' defaults wrote that this one leaves in the weights (the records that stay)."""
    defaults = dict(model.__dict__.get("structinit_defaults") or {})
    if scale_set:
        defaults.pop("attn_layer_scale", None)
    if method == "mimetic" or settings.get("value_init") == "mimetic":  # value/output written again
        defaults.pop("value_init", None)
    layer_scale = None if scale_set else model.__dict__.get("structinit_layer_scale")
    return {"structinit_defaults": defaults, "structinit_layer_scale": layer_scale}


def init_record(model: nn.Module) -> dict[str, Any]:
    """What the weights hold beyond the last init's settings, for a run's init record: the family defaults in force
    (:attr:`structinit_defaults`) and, where the model has a layer scale, its value and where it came from
    (``attn_layer_scale_source``: ``"family default"``, ``"given"`` or ``"model's own"``)."""
    record = dict(model.__dict__.get("structinit_defaults") or {})
    layer_scale = model.__dict__.get("structinit_layer_scale")
    if layer_scale is not None:
        if layer_scale["source"] != "model's own":
            record["attn_layer_scale"] = layer_scale["attn_layer_scale"]
        record["attn_layer_scale_source"] = layer_scale["source"]
    return record


def _tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from model.named_parameters()
    yield from model.named_buffers()


def _snapshot(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every parameter and buffer of ``model`` (non-persistent ones too) and its init records, as they are now."""
    with torch.no_grad():
        tensors = {name: tensor.clone() for name, tensor in _tensors(model) if not tensor.is_meta}
    return tensors, {name: model.__dict__[name] for name in RECORDS if name in model.__dict__}


def _restore(model: nn.Module, saved: tuple[dict[str, torch.Tensor], dict[str, Any]]) -> None:
    tensors, records = saved
    with torch.no_grad():
        for name, tensor in _tensors(model):
            if name in tensors:
                tensor.copy_(tensors[name])
    for name in RECORDS:
        model.__dict__.pop(name, None)
    model.__dict__.update(records)


def _foreign_options(family: str, options: dict) -> list[str]:
    """The options given that another family's impulse init takes and ``family``'s does not (a Mixer's value_init)."""
    known = {name for other in FAMILIES for name in family_options(other)}
    return sorted(known.intersection(options) - set(family_options(family)))


def apply_structured_init(model: nn.Module, method: str = "impulse", **options) -> nn.Module:
    """Initialize the attention (or token mixing) of a timm or transformers ViT, a timm Swin Transformer or a timm
    MLP-Mixer in place and return it.

    ``method`` is ``"impulse"`` (structured init, arXiv 2404.01139), ``"mimetic"`` (Trockman & Kolter 2023; takes
    ``seed``; not for a Mixer, which has no attention) or ``"default"`` (leaves the weights as they are). Impulse init's
    keyword options are the fields of the family's options: :class:`ImpulseOptions` (ViT: Q/K solved on a positional
    pseudo input; the positional code is written into the patch slots of the model's absolute position embedding,
    since the solve assumes it), :class:`SwinImpulseOptions` (each head's impulse written exactly into its window's
    relative position bias; also the relative-position ViTs, whose bias table or MLP takes it, and the rotary ViTs,
    whose query/key biases do: :mod:`.relative_layouts`) or :class:`MixerImpulseOptions` (each block's token mixer
    starts as a shift). Every block's shifts are recorded as ``model.structinit_shifts`` (per block, ``[dy, dx]`` per
    head or token mixer shift). The init computes in float32 and writes into the model's dtype, whatever the default
    dtype.

    Beyond the attention, the impulse changes two things by default, where the campaign measured them to pay: the
    attention branch's layer scale of the block classes :data:`~.layer_scale.LAYER_SCALES` opens (DeiT-III's timm
    ``Block`` at 1e-6, the RoPE ViTs' ``EvaBlock`` at 1e-5: opened to 1, and only where the scale is still at that
    built value, so a scale the user chose or trained is kept), and a rotary ViT's value/output projections
    (mimetic: :data:`~.options.FAMILY_IMPULSE_DEFAULTS`). An option given overrides them: ``attn_layer_scale=<number>``
    sets the scale on any layer-scaled block, ``attn_layer_scale="model"`` (:data:`~.layer_scale.KEEP`) keeps the
    model's own, ``value_init="default"`` keeps value/output as drawn. What the call changed beyond the attention is
    said in one line on the logger ``structinit_hf.init.apply`` (a ``logging`` WARNING, printed by default as
    transformers' notices are; ``logging.getLogger("structinit_hf").setLevel(logging.ERROR)`` silences it); the
    defaults in force are recorded as ``model.structinit_defaults`` and the scale's value, value before and source
    (``"family default"``, ``"given"``, ``"model's own"``) as ``model.structinit_layer_scale``: both stay through a
    later init that leaves them in the weights (:func:`init_record` reads them for a run's record); the shifts and
    the check are the last init's (:data:`RECORDS`).

    A ViT's impulse init checks itself (:mod:`.check`): every block's attention on the init's pseudo input is recorded
    as ``model.structinit_check`` (``target_mass``, ``hit_rate``, ``uniform`` per block), and the init is refused
    where a block falls short of the check's bar (:func:`~.check.require_pattern`).

    A model the init cannot serve (no layout it knows, a method its family does not take, a shape the construction
    cannot fill, the self-check's verdict) raises :class:`InitRefused` (a ``ValueError``, one line naming the model
    class and why); a bad option is a plain ``ValueError``, raised before anything is written. On any exception the
    model is put back as it was: every parameter and buffer, and its records. :func:`init_refusal` asks the question
    without touching the model.
    """
    if method == "default":
        settings = init_settings(method, options)
        for name in ("structinit_shifts", "structinit_check"):
            model.__dict__.pop(name, None)
        if settings.get("mlp_init") == "mimetic":
            with _init_defaults():
                mimetic_mlp(model)
        return model
    family, relative = init_family(model)
    if method in INIT_METHODS and method not in FAMILY_METHODS[family]:
        raise InitRefused(model, f"init method {method!r} does not apply to a {family} model; it takes "
                          f"{', '.join(FAMILY_METHODS[family])}")  # fmt: skip
    foreign = _foreign_options(family, options) if method == "impulse" else []
    if foreign:
        raise InitRefused(model, f"is a {family} model, whose impulse init has no {', '.join(foreign)}")
    defaults = _family_defaults(family, options) if method == "impulse" else {}
    settings = init_settings(method, {**defaults, **options}, family)  # a bad option is the caller's error
    scale, source = _layer_scale_plan(model, settings.get("attn_layer_scale")) if method == "impulse" else (None, None)
    if source is None and method == "mimetic" and attention_scales(model):
        source = "model's own"
    if source == "family default":
        defaults["attn_layer_scale"] = scale
    before = attention_layer_scale(model)
    saved = _snapshot(model)
    try:
        kept = _kept_records(model, method, settings, scale is not None)
        for name in RECORDS:
            model.__dict__.pop(name, None)
        with _init_defaults():
            if scale is not None:
                _open_attention_scale(model, scale)
            _apply(model, method, family, relative, settings, {**defaults, **options})
            if settings.get("mlp_init") == "mimetic":
                mimetic_mlp(model)
            if settings.get("control") is not None:  # the pattern goes: what the model records of it goes too
                norm_matched(model, saved[0], settings["seed"])
                for name in ("structinit_shifts", "structinit_check"):
                    model.__dict__.pop(name, None)
    except BaseException as error:
        _restore(model, saved)
        if isinstance(error, ValueError) and not isinstance(error, InitRefused):  # valid options: the model's shape
            raise InitRefused(model, str(error)) from error
        raise
    records = {**kept["structinit_defaults"], **defaults}
    if records:
        model.structinit_defaults = records
    if scale is not None or (source is not None and kept["structinit_layer_scale"] is None):
        model.structinit_layer_scale = {"attn_layer_scale": attention_layer_scale(model), "before": before,
                                        "source": source}  # fmt: skip
    elif kept["structinit_layer_scale"] is not None:
        model.structinit_layer_scale = kept["structinit_layer_scale"]
    changes = [_scale_line(model, before, scale, source)] if scale is not None and before is not None else []
    if "value_init" in defaults:
        changes.append(
            f"value/output projections written as mimetic's, the default for a {_FAMILY_WORDS.get(family, family)} "
            "ViT (value_init='default' keeps them as drawn)"
        )
    if changes:
        _say(f"structinit_hf: {method} init on {type(model).__name__}: {'; '.join(changes)}")
    return model
