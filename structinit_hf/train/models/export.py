"""The trained model in ``final/``: a folder that timm and transformers both load, each file written once.

A model of this package built from its init is written by
:func:`structinit_hf.models.timm_wrapper.write_checkpoint` (a stock ``timm_wrapper`` folder under a stock timm name,
with the init it started from); another timm model (a loaded checkpoint among them) in timm's format, which
transformers loads through its ``TimmWrapper``; a transformers model with ``save_pretrained``, beside the image
processor it was loaded with (if any), so ``AutoImageProcessor`` and evaluation read the trained folder as they read
the original. A fine-tuned model's ``config.json`` keeps the init record of the checkpoint it came from
(``structinit``) and names it (``fine_tuned_from``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from timm.models import save_for_hf
from torch import nn

from ...atomic import replace_folder, write_json
from ...models.timm_wrapper import write_checkpoint
from .loading import ClassifierLogits

__all__ = ["save_final_model", "save_timm_folder"]


def save_final_model(
    model: nn.Module,
    out_dir: Path,
    label_names: list[str],
    *,
    init: dict[str, Any] | None = None,
    fine_tuned_from: dict[str, Any] | None = None,
) -> Path:
    """Write the trained model to ``out_dir`` (beside it, then moved into place) so that timm and transformers both
    load it; ``init`` and ``fine_tuned_from`` are a fine-tuned model's parent record."""
    # a fine-tuned model's own record is empty (loaded, not initialized): it carries its parent's
    extra = {} if fine_tuned_from is None else {"structinit": dict(init or {}), "fine_tuned_from": fine_tuned_from}

    def write(folder: Path) -> None:
        network = model.model if isinstance(model, ClassifierLogits) else model
        if hasattr(getattr(network, "timm_model", network), "network_args"):  # this package's ViTs and ConViT peer
            write_checkpoint(network, folder, label_names=label_names, extra_config=extra)
        elif isinstance(model, ClassifierLogits):
            model.model.config.update(extra)  # the record of the model saved: its parent
            model.model.save_pretrained(folder)
            if model.processor is not None:
                model.processor.save_pretrained(folder)
        else:  # a model of timm's own: a fresh one records the init run on it (--model-kwargs attention_init=...)
            record = extra or ({"structinit": dict(init)} if init else {})
            save_timm_folder(model, folder, label_names, extra_config=record)

    return replace_folder(out_dir, write)


def save_timm_folder(
    model: nn.Module, folder: Path, label_names: list[str], *, extra_config: dict[str, Any] | None = None
) -> None:
    """timm's ``save_for_hf`` folder (``model.safetensors`` + ``config.json``), loadable by transformers' TimmWrapper
    too: ``num_classes`` leaves ``model_args`` (the wrapper passes it itself, and twice is an error), and
    ``extra_config``'s fields join the config."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)  # as save_for_hf does
    with tempfile.TemporaryDirectory(dir=folder) as scratch:  # on the folder's disk: the weights move, not copy
        save_for_hf(model, scratch, model_config={"label_names": label_names}, safe_serialization=True)
        (Path(scratch) / "model.safetensors").replace(folder / "model.safetensors")
        config = json.loads((Path(scratch) / "config.json").read_text())
    config.get("model_args", {}).pop("num_classes", None)
    write_json(folder / "config.json", {**config, **(extra_config or {})})
