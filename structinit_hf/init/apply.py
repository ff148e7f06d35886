"""Apply a named attention initialization to a Vision Transformer (timm or transformers).

The algorithms live in :mod:`.impulse`, :mod:`.solvers` and :mod:`.mimetic`, the options in :mod:`.options`, where a
model keeps its weights in :mod:`.layouts`; this module runs an init on a model.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from . import impulse, solvers
from .common import seeded_generator
from .layouts import ViTLayout, vit_layout
from .mimetic import mimetic_qk, mimetic_vo
from .options import ImpulseOptions, init_settings

__all__ = ["apply_structured_init", "impulse_block_targets"]


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


@contextmanager
def _float32_default() -> Iterator[None]:
    """Create new tensors in float32 inside, whatever the caller's default dtype (``torch.set_default_dtype``, which
    transformers' ``from_config(dtype=...)`` also sets): the solves need it (no half-precision SVD on the CPU) and
    write their results into the model's own dtype."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def apply_structured_init(model: nn.Module, method: str = "impulse", **options) -> nn.Module:
    """Initialize the attention of a timm or transformers ViT in place and return it.

    ``method`` is ``"impulse"`` (structured init, arXiv 2404.01139; keyword options are the fields
    of :class:`ImpulseOptions`), ``"mimetic"`` (Trockman & Kolter 2023; takes ``seed``) or
    ``"default"`` (leaves the model as it is).  Impulse init also writes its positional code into
    the patch slots of the model's absolute position embedding, since the solve assumes it, and
    records every block's shifts as ``model.structinit_shifts`` (per block, ``[dy, dx]`` per head).
    The init computes in float32 and writes into the model's dtype, whatever the default dtype.
    """
    settings = init_settings(method, options)
    if method == "default":
        return model
    layout = vit_layout(model)
    with _float32_default():
        if method == "impulse":
            model.structinit_shifts = _apply_impulse(layout, ImpulseOptions(**options))
        else:
            _apply_mimetic(layout, settings["seed"])
    return model
