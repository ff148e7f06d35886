"""Where a model keeps what the inits write, found by attribute names (no timm import).

ViTs: timm's ``VisionTransformer`` (a fused ``qkv`` Linear per block) and transformers' ViT (separate ``q_proj`` /
``k_proj`` / ``v_proj`` / ``o_proj``): patch grid, attention weights, position code (:func:`vit_layout`).
Swin (timm's ``SwinTransformer``): every window attention's window, relative position bias table and fused ``qkv``
(:func:`swin_layout`). MLP-Mixer, ResMLP, gMLP (timm's ``MlpMixer``): the token grid and every block's token mixer
(:func:`mixer_layout`). :func:`model_family` says which of the three a model is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from .check import InitRefused
from .common import to_pair

__all__ = [
    "AttentionSlot",
    "MixerLayout",
    "SwinLayout",
    "TokenMixerSlot",
    "ViTLayout",
    "WindowAttentionSlot",
    "mixer_layout",
    "model_family",
    "swin_layout",
    "transformers_projections",
    "vit_layout",
]


@dataclass
class AttentionSlot:
    """Where one attention layer keeps its query/key/value/output weights (row-vector convention)."""

    num_heads: int
    head_dim: int
    write_qk: Callable[[torch.Tensor, torch.Tensor], None]  # (Q, K): heads x dim x head_dim
    write_vo: Callable[[torch.Tensor, torch.Tensor], None]  # (V: dim x attn_dim, O: attn_dim x dim)
    dim: int = 0  # the width the attention reads


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

    return AttentionSlot(num_heads, head_dim, write_qk, write_vo, qkv.in_features)


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

    return AttentionSlot(num_heads, head_dim, write_qk, write_vo, q_proj.in_features)


def _plain_heads(attn: nn.Module, slot: AttentionSlot) -> AttentionSlot:
    """CaiT's talking heads mix the heads' logits (``proj_l``) and maps (``proj_w``): writing a head's query/key sets
    both mixes to the identity, so each head keeps its own pattern (training may mix them again)."""
    mixes = [getattr(attn, name, None) for name in ("proj_l", "proj_w")]
    if not all(isinstance(mix, nn.Linear) for mix in mixes):
        return slot
    write_qk = slot.write_qk

    @torch.no_grad()
    def write(q: torch.Tensor, k: torch.Tensor) -> None:
        write_qk(q, k)
        for mix in mixes:
            mix.weight.copy_(torch.eye(mix.out_features, dtype=mix.weight.dtype))
            mix.bias.zero_()

    return AttentionSlot(slot.num_heads, slot.head_dim, write, slot.write_vo, slot.dim)


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
            raise InitRefused(
                model,
                "normalizes queries and keys (qk_norm=True); structured init solves for raw logits and "
                "supports only qk_norm=False",
            )
        num_heads = attn.num_heads
        slot = _fused_qkv_slot(qkv, proj, num_heads, getattr(attn, "head_dim", qkv.out_features // 3 // num_heads))
        attentions.append(_plain_heads(attn, slot))
    if not attentions:
        return None
    proj = patch_embed.proj
    dim = proj.out_channels
    pos_embed = getattr(model, "pos_embed", None)
    grid_tokens = patch_embed.grid_size[0] * patch_embed.grid_size[1]
    num_prefix = pos_embed.shape[1] - grid_tokens if pos_embed is not None else 0  # prefix slots the code spans
    embeds_prefix = num_prefix > 0
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


def transformers_projections(layer: nn.Module) -> tuple[list[nn.Module], nn.Module | None]:
    """q, k, v, o of a transformers layer (ViT's, DeiT's, BEiT's ``q_proj`` ..., Data2VecVision's
    ``attention.attention.query`` ... and ``attention.output.dense``) and the module that may hold its relative bias."""
    attn = getattr(layer, "attention", None)
    projections = [getattr(attn, name, None) for name in ("q_proj", "k_proj", "v_proj", "o_proj")]
    if all(isinstance(p, nn.Linear) for p in projections):
        return projections, getattr(layer, "relative_position_bias", None)
    inner, output = getattr(attn, "attention", None), getattr(getattr(attn, "output", None), "dense", None)
    projections = [getattr(inner, name, None) for name in ("query", "key", "value")] + [output]
    return projections, getattr(inner, "relative_position_bias", None)


def _transformers_layout(model: nn.Module) -> ViTLayout | None:
    base = getattr(model, "base_model", model)  # ViT, DeiT, BEiT ...ForImageClassification keep theirs in .vit ...
    embeddings, config = getattr(base, "embeddings", None), getattr(base, "config", None)
    encoder_layers = getattr(base, "layers", None) or getattr(getattr(base, "encoder", None), "layer", None)
    if embeddings is None or config is None or encoder_layers is None:
        return None
    attentions = []
    for layer in encoder_layers:
        projections, _ = transformers_projections(layer)
        if not all(isinstance(p, nn.Linear) for p in projections):
            return None
        attentions.append(_separate_qkv_slot(*projections, num_heads=config.num_attention_heads))
    proj = embeddings.patch_embeddings.projection
    dim = proj.out_channels
    image_size, patch_size = to_pair(config.image_size, "image_size"), to_pair(config.patch_size, "patch_size")
    pos_embed = getattr(embeddings, "position_embeddings", None)
    prefix_tokens = []  # the class token, and DeiT's distillation token, each with its position slot
    for name in ("cls_token", "distillation_token"):
        token = getattr(embeddings, name, None)
        if token is not None:
            slot = pos_embed[0, len(prefix_tokens)].detach() if pos_embed is not None else 0
            prefix_tokens.append(token[0, 0].detach() + slot)
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
    raise InitRefused(
        model,
        "has no attention layers structured init can handle; expected a timm VisionTransformer "
        "(blocks[i].attn.qkv) or a transformers ViT (layers[i].attention.q_proj ...)",
    )


@dataclass
class WindowAttentionSlot:
    """One Swin window attention: its window, relative position bias table (``(2Wh-1)(2Ww-1) x heads``) and q/k/v."""

    window_size: tuple[int, int]
    dim: int
    bias_table: nn.Parameter
    attention: AttentionSlot


@dataclass
class SwinLayout:
    """The window attentions of a Swin Transformer, block by block through the stages."""

    attentions: list[WindowAttentionSlot]


@dataclass
class TokenMixerSlot:
    """One block's token mixer: ``"mlp"`` (a Mixer's ``fc1``, ``fc2`` over tokens), ``"glu"`` (a gated MLP: ``fc1``
    makes a value half and a gate half, ``fc2`` reads their product; ``gate`` is the activation's output at the gate
    logit 1, ``gate_last`` which half gates) or ``"linear"`` (ResMLP's ``linear_tokens``, gMLP's spatial gating
    ``proj``: one tokens x tokens Linear)."""

    kind: str
    layers: tuple[nn.Linear, ...]
    gate: float = 1.0
    gate_last: bool = True


@dataclass
class MixerLayout:
    """The token grid of an MLP-Mixer-style model and every block's token mixer."""

    grid_size: tuple[int, int]
    mixers: list[TokenMixerSlot]


