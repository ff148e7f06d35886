"""The trained model in ``final/``: a folder that timm and transformers both load, each file written once.

A timm model is written by :func:`structinit_hf.models.timm_wrapper.write_checkpoint`: one of this package's as a
stock ``timm_wrapper`` folder under a stock timm name, another (timm's own, a loaded checkpoint among them) in timm's
format, which transformers loads through its ``TimmWrapper``, each with the init it started from. A transformers
model is saved with ``save_pretrained``, beside the image processor it was loaded with (if any), so
``AutoImageProcessor`` and evaluation read the trained folder as they read the original. A fine-tuned model's
``config.json`` keeps the init record of the checkpoint it came from (``structinit``) and names it
(``fine_tuned_from``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from ...atomic import replace_folder
from ...models.timm_wrapper import write_checkpoint
from .loading import ClassifierLogits

__all__ = ["save_final_model"]


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
        if isinstance(model, ClassifierLogits) and not hasattr(getattr(network, "timm_model", network), "network_args"):
            model.model.config.update(extra)  # the record of the model saved: its parent
            model.model.save_pretrained(folder)
            if model.processor is not None:
                model.processor.save_pretrained(folder)
        else:  # a timm model (this package's, or timm's own with the init it started from), or a wrapper around ours
            write_checkpoint(network, folder, label_names=label_names, extra_config=extra)

    return replace_folder(out_dir, write)
