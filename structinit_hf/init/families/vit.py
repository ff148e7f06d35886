"""The plain ViT family (timm's ``VisionTransformer``, DeiT-III, transformers' ViT and DeiT): each head's Q/K solved
on a positional pseudo input, the position code written into the patch slots of the model's absolute position
embedding (the solve assumes it), then the self-check."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .. import impulse, solvers
from ..check import InitRefused
from ..common import seeded_generator
from ..layouts import ViTLayout, vit_layout
from ..options import ImpulseOptions
from .shared import check_impulse, mimetic_slots, mimetic_vo_slots

__all__ = ["impulse_init", "mimetic_init"]


def impulse_init(model: nn.Module, options: ImpulseOptions) -> None:
    """Write the impulse into ``model``, record its shifts (``structinit_shifts``) and check the pattern."""
    layout = vit_layout(model)
    if layout.write_position_code is None:
        raise InitRefused(
            model, "has no absolute position embedding, relative position bias or rotary query/key bias for "
            "the impulse init to write its pattern into"
        )  # fmt: skip
    model.structinit_shifts, tokens = _apply_impulse(layout, options)
    check_impulse(model, layout.grid_size, tokens, layout.prefix_tokens)


def mimetic_init(model: nn.Module, seed: int) -> None:
    mimetic_slots(vit_layout(model).attentions, seed)


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
        mimetic_vo_slots(layout.attentions, options.seed)
    return [shifts.tolist() for shifts in block_shifts], x
