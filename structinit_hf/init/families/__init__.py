"""Each init family's constructions behind one interface: a module per family with

- ``impulse_init(model, options)``: write the impulse (``options``: the family's options class, filled in), record
  ``model.structinit_shifts`` and, where the family has one, run the self-check;
- ``mimetic_init(model, seed)``: mimetic init (``None`` where the family has no attention: the Mixer).

:mod:`..apply` only dispatches to them, checks and restores; what applies to every family (the norm-matched control,
mimetic MLPs, the attention layer scale) lives beside it in :mod:`..control`, :mod:`..mlp`, :mod:`..layer_scale`.
"""

from __future__ import annotations

from types import ModuleType

from . import mixer, relative, swin, vit

__all__ = ["FAMILY_INITS"]

# init family (structinit_hf.init.options.FAMILIES) -> its constructions
FAMILY_INITS: dict[str, ModuleType] = {"vit": vit, "swin": swin, "mixer": mixer, "relpos": relative, "rope": relative}
