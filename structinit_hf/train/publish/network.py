"""What a model card says about the network a checkpoint holds: its timm class and geometry, read off the network
itself (built on the meta device from the checkpoint's ``config.json``: no weights, no init), not off its name.

A checkpoint of this package's names is saved under a stock timm name with the ``model_args`` that rebuild it (a
width-48 ViT under ``vit_base_patch16_224``): the name alone would describe another network.
"""

from __future__ import annotations

from typing import Any

import timm
import torch
from torch import nn

__all__ = ["NETWORK_KINDS", "describe_network"]

# timm classes -> how a card's first sentence names them; any other class is named by its own name
NETWORK_KINDS = {
    "VisionTransformer": "Vision Transformer",
    "Eva": "Vision Transformer with rotary position embedding (timm's `Eva`)",
    "VisionTransformerRelPos": "Vision Transformer with relative position bias",
    "SwinTransformer": "Swin Transformer",
    "MlpMixer": "MLP-Mixer",
    "ConVit": "ConViT",
}


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The residual blocks that mix tokens: attention blocks, and a Mixer's token-MLP blocks."""
    return [
        block
        for block in model.modules()
        if isinstance(getattr(block, "attn", None), nn.Module) or hasattr(block, "mlp_tokens")
    ]


def _pair(value: Any) -> str:
    height, width = value if isinstance(value, (tuple, list)) else (value, value)
    return f"{height} x {width}"


def _geometry(model: nn.Module) -> str:
    """``width 48, depth 1, 3 heads, patch 4 x 4 on 16 x 16 px (4 x 4 = 16 tokens)``: what the network has."""
    words = []
    width, last = getattr(model, "embed_dim", None), getattr(model, "num_features", None)
    if isinstance(width, int):
        words.append(f"width {width}" + (f" to {last}" if isinstance(last, int) and last != width else ""))
    blocks = _blocks(model)
    if blocks:
        words.append(f"depth {len(blocks)}")
    heads = next((block.attn.num_heads for block in blocks if hasattr(block.attn, "num_heads")), None)
    if heads:
        words.append(f"{heads} head{'s' if heads != 1 else ''}" + (" (first stage)" if last != width else ""))
    embed = getattr(model, "patch_embed", None) or getattr(model, "stem", None)
    patch, grid = getattr(embed, "patch_size", None), getattr(embed, "grid_size", None)
    if patch is not None and grid is not None:
        tokens = grid[0] * grid[1]
        image = getattr(embed, "img_size", None)
        on = f" on {_pair(image)} px" if image is not None else ""
        words.append(f"patch {_pair(patch)}{on} ({_pair(grid)} = {tokens} tokens)")
    return ", ".join(words)


def describe_network(architecture: str, model_args: dict[str, Any]) -> dict[str, str | None]:
    """The timm class (``network_class``), the card's name for it (``network_kind``) and the geometry (``geometry``)
    of ``timm.create_model(architecture, **model_args)``; ``None`` each where timm cannot build it here (a name this
    installation does not know)."""
    try:
        with torch.device("meta"):
            model = timm.create_model(architecture, pretrained=False, **model_args)
    except Exception:  # noqa: BLE001  any name or argument timm refuses: the card names the architecture alone
        return dict(network_class=None, network_kind=None, geometry=None)
    name = type(model).__name__
    return dict(
        network_class=name, network_kind=NETWORK_KINDS.get(name, f"timm `{name}` network"), geometry=_geometry(model)
    )
