"""structinit-hf: structured (impulse) attention initialization for Vision Transformers.

Importing the package registers its models with timm (``timm.list_models("*impulse*")``) and with
the transformers Auto classes (``model_type="structinit_vit"``).
"""

from . import timm_models  # noqa: F401  (registers the models with timm)
from .export import save_checkpoint
from .hf import StructInitViTConfig, StructInitViTForImageClassification, StructInitViTModel
from .impulse import impulse_shifts, impulse_targets, pseudo_input, sincos_2d, solve_qk
from .init import INIT_METHODS, ImpulseOptions, apply_structured_init
from .mimetic import mimetic_qk, mimetic_vo

__version__ = "0.1.0"

__all__ = [
    "INIT_METHODS",
    "ImpulseOptions",
    "StructInitViTConfig",
    "StructInitViTForImageClassification",
    "StructInitViTModel",
    "apply_structured_init",
    "impulse_shifts",
    "impulse_targets",
    "mimetic_qk",
    "mimetic_vo",
    "pseudo_input",
    "save_checkpoint",
    "sincos_2d",
    "solve_qk",
]
