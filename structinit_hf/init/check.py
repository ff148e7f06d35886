"""The impulse init checks what it wrote: every block's attention, measured on the init's own pseudo input.

Each block is fed the pseudo input in place of its tokens (a forward pre-hook; a ViT's class and register
tokens as its solve assumed them, a relative or rotary ViT's as the model makes them from an all-zero image) and
its attention map is read where the model computes it: timm's unfused path passes it through ``attn_drop``
(hooked), transformers returns it with ``output_attentions``. So the check sees the model's own attention code:
its bias tables, rotations and talking heads included. Pure torch, found by attribute names.

A block reaches its pattern when the mean attention on each head's target (over the queries whose target is inside
the grid) is at least :data:`MIN_GAIN` times uniform attention (``1 / keys``, about what timm's default init gives)
and the target is the largest weight of at least :data:`MIN_HIT_RATE` of those queries; where a block falls short,
the init refuses (:class:`InitRefused`) and the model is put back as it was.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch import nn

from .common import to_pair, unfused_attention
from .impulse import index_fidelity
from .solvers import shift_index

__all__ = [
    "MIN_GAIN",
    "MIN_HIT_RATE",
    "InitRefused",
    "attention_blocks",
    "attention_maps",
    "block_patterns",
    "require_pattern",
    "target_patterns",
]

# The self-check's bar, every block on the init's pseudo input. Mass on target x uniform: above stock timm (about 1),
# below the softest construction (`shift` on a 4 x 4 grid, 1.76). Hit rate: above chance (1 / keys; EVA-02 at the
# coverage table's geometry, 0.000-0.014 over seeds 0-2), below the softest construction (`shift` at width 48: a
# ViT with a class token, DeiT-III among them, 0.054-0.157 over seeds 0-11, without one 0.18-0.22; the bias and rotary
# constructions reach 0.99-1.00).
MIN_GAIN = 1.5
MIN_HIT_RATE = 0.03


class InitRefused(ValueError):
    """An init that cannot reach its target on this model; the message is one line naming the model class and why."""

    def __init__(self, model: nn.Module, reason: str) -> None:
        super().__init__(f"{type(model).__name__}: {reason}")


def _blocks(model: nn.Module) -> tuple[list[nn.Module], bool]:
    """The blocks whose input the check replaces, and whether they are transformers layers."""
    blocks = getattr(model, "blocks", None)
    if blocks is not None and hasattr(getattr(model, "patch_embed", None), "grid_size"):
        return list(blocks), False
    base = getattr(model, "base_model", model)
    layers = getattr(base, "layers", None) or getattr(getattr(base, "encoder", None), "layer", None)
    return list(layers or ()), True


def attention_blocks(model: nn.Module) -> int:
    """How many attention blocks the check measures (0: it cannot measure this model)."""
    return len(_blocks(model)[0])


def _image(model: nn.Module, transformers: bool) -> torch.Tensor:
    parameter = next(model.parameters())
    if transformers:
        config = model.config
        size = config.image_size if isinstance(config.image_size, (tuple, list)) else (config.image_size,) * 2
        channels = config.num_channels
    else:
        size, channels = tuple(model.patch_embed.img_size), model.patch_embed.proj.in_channels
    return torch.zeros(1, channels, *size, device=parameter.device, dtype=parameter.dtype)


@contextmanager
def _fed(blocks: list[nn.Module], tokens: torch.Tensor, every_token: bool = False) -> Iterator[None]:
    """Every block sees ``tokens`` as its last tokens (the patch tokens, or prefix and patch tokens; batch 1); with
    ``every_token``, as all its tokens."""

    def replace(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        hidden = (args[0] if args else kwargs["hidden_states"]).clone()
        if every_token and len(tokens) < hidden.shape[1]:
            raise ValueError(  # apply_structured_init refuses the model in one line (tokens its layout does not know)
                f"has tokens the init's layout does not know (register tokens?): its self-check fed {len(tokens)} of "
                f"a block's {hidden.shape[1]} tokens, so it cannot measure the pattern"
            )
        fed = tokens[-hidden.shape[1] :]  # a block that sees no class token (CaiT's) takes the patch tokens alone
        hidden[:, -len(fed) :] = fed.to(hidden)
        if args:
            return (hidden, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": hidden}

    handles = [block.register_forward_pre_hook(replace, with_kwargs=True) for block in blocks]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def _attention_only(blocks: list[nn.Module]) -> Iterator[None]:
    """Every timm block's MLP branch (``mlp``) an identity meanwhile: where each block is fed all its tokens, no
    block's output is read, and the MLP is about half of what a block computes."""
    mlps = [(block, block.mlp) for block in blocks if isinstance(getattr(block, "mlp", None), nn.Module)]
    try:
        for block, _ in mlps:
            block.mlp = nn.Identity()
        yield
    finally:
        for block, mlp in mlps:
            block.mlp = mlp


