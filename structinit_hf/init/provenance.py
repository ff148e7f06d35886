"""What an init records on a model beyond its attention: the records it keeps (:data:`RECORDS`), which of the last
inits' records stay through one that leaves their weights alone, and a run's view of them (:func:`init_record`)."""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["RECORDS", "init_record", "kept_records"]

# what an init records on the model; a failed init leaves the last one's. The shifts and the check are the last init's;
# what a family default or a given scale wrote (structinit_defaults, structinit_layer_scale) stays while the weights
# hold it, through later inits that leave it alone; structinit_auto is what init "auto" chose, the last time it ran
RECORDS = ("structinit_shifts", "structinit_check", "structinit_defaults", "structinit_layer_scale", "structinit_auto")


def kept_records(model: nn.Module, method: str, settings: dict, scale_set: bool) -> dict[str, Any]:
    """What the last inits' defaults wrote that this one leaves in the weights (the records that stay)."""
    defaults = dict(model.__dict__.get("structinit_defaults") or {})
    if scale_set:
        defaults.pop("attn_layer_scale", None)
    if method == "mimetic" or settings.get("value_init") == "mimetic":  # value/output written again
        defaults.pop("value_init", None)
    layer_scale = None if scale_set else model.__dict__.get("structinit_layer_scale")
    return {"structinit_defaults": defaults, "structinit_layer_scale": layer_scale}


def init_record(model: nn.Module) -> dict[str, Any]:
    """What the weights hold beyond the last init's settings, for a run's init record: the family defaults in force
    (:attr:`structinit_defaults`) and, where the model has a layer scale, its value and where it came from
    (``attn_layer_scale_source``: ``"family default"``, ``"given"`` or ``"model's own"``)."""
    record = dict(model.__dict__.get("structinit_defaults") or {})
    layer_scale = model.__dict__.get("structinit_layer_scale")
    if layer_scale is not None:
        if layer_scale["source"] != "model's own":
            record["attn_layer_scale"] = layer_scale["attn_layer_scale"]
        record["attn_layer_scale_source"] = layer_scale["source"]
    return record
