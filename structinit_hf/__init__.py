"""structinit-hf: structured (impulse) attention initialization for Vision Transformers.

Importing the package registers its models with timm (``timm.list_models("*impulse*")``); transformers reaches
them through its own ``TimmWrapperConfig`` (see :mod:`structinit_hf.hf`).
"""

from . import timm_models  # noqa: F401  (registers the models with timm)
from .export import save_checkpoint
from .hf import StructInitViTConfig, StructInitViTForImageClassification, StructInitViTModel
from .impulse import impulse_shifts, impulse_targets, pseudo_input, sincos_2d, solve_qk
from .init import INIT_METHODS, ImpulseOptions, apply_structured_init
from .mimetic import mimetic_qk, mimetic_vo
from .timm_models import StructInitVisionTransformer

__version__ = "0.1.0"

__all__ = [
    "INIT_METHODS",
    "ImpulseOptions",
    "StructInitViTConfig",
    "StructInitViTForImageClassification",
    "StructInitViTModel",
    "StructInitVisionTransformer",
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
