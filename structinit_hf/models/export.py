"""Write a checkpoint folder that stock timm and stock transformers load, without this package.

The folder is transformers' ``timm_wrapper`` format, as timm's own Hub checkpoints are: ``config.json`` names a
stock timm architecture with the ``model_args`` that rebuild the network, its data cfg (``pretrained_cfg``) and
the init the model started from (``structinit``); ``model.safetensors`` has timm's state-dict keys.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import TimmWrapperPreTrainedModel

from ..atomic import replace_folder
from .timm_wrapper import stock_timm_config

__all__ = ["save_checkpoint", "write_checkpoint"]


def save_checkpoint(
    model: torch.nn.Module, out_dir: str | os.PathLike, *, label_names: Sequence[str] | None = None
) -> Path:
    """Save ``model`` to ``out_dir`` and return the folder.

    ``model`` is a timm model built by one of this package's names, or a transformers ``TimmWrapper`` model around
    one. The folder loads with ``timm.create_model("local-dir:<out_dir>", pretrained=True)``,
    ``AutoModelForImageClassification.from_pretrained(out_dir)`` and ``pipeline("image-classification", out_dir)``,
    none of which needs structinit_hf or ``trust_remote_code``. ``label_names`` (one per class) become the model's
    ``id2label``. The folder is written beside ``out_dir`` and moved into place when complete, so an existing
    checkpoint is never left half-replaced.
    """
    return replace_folder(out_dir, lambda folder: write_checkpoint(model, folder, label_names=label_names))


def write_checkpoint(
    model: torch.nn.Module, folder: str | os.PathLike, *, label_names: Sequence[str] | None = None
) -> None:
    """Write :func:`save_checkpoint`'s files into the existing ``folder`` (no atomic swap: the caller's job)."""
    timm_model = model.timm_model if isinstance(model, TimmWrapperPreTrainedModel) else model
    config = stock_timm_config(timm_model, None if label_names is None else [str(name) for name in label_names])
    config.save_pretrained(folder)
    state = {key: value.detach().contiguous() for key, value in timm_model.state_dict().items()}
    save_file(state, Path(folder) / "model.safetensors", metadata={"format": "pt"})