@torch.no_grad()
def attention_maps(
    model: nn.Module, tokens: torch.Tensor | None = None, images: torch.Tensor | None = None, every_token: bool = False
) -> list[torch.Tensor]:
    """``heads x T x T`` per block (of the first image), each block fed ``tokens`` (``... x D``) as its last tokens
    where given; the forward reads ``images`` (default: one all-zero image of the model's size). Eval mode inside.
    ``every_token``: ``tokens`` are all the tokens of every block, so no block's output is read (a timm model's MLPs
    are skipped)."""
    blocks, transformers = _blocks(model)
    training = model.training
    model.eval()
    images = _image(model, transformers) if images is None else images
    try:
        with _fed(blocks, tokens, every_token) if tokens is not None else nullcontext():
            if transformers:
                return _transformers_maps(model, images)
            with _attention_only(blocks) if every_token else nullcontext():
                return _timm_maps(model, blocks, images)
    finally:
        model.train(training)


def _transformers_maps(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """transformers returns the maps with ``output_attentions`` from its eager attention: the config names it for the
    attention interface, and a layer built as an SDPA subclass (Data2VecVision) runs as its eager parent meanwhile.
    ViTMAE's random masking (``mask_ratio``) is off meanwhile, every patch kept in grid order."""
    config, implementation = model.config, model.config._attn_implementation
    mask_ratio = getattr(config, "mask_ratio", None)
    sdpa = [(m, type(m)) for m in model.modules() if "Sdpa" in type(m).__name__]
    inputs = {"pixel_values": images, "output_attentions": True}
    if mask_ratio is not None:  # a noise that sorts to the grid order: no shuffle, and no draw from the global RNG
        patches = math.prod(images.shape[-2:]) // math.prod(to_pair(config.patch_size, "patch_size"))
        inputs["noise"] = torch.arange(patches, dtype=torch.float32, device=images.device).expand(len(images), -1)
    try:
        config._attn_implementation = "eager"
        if mask_ratio is not None:
            config.mask_ratio = 0.0
        for module, cls in sdpa:
            module.__class__ = cls.__mro__[1]
        maps = model(**inputs).attentions
    finally:
        config._attn_implementation = implementation
        if mask_ratio is not None:
            config.mask_ratio = mask_ratio
        for module, cls in sdpa:
            module.__class__ = cls
    return [m[0].float() for m in maps]


def _timm_maps(model: nn.Module, blocks: list[nn.Module], images: torch.Tensor) -> list[torch.Tensor]:
    maps: list[torch.Tensor] = []
    keep = lambda module, args, output: maps.append(args[0][0].float())  # noqa: E731
    handles = [block.attn.attn_drop.register_forward_hook(keep) for block in blocks]
    try:
        with unfused_attention(model):
            model.forward_features(images)
    finally:
        for handle in handles:
            handle.remove()
    return maps


def block_patterns(
    model: nn.Module,
    shifts: list[list[list[int]]],
    grid: tuple[int, int],
    tokens: torch.Tensor,
    prefix_tokens: torch.Tensor | None = None,
) -> list[dict[str, float]]:
    """Per block: ``target_mass`` (mean attention on each head's target over the queries whose target is inside the
    grid), ``hit_rate`` (share of those queries whose largest weight is the target) and ``uniform`` (``1 / keys``), with
    every block fed ``tokens`` (``N x D``) as its patch tokens, after ``prefix_tokens`` (``P x D``) where given (else
    the class and register tokens the model makes from an all-zero image)."""
    fed = tokens if prefix_tokens is None else torch.cat([prefix_tokens.to(tokens), tokens])
    return target_patterns(attention_maps(model, fed, every_token=prefix_tokens is not None), shifts, grid)


def target_patterns(maps: list[torch.Tensor], shifts: list[list[list[int]]], grid: tuple[int, int]) -> list[dict]:
    """:func:`block_patterns`' figures of given maps (``heads x T x T`` per block, the patch tokens last)."""
    rows = []
    for block_maps, block in zip(maps, shifts, strict=True):
        prefix = block_maps.shape[-1] - grid[0] * grid[1]  # class and register tokens come first
        target, valid = shift_index(grid, torch.tensor(block, dtype=torch.long))
        fidelity = index_fidelity(block_maps[:, prefix:].cpu(), target + prefix, valid)
        rows.append({**{k: round(v, 4) for k, v in fidelity.items()}, "uniform": round(1 / block_maps.shape[-1], 4)})
    return rows


def require_pattern(model: nn.Module, rows: list[dict[str, float]]) -> None:
    """Raise :class:`InitRefused` unless every block's target mass is at least :data:`MIN_GAIN` x uniform and its hit
    rate at least :data:`MIN_HIT_RATE`."""
    for index, row in enumerate(rows):
        if not (row["target_mass"] >= MIN_GAIN * row["uniform"] and row["hit_rate"] >= MIN_HIT_RATE):
            raise InitRefused(
                model,
                f"impulse init reached {row['target_mass']:.4f} attention on target in block {index}, hit rate "
                f"{row['hit_rate']:.3f} (needs {MIN_GAIN:g} x uniform = {MIN_GAIN * row['uniform']:.4f} and a hit "
                f"rate of {MIN_HIT_RATE:g}); the model is left as it was",
            )
