"""Where a relative-position or rotary ViT keeps its position term, found by attribute names (no timm import).

- ``"relpos"``: a relative position bias per head and offset over the whole patch grid. A table (timm's
  ``RelPosBias`` in ``vit_relpos_*`` built with ``rel_pos_type='bias'``, timm's BEiT, transformers' BEiT and
  Data2VecVision), or timm's ``RelPosMlp`` (``vit_relpos_*`` and ``vit_srelpos_*`` by default), per block or shared.
- ``"rope"``: rotary attention with a query/key bias (timm's ``AttentionRope``: the ``vit_*_rope_*`` models in
  ``eva.py``, axial or mixed); the rotation turns the shared part of q and k.

:func:`relative_layout` returns a :class:`RelativeLayout` whose slots write each head's impulse there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from . import position_bias, token_mixing
from .common import to_pair
from .layouts import AttentionSlot, _fused_qkv_slot, _separate_qkv_slot, transformers_projections

__all__ = ["RelativeLayout", "RelativeSlot", "relative_layout"]

# a writer takes the heads' shifts and the sharpness and writes the impulse
Writer = Callable[[torch.Tensor, float], None]


@dataclass
class RelativeSlot:
    """One block's attention: its q/k/v/o (for mimetic's forms) and the writer of its position term (``None`` where
    the blocks share one: :attr:`RelativeLayout.shared`)."""

    attention: AttentionSlot
    write_impulse: Writer | None


@dataclass
class RelativeLayout:
    """A ViT whose position is a relative bias or a rotation: patch grid, its blocks, and a shared bias if any."""

    kind: str  # "relpos" or "rope"
    grid_size: tuple[int, int]
    attentions: list[RelativeSlot]
    shared: Writer | None = None  # one bias for every block (timm's shared_rel_pos, BEiT's shared bias)


def _table_writer(table: nn.Parameter, window: tuple[int, int], keys: int) -> Writer:
    """Swin's construction on any relative bias table indexed as timm and transformers index them (query minus key;
    the rows past the window's offsets, class token to patches and back, stay 0)."""
    extra = table.shape[0] - (2 * window[0] - 1) * (2 * window[1] - 1)

    @torch.no_grad()
    def write(shifts: torch.Tensor, sharpness: float) -> None:
        logit = token_mixing.bias_logit(sharpness, keys)
        table.copy_(token_mixing.relative_bias_impulse(window, shifts, logit, extra_rows=extra).to(table))

    return write


def _mlp_writer(rel_pos: nn.Module) -> Writer:
    fc1, fc2 = rel_pos.mlp.fc1, rel_pos.mlp.fc2
    gain, prefix = getattr(rel_pos, "bias_gain", None), getattr(rel_pos, "prefix_tokens", 0)

    @torch.no_grad()
    def write(shifts: torch.Tensor, sharpness: float) -> None:
        coords = rel_pos.rel_coords_log.float().cpu()
        values = position_bias.relpos_mlp_impulse(coords, shifts, sharpness, fc1.out_features, gain, prefix)
        for tensor, value in zip((fc1.weight, fc1.bias, fc2.weight, fc2.bias), values, strict=True):
            if tensor is not None:
                tensor.copy_(value.to(tensor))

    return write


def _bias_writer(module: nn.Module, grid: tuple[int, int], keys: int) -> Writer | None:
    """The writer of a timm ``RelPosBias`` / ``RelPosMlp``, a BEiT bias module or an attention holding a table."""
    if module is None:
        return None
    if hasattr(module, "mlp") and hasattr(module, "rel_coords_log"):
        return _mlp_writer(module)
    table = getattr(module, "relative_position_bias_table", None)
    if isinstance(table, nn.Parameter):
        window = getattr(module, "window_size", None)
        return _table_writer(table, grid if window is None else to_pair(tuple(window), "window_size"), keys)
    return None


