"""The norm-matched control of an init: what the init wrote, redrawn at random at the init's own norms.

A structured init changes two things at once: the *pattern* of the tensors it writes (an impulse in Q/K and the
position code, mimetic's identity) and their *scale*. The control keeps the scale and drops the pattern: every
element the init changed is redrawn from a Gaussian and rescaled so that each group of them has the norm the init
gave it, everything it left alone stays as it was. A group is one head's rows of a query/key/value projection
(weights and biases: the inits work per head there) and a whole tensor elsewhere (the position code, the output
projection, a relative-position bias MLP or table). The attention branch's layer scale is the one exception: a
constant per channel has a norm and no pattern, so the control keeps the value the init opened it to.

Family-agnostic by construction: it reads what changed, not where a family keeps its weights, so any model an init
takes has its control. Pure torch.
"""

from __future__ import annotations

import torch
from torch import nn

from .common import seeded_generator
from .layer_scale import attention_scales

__all__ = ["CONTROLS", "norm_matched", "validate_control"]

CONTROLS = ("normmatched",)  # an init's ``control`` option; None: the init itself

# the projections whose rows an attention splits into heads (timm's qkv, q/k/v biases; transformers' query/key/value)
_HEAD_ROWS = ("qkv", "q", "k", "v", "q_proj", "k_proj", "v_proj", "query", "key", "value", "q_bias", "k_bias",
              "v_bias")  # fmt: skip


def validate_control(value: str | None) -> None:
    """``control``: ``None`` (the init itself) or one of :data:`CONTROLS`."""
    if value is not None and value not in CONTROLS:
        raise ValueError(f"unknown control {value!r}; expected None (the init itself) or one of {', '.join(CONTROLS)}")


def _head_size(modules: dict[str, nn.Module], name: str) -> int | None:
    """The head dimension of the attention module that owns tensor ``name`` (the nearest enclosing module that says
    it: timm's ``head_dim``, transformers' ``attention_head_size``), if the tensor splits into heads by rows."""
    parts = name.split(".")
    if parts[-1] in ("weight", "bias"):
        parts = parts[:-1]
    if not parts or parts[-1] not in _HEAD_ROWS:
        return None
    for end in range(len(parts) - 1, -1, -1):
        module = modules.get(".".join(parts[:end]))
        for attribute in ("head_dim", "attention_head_size"):
            size = getattr(module, attribute, None)
            if isinstance(size, int) and size > 0:
                return size
    return None


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(tensor.shape[0] if tensor.dim() else 1, -1)  # rows x the rest


def _redraw(before: torch.Tensor, after: torch.Tensor, rows: int | None, generator: torch.Generator) -> torch.Tensor:
    """``after`` with every element that differs from ``before`` redrawn: Gaussian, each group at ``after``'s norm
    over its changed elements (a group: ``rows`` rows of dim 0, or the whole tensor)."""
    after32, changed = _flat(after.detach().float().cpu()), _flat(after != before).cpu()
    noise = torch.randn(after32.shape, generator=generator)
    out = torch.where(changed, torch.zeros(()), after32)
    groups = after32.shape[0] // rows if rows and after32.shape[0] % rows == 0 else 1
    for target, drawn, mask, group in zip(*(t.chunk(groups) for t in (after32, noise, changed, out)), strict=True):
        if mask.any():
            group[mask] = drawn[mask] * (target[mask].norm() / drawn[mask].norm())
    return out.reshape(after.shape).to(after)


def norm_matched(model: nn.Module, before: dict[str, torch.Tensor], seed: int) -> list[str]:
    """Replace what an init wrote into ``model`` by its norm-matched control; ``before`` holds every parameter and
    buffer as they were before the init (by name). Returns the names of the tensors redrawn.

    The draw is seeded by ``seed`` (the init's): the same model, init and seed give the same control."""
    generator = seeded_generator(int(seed) + 7919)  # not the init's own stream
    modules = dict(model.named_modules())
    kept = {id(scale) for scale in attention_scales(model)}
    redrawn = []
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            old = before.get(name)
            if old is None or id(tensor) in kept or tensor.is_meta or torch.equal(old, tensor):
                continue
            tensor.copy_(_redraw(old, tensor, _head_size(modules, name), generator))
            redrawn.append(name)
    return redrawn
