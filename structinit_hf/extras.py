"""The optional parts of the package and the extras that install them.

``import structinit_hf`` needs torch and timm only. The transformers route, the training application and the
benchmarks need more. A script imports the application inside :func:`~structinit_hf.cli.script_imports`, which
turns a missing package of an extra into one line naming the extra to install (:func:`missing_extra_message`).
"""

from __future__ import annotations

from importlib.util import find_spec

__all__ = ["EXTRAS", "extra_for", "missing_extra_message"]

# extra -> the importable modules it installs (setup.cfg's [options.extras_require] lists their distributions)
EXTRAS = {
    "train": ("transformers", "accelerate", "datasets", "torchvision", "PIL", "jinja2", "numpy", "tqdm"),
    "bench": ("matplotlib",),
    "tensorboard": ("tensorboard",),
}


def extra_for(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name such as ``"accelerate.utils"``), or ``None``."""
    top = (module or "").partition(".")[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


def missing_extra_message(error: ModuleNotFoundError, user: str) -> str | None:
    """``"<user> needs <module> (the 'train' extra): pip install 'structinit-hf[train]'"`` for a module of an extra
    that is not installed; ``None`` when ``error`` is about any other module (a bug, not a missing extra)."""
    top = (error.name or "").partition(".")[0]
    extra = extra_for(top)
    if extra is None or (top != error.name and find_spec(top) is not None):
        return None  # a part of an installed package is missing: a version to fix, not an extra to install
    return f"{user} needs {top} (the {extra!r} extra): pip install 'structinit-hf[{extra}]'"