def _timm_relative(model: nn.Module) -> RelativeLayout | None:
    blocks, patch_embed = getattr(model, "blocks", None), getattr(model, "patch_embed", None)
    if blocks is None or not hasattr(patch_embed, "grid_size"):
        return None
    grid = tuple(patch_embed.grid_size)
    prefix = getattr(model, "num_prefix_tokens", 0)
    keys = grid[0] * grid[1] + prefix
    rope = getattr(model, "rope", None)
    solved: dict = {}  # a RoPE shared by every block and head: each shift is solved once
    shared = _bias_writer(getattr(model, "shared_rel_pos", None) or getattr(model, "rel_pos_bias", None), grid, keys)
    slots = []
    for block in blocks:
        attn = getattr(block, "attn", None)
        qkv, proj = getattr(attn, "qkv", None), getattr(attn, "proj", None)
        if isinstance(qkv, nn.Linear):
            slot = _fused_qkv_slot(qkv, proj, attn.num_heads, qkv.out_features // 3 // attn.num_heads)
        elif isinstance(getattr(attn, "q_proj", None), nn.Linear):
            slot = _separate_qkv_slot(attn.q_proj, attn.k_proj, attn.v_proj, proj, attn.num_heads)
        else:
            return None
        if rope is not None:
            writer = _rope_writer(model, attn, len(slots), grid, prefix, solved)
            if writer is None:
                return None
        else:
            writer = _bias_writer(getattr(attn, "rel_pos", None) or attn, grid, keys)
            if writer is None and shared is None:
                return None
        slots.append(RelativeSlot(slot, writer))
    kind = "rope" if rope is not None else "relpos"
    return RelativeLayout(kind, grid, slots, shared) if slots else None


def _rope_writer(
    model: nn.Module, attn: nn.Module, index: int, grid: tuple[int, int], prefix: int, solved: dict
) -> Writer | None:
    """Write the heads' query and key biases of a rotary attention (``None`` where it has no key bias to write);
    where every block and head rotates alike (axial RoPE), a shift solved once (kept in ``solved``) serves all."""
    qkv = getattr(attn, "qkv", None)
    attn_dim = attn.num_heads * attn.head_dim
    if isinstance(qkv, nn.Linear) and qkv.bias is not None:
        q_bias, k_bias = qkv.bias[:attn_dim], qkv.bias[attn_dim : 2 * attn_dim]
    elif getattr(getattr(attn, "k_proj", None), "bias", None) is not None:
        q_bias, k_bias = attn.q_proj.bias, attn.k_proj.bias
    else:
        return None

    def solve(embedding: torch.Tensor, shifts: torch.Tensor, sharpness: float) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, _ = position_bias.rope_shared_bias(
            embedding.detach().float().cpu(), grid, shifts, sharpness, attn.scale,
            half=getattr(attn, "rotate_half", False), prefix_tokens=prefix,
        )  # fmt: skip
        return q, k

    @torch.no_grad()
    def write(shifts: torch.Tensor, sharpness: float) -> None:
        embedding = model.rope.get_embed()
        if embedding.dim() == 4:  # per block and head (mixed RoPE)
            q, k = solve(embedding[index], shifts, sharpness)
        else:
            keys = [(tuple(shift), sharpness) for shift in shifts.tolist()]
            new = sorted({key for key in keys if key not in solved})
            if new:
                q_new, k_new = solve(embedding, torch.tensor([key[0] for key in new]), sharpness)
                solved.update({key: (q_new[i], k_new[i]) for i, key in enumerate(new)})
            q, k = (torch.stack([solved[key][part] for key in keys]) for part in (0, 1))
        q_bias.copy_(q.flatten().to(q_bias))
        k_bias.copy_(k.flatten().to(k_bias))

    return write


def _transformers_relative(model: nn.Module) -> RelativeLayout | None:
    base = getattr(model, "base_model", model)
    config, encoder = getattr(base, "config", None), getattr(base, "encoder", None)
    layers = getattr(base, "layers", None) or getattr(encoder, "layer", None)
    if layers is None or config is None or not hasattr(base, "embeddings"):
        return None
    image, patch = to_pair(config.image_size, "image_size"), to_pair(config.patch_size, "patch_size")
    grid = (image[0] // patch[0], image[1] // patch[1])
    prefix = 1 if getattr(base.embeddings, "cls_token", None) is not None else 0
    keys = grid[0] * grid[1] + prefix
    shared = getattr(base, "shared_position_bias", None) or getattr(encoder, "relative_position_bias", None)
    shared = _bias_writer(shared, grid, keys)
    slots = []
    for layer in layers:
        projections, bias = transformers_projections(layer)
        if not all(isinstance(p, nn.Linear) for p in projections):
            return None
        writer = _bias_writer(bias, grid, keys)
        if writer is None and shared is None:
            return None
        slots.append(RelativeSlot(_separate_qkv_slot(*projections, num_heads=config.num_attention_heads), writer))
    return RelativeLayout("relpos", grid, slots, shared) if slots else None


def relative_layout(model: nn.Module) -> RelativeLayout | None:
    """The relative-bias or rotary layout of ``model``, or ``None`` where it has neither (a plain ViT, a Swin ...)."""
    for finder in (_timm_relative, _transformers_relative):
        layout = finder(model)
        if layout is not None:
            return layout
    return None