def _swin_layout(model: nn.Module) -> SwinLayout | None:
    stages = getattr(model, "layers", None)
    if stages is None or not hasattr(model, "patch_embed"):
        return None
    attentions = []
    for stage in stages:
        for block in getattr(stage, "blocks", ()):
            attn = getattr(block, "attn", None)
            table, qkv = getattr(attn, "relative_position_bias_table", None), getattr(attn, "qkv", None)
            if not isinstance(table, nn.Parameter) or not isinstance(qkv, nn.Linear):
                return None
            head_dim = qkv.out_features // 3 // attn.num_heads
            slot = _fused_qkv_slot(qkv, attn.proj, attn.num_heads, head_dim)
            attentions.append(WindowAttentionSlot(tuple(attn.window_size), qkv.in_features, table, slot))
    return SwinLayout(attentions) if attentions else None


def _mixer_layout(model: nn.Module) -> MixerLayout | None:
    stem, blocks = getattr(model, "stem", None), getattr(model, "blocks", None)
    if blocks is None or not hasattr(stem, "grid_size"):
        return None
    mixers = []
    for block in blocks:
        tokens = getattr(block, "mlp_tokens", None)
        gate = getattr(getattr(getattr(block, "mlp_channels", None), "gate", None), "proj", None)
        linear = getattr(block, "linear_tokens", None) or gate
        fc1, fc2 = getattr(tokens, "fc1", None), getattr(tokens, "fc2", None)
        if isinstance(fc1, nn.Linear) and isinstance(fc2, nn.Linear) and fc1.out_features == 2 * fc2.in_features:
            gate = float(tokens.act(torch.ones(())))  # GluMlp: x1 * act(x2), or act(x1) * x2
            mixers.append(TokenMixerSlot("glu", (fc1, fc2), gate, getattr(tokens, "gate_last", True)))
        elif isinstance(fc1, nn.Linear) and isinstance(fc2, nn.Linear):
            mixers.append(TokenMixerSlot("mlp", (fc1, fc2)))
        elif isinstance(linear, nn.Linear):
            mixers.append(TokenMixerSlot("linear", (linear,)))
        else:
            return None
    return MixerLayout(tuple(stem.grid_size), mixers) if mixers else None


def swin_layout(model: nn.Module) -> SwinLayout:
    """Find the window attentions of a timm ``SwinTransformer`` (``layers[i].blocks[j].attn``)."""
    layout = _swin_layout(model)
    if layout is None:
        raise InitRefused(model, "is not a Swin Transformer (layers[i].blocks[j].attn with a bias table)")
    return layout


def mixer_layout(model: nn.Module) -> MixerLayout:
    """Find the token grid and token mixers of a timm ``MlpMixer`` (Mixer, ResMLP or gMLP blocks)."""
    layout = _mixer_layout(model)
    if layout is None:
        raise InitRefused(model, "is not an MLP-Mixer (stem.grid_size, blocks[i] with a token mixer)")
    return layout


def model_family(model: nn.Module) -> str:
    """``"vit"``, ``"swin"`` or ``"mixer"``: which layout ``model`` has. :class:`~.check.InitRefused` for none."""
    if _timm_layout(model) is not None or _transformers_layout(model) is not None:
        return "vit"
    if _swin_layout(model) is not None:
        return "swin"
    if _mixer_layout(model) is not None:
        return "mixer"
    raise InitRefused(
        model,
        "has no attention layers structured init can handle; expected a timm VisionTransformer "
        "(blocks[i].attn.qkv), a transformers ViT (layers[i].attention.q_proj ...), a timm SwinTransformer "
        "(layers[i].blocks[j].attn.relative_position_bias_table) or a timm MlpMixer (blocks[i].mlp_tokens)",
    )
