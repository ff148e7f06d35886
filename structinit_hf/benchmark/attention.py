"""The attention maps of a timm ViT or ConViT, and the numbers read from them.

Every map comes from one reader, timm's ``AttentionExtract`` hooked where each block applies dropout
to its attention (:func:`extract_attention`). For ConViT's gated positional blocks that is the gated mixture
of content and positional attention. :func:`timm_attention_maps` and :func:`patch_attention_maps` return the
maps; the per-block measures read from them are the fit to impulse targets (:func:`block_fidelity`), the
attention entropy (:func:`attention_entropy`) and the init-health rows (:func:`init_health`: spectral norms of
W_q and W_k from :func:`qk_spectral_norms`, entropy, the shift under bf16 autocast and the fit to the targets).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from timm.utils import AttentionExtract
from torch import nn

from ..init.common import unfused_attention
from ..init.impulse import target_fidelity

__all__ = [
    "ATTENTION_MODULES",
    "attention_entropy",
    "block_fidelity",
    "extract_attention",
    "init_health",
    "patch_attention_maps",
    "qk_spectral_norms",
    "swin_target_mass",
    "timm_attention_maps",
]

# where timm's ViT and ConViT blocks (GPSA included) pass each attention map through dropout
ATTENTION_MODULES = ["blocks.*.attn.attn_drop"]


@contextmanager
def extract_attention(model: nn.Module) -> Iterator[AttentionExtract]:
    """timm's ``AttentionExtract`` hooked on every block's attention map of ``model`` (a timm ViT or ConViT).

    Inside the block, each forward of ``model`` leaves the maps (``B x heads x T x T``, in block order) for
    ``extractor.hooks.get_output(device)``; calling ``extractor(images)`` runs a forward and returns them.
    Fused attention never materializes the maps, so it is off meanwhile; ``model`` keeps its train/eval
    mode, and the hooks are removed on exit.
    """
    mode = "train" if model.training else "eval"
    with unfused_attention(model):
        extractor = AttentionExtract(model, names=ATTENTION_MODULES, method="hook", mode=mode)
        try:
            yield extractor
        finally:
            for handle in extractor.hooks._handles:  # timm's FeatureHooks keeps the handles but offers no removal
                handle.remove()


@torch.no_grad()
def timm_attention_maps(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """Attention of every block of a timm ``VisionTransformer`` or ``ConVit`` in eval mode: ``B x heads x T x T``.

    ``T`` counts every token the block sees (class and register tokens first); ``model`` is left in eval mode.
    """
    model.eval()
    with extract_attention(model) as extractor:
        return list(extractor(images).values())


def patch_attention_maps(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """Per block, the attention among patch tokens only (``B x heads x N x N``), prefix tokens dropped.

    Rows keep the weights the patch queries give to patch keys; the share a query gives to a class
    or register token is left out, so rows of models with prefix tokens sum to less than one.
    """
    patches = model.patch_embed.num_patches
    return [m[..., -patches:, -patches:] for m in timm_attention_maps(model, images)]


def block_fidelity(model: nn.Module, images: torch.Tensor, block_targets: list[torch.Tensor]) -> list[dict[str, float]]:
    """Per block, how well the patch-token attention on ``images`` matches the impulse targets.

    Returns ``hit_rate`` (share of valid rows whose argmax is the target) and ``target_mass``
    (mean attention on the target) for each block; see :func:`~structinit_hf.init.impulse.target_fidelity`.
    """
    maps = patch_attention_maps(model, images)
    return [target_fidelity(m, t.to(m.device)) for m, t in zip(maps, block_targets, strict=True)]


@torch.no_grad()
def qk_spectral_norms(model: nn.Module) -> list[tuple[float, float]]:
    """``(||W_q||_2, ||W_k||_2)`` of every block of a timm ``VisionTransformer`` (all heads together)."""
    norms = []
    for block in model.blocks:
        weight = block.attn.qkv.weight.float()
        attn_dim = weight.shape[0] // 3
        norms.append(
            tuple(torch.linalg.matrix_norm(weight[i * attn_dim : (i + 1) * attn_dim], 2).item() for i in (0, 1))
        )
    return norms


def _entropy(attention: torch.Tensor) -> tuple[float, float]:
    """Mean row entropy (nats) of ``... x N x N`` maps renormalised over their N keys, and its share of uniform."""
    attention = attention / attention.sum(-1, keepdim=True)
    entropy = -(attention * attention.clamp_min(1e-30).log()).sum(-1).mean().item()
    return entropy, entropy / math.log(attention.shape[-1])


@torch.no_grad()
def attention_entropy(model: nn.Module, images: torch.Tensor) -> list[float]:
    """Per block, the mean attention entropy of the patch rows as a share of uniform: 1 is uniform attention, near 0
    every row on a single key (attention entropy collapse). For a timm ``VisionTransformer`` or ``ConVit``, freshly
    built or trained; keys that are not patches (class, register tokens) are left out."""
    num_patches = model.patch_embed.num_patches
    return [_entropy(m[..., -num_patches:, -num_patches:])[1] for m in timm_attention_maps(model.eval(), images)]


@torch.no_grad()
def init_health(
    model: nn.Module, images: torch.Tensor, block_targets: list[torch.Tensor] | None = None
) -> list[dict[str, Any]]:
    """One row per block: ``q_norm``, ``k_norm``, ``entropy`` (nats, mean over images, heads and patch rows),
    ``entropy_ratio`` (to uniform attention over the patch tokens), ``bf16_shift`` (mean total-variation distance
    between a row computed in fp32 and under bf16 autocast) and, given ``block_targets`` (heads x N x N per block,
    as :func:`~structinit_hf.init.apply.impulse_block_targets` returns), ``hit_rate`` and ``target_mass``."""
    prefix = getattr(model, "num_prefix_tokens", 0)
    maps = [m[..., prefix:, prefix:] for m in timm_attention_maps(model.eval(), images)]
    with torch.autocast(images.device.type, dtype=torch.bfloat16):
        low = [m[..., prefix:, prefix:].float() for m in timm_attention_maps(model, images)]
    rows = []
    for index, ((q_norm, k_norm), attention, bf16) in enumerate(zip(qk_spectral_norms(model), maps, low, strict=True)):
        shift = 0.5 * (attention - bf16).abs().sum(-1).mean().item()
        # renormalised over patch keys, so a prefix token's share does not count as spread
        entropy, ratio = _entropy(attention)
        attention = attention / attention.sum(-1, keepdim=True)
        row = dict(block=index + 1, q_norm=q_norm, k_norm=k_norm, entropy=entropy, entropy_ratio=ratio)
        row["bf16_shift"] = shift
        if block_targets is not None:
            row.update(target_fidelity(attention, block_targets[index].to(attention.device)))
        rows.append(row)
    return rows


def _window_targets(window: tuple[int, int], shifts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per head and query of a ``Wh x Ww`` window: the key ``query + (dy, dx)`` and whether it is in the window."""
    wh, ww = window
    rows, cols = torch.arange(wh).repeat_interleave(ww), torch.arange(ww).repeat(wh)
    target_rows, target_cols = rows + shifts[:, :1], cols + shifts[:, 1:]
    inside = (target_rows >= 0) & (target_rows < wh) & (target_cols >= 0) & (target_cols < ww)
    return torch.where(inside, target_rows * ww + target_cols, 0), inside


