"""structinit-hf: structured (impulse) attention initialization for Vision Transformers.

Importing the package registers its models with timm (``timm.list_models("*impulse*")``) and loads only what that
needs (torch, timm). transformers reaches the models through its own ``TimmWrapperConfig``; this package's
transformers names (:mod:`structinit_hf.models.timm_wrapper`: ``StructInitViTConfig`` and its ``model_type``
``structinit_vit``) register with transformers as soon as both are imported, in either order, and
:func:`save_checkpoint` loads on first use. The training application (``structinit_hf.train``,
``structinit_hf.benchmark`` ...) needs the ``train`` extra.
"""

import importlib.abc
import importlib.util
import sys
from importlib import import_module

from .init.apply import InitRefused, apply_structured_init, init_refusal
from .init.impulse import impulse_shifts, impulse_targets, pseudo_input, sincos_2d
from .init.mimetic import mimetic_qk, mimetic_vo
from .init.options import INIT_METHODS, ImpulseOptions
from .init.solvers import solve_qk
from .models import convit_baseline, structinit_mixer, structinit_swin, structinit_vit  # noqa: F401  (registers)
from .models.structinit_mixer import StructInitMlpMixer
from .models.structinit_swin import StructInitSwinTransformer
from .models.structinit_vit import StructInitVisionTransformer

__version__ = "0.2.0"

# loaded on first use: they import transformers, which a timm user does not need
_LAZY = {
    "StructInitViTConfig": "models.timm_wrapper",
    "StructInitViTForImageClassification": "models.timm_wrapper",
    "StructInitViTModel": "models.timm_wrapper",
    "save_checkpoint": "models.timm_wrapper",
}

__all__ = [
    "INIT_METHODS",
    "ImpulseOptions",
    "InitRefused",
    "StructInitViTConfig",
    "StructInitViTForImageClassification",
    "StructInitViTModel",
    "StructInitMlpMixer",
    "StructInitSwinTransformer",
    "StructInitVisionTransformer",
    "apply_structured_init",
    "impulse_shifts",
    "impulse_targets",
    "init_refusal",
    "mimetic_qk",
    "mimetic_vo",
    "pseudo_input",
    "save_checkpoint",
    "sincos_2d",
    "solve_qk",
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_LAZY[name]}", __name__), name)


def __dir__() -> list[str]:
    """The module's names and the lazy ones (``dir()`` and tab completion list them before their first use)."""
    return sorted({*globals(), *_LAZY})


class _RegisterWithTransformers(importlib.abc.MetaPathFinder):
    """Registers :mod:`.models.timm_wrapper` (``model_type`` ``structinit_vit``) right after ``transformers`` is first
    imported, so a folder of that type loads whether this package or transformers was imported first. Finds nothing
    itself: it wraps the regular spec's loader once, then leaves ``sys.meta_path``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "transformers":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module) -> None:
            exec_module(module)
            try:
                import_module(".models.timm_wrapper", __name__)
            except ImportError:  # a transformers without TimmWrapper: the names fail on first use, saying why
                pass

        spec.loader.exec_module = exec_then_register
        return spec


if "transformers" in sys.modules:  # transformers already loaded: register model_type structinit_vit now
    import_module(".models.timm_wrapper", __name__)
elif importlib.util.find_spec("transformers") is not None:
    sys.meta_path.insert(0, _RegisterWithTransformers())
