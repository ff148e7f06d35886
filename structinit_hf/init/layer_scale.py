"""The layer scale of a block's attention branch: where each timm or transformers block keeps it, which of them the
impulse opens by default, and setting it.

Layer scale (CaiT, DeiT-III) multiplies each residual branch by a learned per-channel ``gamma`` that starts small
(timm: 1e-6 in ``deit3_*`` and ``vit_relpos_*``, 1e-5 in the rotary ViTs of ``eva.py``). At 1e-5 an attention
pattern written by an init reaches the residual stream scaled to almost nothing until the scale has grown; the
impulse init's ``attn_layer_scale`` opens the attention branch to a chosen value and leaves the MLP branch as built.

:data:`LAYER_SCALES` is the one table of the blocks whose attention-branch scale the init finds (by class, pure torch:
no timm or transformers import) and of the ones it opens by default: only the classes the campaign measured, and only
at the value those models are built with, so a scale the user chose (``init_values=1e-5`` on DeiT-III) or trained is
kept. docs/method.md's coverage table lists the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from .check import InitRefused

__all__ = [
    "KEEP",
    "LAYER_SCALES",
    "LayerScaleSite",
    "attention_layer_scale",
    "attention_scales",
    "default_layer_scale",
    "layer_scale_plan",
    "layer_scale_sites",
    "open_attention_scale",
    "scale_line",
    "set_attention_scale",
]

# the ``attn_layer_scale`` value that keeps the model's own layer scale, on every route (``None``: not given)
KEEP: Literal["model"] = "model"


@dataclass(frozen=True)
class LayerScaleSite:
    """One block class with a layer scale on its attention branch.

    Attributes:
        library: ``"timm"`` or ``"transformers"``.
        module: the module that defines the block class (a prefix of its ``__module__``).
        block: the block's class name.
        attribute: where the block keeps the attention branch's scale (a dotted path from the block).
        models: the models built with it, and the value they start the scale at.
        opens: ``(built, opened)`` where the impulse opens the scale by default: a block whose scale is ``built``
            everywhere starts at ``opened`` unless ``attn_layer_scale`` is given (the campaign's measured models);
            ``None``: kept as built unless given.
    """

    library: str
    module: str
    block: str
    attribute: str
    models: str
    opens: tuple[float, float] | None = None


LAYER_SCALES: tuple[LayerScaleSite, ...] = (
    LayerScaleSite(
        "timm", "timm.models.vision_transformer", "Block", "ls1.gamma",
        "DeiT-III (`deit3_*`, 1e-6; opened: measured), DINOv2 (`vit_*_dinov2*`, 1e-5), any ViT built with "
        "`init_values`", opens=(1e-6, 1.0),
    ),
    LayerScaleSite("timm", "timm.models.vision_transformer_relpos", "RelPosBlock", "ls1.gamma",
                   "the relative-position ViTs (`vit_relpos_*`, 1e-6; measured: no option paid)"),
    LayerScaleSite(
        "timm", "timm.models.eva", "EvaBlock", "gamma_1",
        "the RoPE ViTs (`vit_*_rope_*`, 1e-5; opened: measured), EVA-02 and PE where built with `init_values`",
        opens=(1e-5, 1.0),
    ),
    LayerScaleSite("timm", "timm.models.cait", "LayerScaleBlock", "gamma_1",
                   "CaiT's self-attention blocks (`cait_*`, 1e-5 or 1e-6; not its class-attention blocks)"),
    LayerScaleSite("timm", "timm.models.beit", "Block", "gamma_1", "BEiT (`beit_*`, `init_values` 0.1)"),
    LayerScaleSite("transformers", "transformers.models.beit", "BeitLayer", "lambda_1",
                   "BEiT (`layer_scale_init_value` 0.1)"),
    LayerScaleSite("transformers", "transformers.models.data2vec", "Data2VecVisionLayer", "lambda_1",
                   "Data2VecVision (`layer_scale_init_value` 0.1)"),
    LayerScaleSite("transformers", "transformers.models.dinov2", "Dinov2Layer", "layer_scale1.lambda1",
                   "DINOv2 (`layerscale_value`: 1.0 by default, 1e-5 in the `facebook/dinov2-*` checkpoints)"),
)  # fmt: skip


def _site_of(block: nn.Module) -> LayerScaleSite | None:
    for klass in type(block).__mro__:
        for site in LAYER_SCALES:
            if klass.__name__ == site.block and klass.__module__.startswith(site.module):
                return site
    return None


def _scale_of(block: nn.Module, site: LayerScaleSite) -> nn.Parameter | None:
    value: object = block
    for name in site.attribute.split("."):
        value = getattr(value, name, None)
    return value if isinstance(value, nn.Parameter) else None  # built without layer scale: None or an Identity


def layer_scale_sites(model: nn.Module) -> list[tuple[LayerScaleSite, nn.Parameter]]:
    """Every block of ``model`` that scales its attention branch: its row of :data:`LAYER_SCALES` and the scale."""
    found = ((site, _scale_of(block, site)) for block in model.modules() if (site := _site_of(block)) is not None)
    return [(site, scale) for site, scale in found if scale is not None]


def attention_scales(model: nn.Module) -> list[nn.Parameter]:
    """The attention branch's layer scale of every block of ``model`` that has one, in module order."""
    return [scale for _, scale in layer_scale_sites(model)]


def attention_layer_scale(model: nn.Module) -> float | None:
    """The mean attention-branch layer scale over ``model``'s blocks (as it stands: read at init, what the model
    starts with), rounded to 4 significant digits; ``None`` where no block has one (the branch is not scaled)."""
    scales = attention_scales(model)
    if not scales or any(scale.is_meta for scale in scales):
        return None
    with torch.no_grad():
        mean = torch.cat([scale.detach().float().flatten().cpu() for scale in scales]).mean().item()
    return float(f"{mean:.4g}")


def default_layer_scale(model: nn.Module) -> float | None:
    """The scale the impulse opens ``model``'s attention branch to when ``attn_layer_scale`` is not given: the
    ``opened`` value of its blocks' row where every block is a row that opens and its scale is that row's ``built``
    value throughout (a scale set to anything else, by the user or by training, is theirs); else ``None``."""
    found = layer_scale_sites(model)
    if not found or any(site.opens is None or scale.is_meta for site, scale in found):
        return None
    opened = {site.opens[1] for site, _ in found}
    with torch.no_grad():
        at_built = all(
            torch.allclose(scale.detach().float(), torch.full_like(scale, site.opens[0], dtype=torch.float32),
                           rtol=1e-3, atol=0.0)
            for site, scale in found
        )  # fmt: skip
    return opened.pop() if at_built and len(opened) == 1 else None


def set_attention_scale(model: nn.Module, value: float) -> int:
    """Fill the attention branch's layer scale of every block of ``model`` with ``value``; how many blocks."""
    scales = attention_scales(model)
    with torch.no_grad():
        for scale in scales:
            scale.fill_(value)
    return len(scales)


def open_attention_scale(model: nn.Module, value: float) -> None:
    """Start every block's attention-branch layer scale at ``value`` (the impulse's ``attn_layer_scale``)."""
    if not set_attention_scale(model, value):
        raise InitRefused(
            model, f"has no layer scale on its attention branch for attn_layer_scale={value!r} to set (the option is "
            "for layer-scaled ViTs: docs/method.md lists where each keeps it)"
        )  # fmt: skip


def layer_scale_plan(model: nn.Module, given: Any) -> tuple[float | None, str | None]:
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


def scale_line(model: nn.Module, before: float | None, after: float, source: str) -> str:
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