@torch.no_grad()
def swin_target_mass(model: nn.Module, images: torch.Tensor) -> list[dict[str, float]]:
    """Per block of an impulse-initialized timm ``SwinTransformer`` (``model.structinit_shifts``), on ``images``:

    - ``reachable``: share of (query, head) pairs whose target ``query + (dy, dx)`` is in the query's window and not
      masked (a shifted block masks the pairs that wrapped around the image); the others cannot attend to it;
    - ``target_mass``: mean attention on the target over the reachable pairs; ``hit_rate``: share of them whose
      argmax is the target;
    - ``fallback_mass``: for the unreachable pairs, the largest weight any one key gets (mean): where attention goes
      instead (1 / keys is uniform).

    The maps are recomputed from each window attention's inputs as timm's unfused path computes them:
    ``softmax(q k^T / sqrt(d) + bias + mask)``.
    """
    records: list[tuple[nn.Module, torch.Tensor, torch.Tensor | None]] = []
    attentions = [m for m in model.modules() if hasattr(m, "relative_position_bias_table")]

    def keep(module: nn.Module, args: tuple, kwargs: dict) -> None:
        records.append((module, args[0], kwargs.get("mask", args[1] if len(args) > 1 else None)))

    handles = [m.register_forward_pre_hook(keep, with_kwargs=True) for m in attentions]
    try:
        model.eval()(images)
    finally:
        for handle in handles:
            handle.remove()
    rows = []
    for (module, x, mask), shifts in zip(records, model.structinit_shifts, strict=True):
        windows, n, _ = x.shape
        q, k, _ = module.qkv(x).reshape(windows, n, 3, module.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        logits = (q * module.scale) @ k.transpose(-2, -1) + module._get_rel_pos_bias()
        if mask is not None:
            logits = (logits.view(-1, mask.shape[0], module.num_heads, n, n) + mask.unsqueeze(1).unsqueeze(0)).view(
                windows, module.num_heads, n, n
            )
        attention = logits.softmax(-1)
        target, inside = _window_targets(module.window_size, torch.tensor(shifts))
        target, inside = target.to(x.device), inside.to(x.device)
        at_target = attention.gather(-1, target.expand(windows, -1, -1).unsqueeze(-1)).squeeze(-1)
        masked = torch.zeros_like(at_target, dtype=torch.bool)
        if mask is not None:  # a target in another image region than its query (mask -100 between them)
            pair = mask.gather(-1, target.T.unsqueeze(0).expand(mask.shape[0], -1, -1)).permute(0, 2, 1)
            masked = (pair < 0).repeat(windows // mask.shape[0], 1, 1)
        reachable = inside.expand_as(at_target) & ~masked
        hits = attention.argmax(-1) == target
        rows.append(
            dict(
                reachable=reachable.float().mean().item(),
                target_mass=at_target[reachable].mean().item(),
                hit_rate=hits[reachable].float().mean().item(),
                fallback_mass=attention.amax(-1)[~reachable].mean().item() if (~reachable).any() else float("nan"),
            )
        )
    return rows
